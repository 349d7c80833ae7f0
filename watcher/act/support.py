"""Step 4 of the watchdog: what the eval's server supports.

A control API of 3 or more (strict mutations: a parameter it did not know, such as
``dry_run``, is refused, never ignored), and the route itself (a stock 404 means an
older Inspect). What a server cannot do is said once per server and verb, and its
findings keep the hand-off.
"""

from __future__ import annotations

from dataclasses import replace

from watcher.act.pending import Pending
from watcher.discovery import read_server
from watcher.findings import Notice

# control API versions from which a mutation's unknown parameter is refused (400) and
# never silently ignored: below it, a dry_run the server did not know would act
STRICT_SINCE = 3


class Support:
    """Why each server cannot do each verb, once found."""

    def __init__(self) -> None:
        self.cannot: dict[tuple[int, str], str] = {}  # (pid, verb) -> why not

    def why_not(self, pid: int, verb: str) -> str | None:
        return self.cannot.get((pid, verb))

    def check(self, p: Pending, verb: str, at: float) -> tuple[str | None, Notice | None]:
        """Why ``p``'s server cannot be asked ``verb`` (``None``: it can), and the notice
        that says so if this is the first time. Its API version is read again from its
        discovery file first, as it is now."""
        fresh = read_server(p.server.pid)
        if fresh is not None and fresh.socket_path == p.server.socket_path:
            p.server = replace(p.server, api_version=fresh.api_version)
        server = p.server
        why = self.cannot.get((server.pid, verb))
        notice = None
        if why is None and server.api_version < STRICT_SINCE:
            why = (f"its control API version is {server.api_version}; before {STRICT_SINCE} a "
                   "server ignores parameters it does not know, so a dry run could act")
            notice = self.say(server.pid, verb, why, at)
        return why, notice

    def say(self, pid: int, verb: str, why: str, at: float) -> Notice | None:
        """Remember that ``pid`` cannot do ``verb``; the notice, the first time."""
        key = (pid, verb)
        if key in self.cannot:
            return None
        self.cannot[key] = why
        return Notice(kind="watchdog", at=at, details={"pid": pid, "verb": verb},
                      message=f"pid {pid}: the watchdog cannot {verb.replace('_', ' ')} on "
                              f"this eval ({why}); its findings keep the hand-off")
