"""A whole run's interrupt (``run: {interrupt: …}``): ``kill -INT PID`` (the graceful
shutdown, as Ctrl+C) once its share of samples with ``high`` findings is reached, and
only to the process that serves the control socket; never SIGTERM or SIGKILL."""

from __future__ import annotations

import signal

from watcher.act.policy import InterruptSpec
from watcher.discovery import ControlServer, read_server, serving_pid

# the only signal the watchdog ever sends (never SIGTERM, never SIGKILL)
INTERRUPT_SIGNAL = signal.SIGINT


def not_serving(server: ControlServer) -> str | None:
    """Why ``server.pid`` is not known to be the eval process serving its control socket
    (``None``: it is). A discovery file names a pid; only the socket's peer credentials
    say which process serves it. Signalling any other pid it named would stop whatever
    process that is."""
    fresh = read_server(server.pid)
    if fresh is None:
        return f"pid {server.pid} no longer has a control discovery file"
    if fresh.socket_path != server.socket_path:
        return (f"pid {server.pid}'s discovery file names another control socket than the "
                "one this watch read")
    serving = serving_pid(server.socket_path)
    if serving is None:
        return (f"the process serving {server.socket_path} could not be identified (its "
                "peer credentials cannot be read here)")
    if serving != server.pid:
        return (f"its control socket is served by pid {serving}, not by pid {server.pid}, "
                "which its discovery file names")
    return None


def share_words(high: int, total: int, spec: InterruptSpec) -> str:
    return (f"{high} of the run's {total} samples ({high / total:.0%}) have a high finding, "
            f"at least the policy's {spec.share:.0%}")
