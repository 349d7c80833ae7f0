"""Start ``inspect-watch top``: the watch as a library, the screen in front of it.

The watch runs on its own thread (:func:`watcher.app.start`) with one more sink, a
:class:`~watcher.top.model.TopSink`; it is the same watch as ``inspect-watch watch``
(no second polling path), asked for a row per sample and each sample's last events,
following evals launched later (``--follow``), or reading ``--log-dir`` once. The
screen runs on the main thread; ``q``, Ctrl+C, SIGINT and SIGTERM end both, and
Textual gives the terminal back as it found it.
"""

from __future__ import annotations

import signal
import threading
from dataclasses import replace
from typing import Any

from watcher import app
from watcher.exit_codes import ExitCode
from watcher.top.model import Filters, TopSink

# each sample's last events kept for the `e` key
RECENT_EVENTS = 40


def top_options(options: app.WatchOptions) -> app.WatchOptions:
    """The watch ``top`` runs: no output of its own, every finding (the screen filters),
    a row per sample; a live one follows new evals, a log directory is read once."""
    live = options.log_dir is None and not options.replay
    return replace(options, format=None, output=None, quiet=True, min_confidence="low",
                   fail_on=None, sample_detail=True, recent_events=RECENT_EVENTS,
                   follow=live or options.follow, once=not live, jobs=1)


def run_top(options: app.WatchOptions, *, min_confidence: str = "low",
            headless: bool = False, size: tuple[int, int] | None = None) -> ExitCode:
    """Run the screen over the watch until the person quits; the watch's exit code
    (``OK`` when it was stopped by quitting). Raises :class:`watcher.app.OptionsError`."""
    from watcher.top.actions import ControlActions
    from watcher.top.app import TopApp

    sink = TopSink()
    handle = app.start(top_options(options), sinks=[sink])
    live = options.log_dir is None and not options.replay
    screen = TopApp(sink, mode="live" if options.log_dir is None else "logs",
                    read_events=handle.recent_events,
                    filters=Filters(min_confidence=min_confidence),
                    actions=ControlActions() if live else None)
    previous = _on_signals(screen)
    try:
        screen.run(headless=headless, size=size)
    finally:
        _restore(previous)
        handle.stop()
        code = handle.wait(30)
    if code in (None, ExitCode.INTERRUPTED):
        return ExitCode.OK  # quitting the screen is how top ends
    return code


def _on_signals(screen: Any) -> dict[int, Any]:
    """SIGINT and SIGTERM quit the screen as ``q`` does (Ctrl+C in the terminal is a key
    Textual reads; a signal from elsewhere is this)."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def handler(signum: int, frame: Any) -> None:
        screen.stop_requested = True

    return {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}


def _restore(previous: dict[int, Any]) -> None:
    for sig, old in previous.items():
        signal.signal(sig, old)
