"""``inspect-watch mcp``: inspect-watch for coding agents, as a Model Context Protocol server.

:mod:`watcher.mcp.babysitter` holds what the tools do (a watch of every running eval in
the background, its findings in a log an agent reads by cursor, the evals, samples and
events, the launched runs); :mod:`watcher.mcp.server` exposes it over stdio with the
official ``mcp`` SDK (``pip install "inspect-watch[mcp]"``). Acting tools (launch,
release, act on a finding through the watchdog's policy and audit) exist only when the
server was started with ``--act``. docs/agents.md says how an agent uses it.
"""
