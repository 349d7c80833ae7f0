"""Step 6 of the watchdog: the state (``--state``) remembers the episode, saved before
the request goes out, so a restarted watch never acts on it twice.

The watchdog's thread asks; the routing thread (which alone touches the state) saves,
at its next :meth:`Memory.settle`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from watcher.act.pending import Pending
from watcher.state import WatchState

STATE_WAIT = 10.0  # how long a request waits for the state to remember it


class Memory:
    """Episodes waiting to be saved in the state, each with its waiting request."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._intents: list[tuple[str, dict[str, Any], threading.Event, list[str]]] = []

    def remember(self, p: Pending, verb: str) -> str:
        """Have the routing thread save ``p``'s episode before the request: ``ok``,
        ``unsaved`` (the save failed, or took too long) or ``ended``."""
        s = p.finding.sample
        entry = {"verb": verb, "at": self.clock(), "eval_id": s.eval_id,
                 "sample_id": s.sample_id, "epoch": s.epoch, "attempt": s.attempt}
        done = threading.Event()
        answer: list[str] = []
        with self._lock:
            self._intents.append((p.key, entry, done, answer))
        if not done.wait(STATE_WAIT) or not answer:
            return "unsaved"
        return answer[0]

    def settle(self, state: WatchState, save: Callable[[], bool]) -> None:
        """On the routing thread: remember what is about to be acted on, and save."""
        with self._lock:
            intents, self._intents = self._intents, []
        for key, entry, done, answer in intents:
            state.acted[key] = entry
            answer.append("ok" if save() else "unsaved")
            done.set()

    def end(self) -> None:
        """The watch is ending: what waits for the state now would wait for nobody."""
        with self._lock:
            intents, self._intents = self._intents, []
        for _key, _entry, done, answer in intents:
            answer.append("ended")
            done.set()
