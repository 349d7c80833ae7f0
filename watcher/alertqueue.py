"""A bounded queue and one worker thread for alerts (``--on-finding``, ``--notify``).

Alerts talk to the outside world (a user's command, a chat service), which can be slow
or hang. The watch routes findings on one thread to every reporter, so an alert must
never run there: the watch hands each alert to :meth:`AlertWorker.submit`, which never
blocks. When the queue is full the alert is dropped and counted, and the watch says so
with an ``alert_dropped`` notice (the first drop, then at most one a minute). At the end
:meth:`AlertWorker.close` gives the worker a bounded time to finish what is queued, then
cuts short what still runs and says what was not done.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from watcher.findings import Notice

_J = TypeVar("_J")

QUEUE_SIZE = 100  # alerts waiting for the worker (--alert-queue)
DRAIN_SECONDS = 10.0  # how long the end of a watch waits for queued alerts (--alert-drain)
DROP_NOTICE_EVERY = 60.0  # seconds between two notices about drops during a watch
# the sinks' own defaults, here so that a watch's options name them without importing the
# sinks (notify.py and hooks.py: 4 ms of every start-up, for watches that use neither)
HOOK_TIMEOUT = 10.0  # seconds one run of the command may take (--on-finding-timeout)
NOTIFY_MIN_CONFIDENCE = "high"  # (--notify-min-confidence)
NOTIFY_PER_MINUTE = 5  # notifications a minute (--notify-rate)


class AlertWorker(Generic[_J]):
    """Runs ``handle(job)`` for each submitted job, in order, on its own thread.

    ``name`` names the alert in notices (``--on-finding``, ``--notify``); ``unit`` what a
    job is (``finding``). ``idle`` is called between jobs (about every 0.2 s) and once
    more after the last one at the end, so a handler can send what it held back; ``held``
    counts what it still holds (counted as not sent if the end comes first).
    ``cancel`` stops a job that is still running when the drain time is over (a
    command: kill it). Exceptions of ``handle`` are counted as failures; they never
    end the worker.
    """

    def __init__(self, name: str, handle: Callable[[_J], None], *, maxsize: int = QUEUE_SIZE,
                 unit: str = "finding", idle: Callable[[bool], None] | None = None,
                 cancel: Callable[[], None] | None = None,
                 held: Callable[[], int] | None = None) -> None:
        self.name = name
        self.unit = unit
        self.maxsize = max(1, maxsize)
        self._handle = handle
        self._idle = idle
        self._cancel = cancel
        self._held = held
        self._queue: queue.Queue[_J] = queue.Queue(self.maxsize)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._deadline = float("inf")
        self.submitted = 0
        self.done = 0
        self.dropped = 0  # refused: the queue was full
        self.unsent = 0  # still queued when the drain time was over
        self.cut_short = 0  # running when the drain time was over
        self.errors = 0  # ``handle`` raised
        self.failed = 0  # handled, but the alert did not get through (count_failure)
        self._busy = False
        self._abandoned = False
        self._noticed_drops = 0
        self._last_drop_notice = 0.0
        self._notices: list[Notice] = []

    def count_failure(self) -> None:
        """A handler's alert did not get through (a command failed, a service refused)."""
        with self._lock:
            self.failed += 1

    @property
    def closing(self) -> bool:
        """The watch is ending (what runs now may be cut short)."""
        return self._closing.is_set()

    # -- the watch's side ------------------------------------------------------

    def submit(self, job: _J) -> bool:
        """Queue ``job``; False (and counted) if the queue is full. Never blocks."""
        with self._lock:
            if self._closing.is_set():
                return False
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"alerts {self.name}",
                                                daemon=True)
                self._thread.start()
            self.submitted += 1
            try:
                self._queue.put_nowait(job)
            except queue.Full:
                self.dropped += 1
                return False
        return True

    def pop_notices(self) -> list[Notice]:
        """Notices for the watch to route: drops so far (rate-limited), what ``close`` said."""
        now = time.time()
        with self._lock:
            new = self.dropped - self._noticed_drops
            if new and (not self._noticed_drops or now - self._last_drop_notice
                        >= DROP_NOTICE_EVERY) and not self._closing.is_set():
                self._noticed_drops = self.dropped
                self._last_drop_notice = now
                self._notices.append(Notice(
                    kind="alert_dropped", at=now,
                    message=f"{self.name}: its queue of {self.maxsize} is full (it is slower "
                    f"than {self.unit}s arrive): {self.dropped} {self.unit}(s) dropped so far; "
                    "the watch and its other outputs go on",
                    details={"alert": self.name, "dropped": self.dropped}))
            out, self._notices = self._notices, []
        return out

    def close(self, timeout: float = DRAIN_SECONDS) -> None:
        """Let the worker finish what is queued within ``timeout`` seconds, then stop it.

        What was dropped, left queued or cut short is said in one ``alert_dropped``
        notice (see :meth:`pop_notices`); nothing is said when every job was handled.
        """
        with self._lock:
            if self._closing.is_set():
                return
            self._deadline = time.monotonic() + max(0.0, timeout)
            self._closing.set()
            thread = self._thread
        if thread is not None:
            try:
                thread.join(max(0.0, timeout))
            except KeyboardInterrupt:  # a second Ctrl+C: stop waiting, still say what was lost
                self._deadline = time.monotonic()
            if thread.is_alive():
                with self._lock:
                    busy = self._busy
                if busy and self._cancel is not None:
                    self._cancel()
                thread.join(5.0)
            with self._lock:
                if thread.is_alive() and self._busy:
                    self._abandoned = True  # a handler that cannot be stopped: leave it
                    self.cut_short += 1
        held = self._held() if self._held is not None else 0
        with self._lock:
            while True:
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    break
                self.unsent += 1
            self.unsent += held
            lost = self.dropped + self.unsent + self.cut_short
            if lost:
                parts = []
                if self.dropped:
                    parts.append(f"{self.dropped} dropped while its queue of {self.maxsize} "
                                 "was full")
                if self.unsent:
                    parts.append(f"{self.unsent} still queued when the watch ended")
                if self.cut_short:
                    parts.append(f"{self.cut_short} cut short")
                waited = (f" (the end of the watch waited {timeout:g} s for them: "
                          "--alert-drain)" if self.unsent or self.cut_short else "")
                self._notices.append(Notice(
                    kind="alert_dropped", at=time.time(),
                    message=f"{self.name}: {lost} of {self.submitted} {self.unit}(s) not "
                    f"handled: {', '.join(parts)}{waited}",
                    details={"alert": self.name, "submitted": self.submitted,
                             "dropped": self.dropped, "unsent": self.unsent,
                             "cut_short": self.cut_short}))
            failed = self.failed + self.errors
            if failed:
                self._notices.append(Notice(
                    kind="alert_failed", at=time.time(),
                    message=f"{self.name}: {failed} alert(s) did not get through (each "
                    "failure was said on stderr)",
                    details={"alert": self.name, "failed": failed}))

    # -- the worker ------------------------------------------------------------

    def _run(self) -> None:
        while True:
            if self._closing.is_set() and time.monotonic() >= self._deadline:
                return
            try:
                job = self._queue.get(timeout=0.2)
            except queue.Empty:
                if self._closing.is_set():
                    self._call_idle(final=True)
                    return
                self._call_idle(final=False)
                continue
            with self._lock:
                self._busy = True
            try:
                self._handle(job)
            except Exception as e:  # noqa: BLE001 - an alert never ends the worker
                with self._lock:
                    self.errors += 1
                print(f"inspect-watch: {self.name} failed ({type(e).__name__}: {e}); the "
                      "watch goes on", file=sys.stderr)
            finally:
                with self._lock:
                    self._busy = False
                    if self._abandoned:
                        pass  # counted by close
                    elif self._closing.is_set() and time.monotonic() >= self._deadline:
                        self.cut_short += 1  # it ran past the drain time (and was cancelled)
                    else:
                        self.done += 1

    def _call_idle(self, final: bool) -> None:
        if self._idle is None:
            return
        try:
            self._idle(final)
        except Exception:  # noqa: BLE001 - as in _run
            with self._lock:
                self.errors += 1
