"""A task's own pace: how long its completed model and tool calls took.

One idle threshold cannot serve a quick QA task (3 s generations: stuck long before
600 s) and an agentic task whose builds legitimately take minutes. So the ``idle``
detector (``learn:``) compares an in-flight call with what the same task's completed
calls of the same kind took: model calls per model, tool calls per function.

Each sample attempt has a :class:`CallClock` that sees its completed events in order
(the engine's ``SampleWatch.feed``) and records each call's duration into the task's
:class:`Pace`, shared by the task's samples:

- exactly, ``completed - timestamp``, where the event says when it completed (a raw
  event: a log, the sample buffer, the ``full`` tier);
- otherwise (the control channel's compact events carry only the start) as the time to
  the sample's next event, an upper bound: for a model call, the next event of any
  type; for a tool call, the next event that is not a tool call (the calls of one turn
  may run side by side, and each then counts the whole turn). A call followed by
  nothing the watch reads (the last of its sample) is not counted.

Calls that ended in an error (a timeout, a refusal) are not counted: they are not what
a normal call takes. A :class:`CallTimes` keeps the last :data:`KEEP` durations of one
kind of call, so the figure follows the run as it goes and memory stays bounded.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from typing import Any, Final

KEEP: Final = 500  # durations kept per kind of call (the most recent)
MAX_TASKS: Final = 1024  # tasks whose pace an engine keeps (the least recently opened go)
MAX_OPEN: Final = 64  # calls of one turn a sample waits to see end (the rest are not timed)


class CallTimes:
    """The recent durations of one kind of call in one task (seconds)."""

    __slots__ = ("_ring", "_next", "total", "_sorted")

    def __init__(self) -> None:
        # at most KEEP, in a ring: once full, ``_next`` is the oldest (the slot the next
        # one takes); deleting the oldest from the front of a list moved 500 pointers
        # on every call of every sample
        self._ring: list[float] = []
        self._next = 0
        self.total = 0  # every call counted, also those no longer kept
        self._sorted: list[float] | None = None

    def add(self, seconds: float) -> None:
        ring = self._ring
        if len(ring) < KEEP:
            ring.append(seconds)
        else:
            i = self._next
            ring[i] = seconds
            self._next = i + 1 if i + 1 < KEEP else 0
        self.total += 1
        self._sorted = None

    @property
    def durations(self) -> list[float]:
        """The kept durations, oldest first."""
        i = self._next
        return self._ring[i:] + self._ring[:i]

    @property
    def count(self) -> int:
        """How many durations the figures are taken over (at most :data:`KEEP`)."""
        return len(self._ring)

    def percentile(self, q: float) -> float:
        """The nearest-rank ``q``-th percentile (0 < q <= 100) of the kept durations."""
        s = self._sorted
        if s is None:
            s = self._sorted = sorted(self._ring)
        if not s:
            return 0.0
        rank = max(1, math.ceil(q / 100.0 * len(s)))
        return s[min(rank, len(s)) - 1]

    def longest(self) -> float:
        return self.percentile(100.0)


def call_key(kind: str, name: Any) -> str:
    """What calls are compared with: model calls per model, tool calls per function."""
    return f"{kind}:{name if isinstance(name, str) else ''}"


# call_key of each name seen, by kind: made once, not formatted for every event
_MODEL_KEYS: Final[dict[str, str]] = {}
_TOOL_KEYS: Final[dict[str, str]] = {}
MAX_KEYS: Final = 4096  # names remembered per kind (tool names are the agent's choice)


def _key(keys: dict[str, str], kind: str, name: Any) -> str:
    if not isinstance(name, str):
        name = ""
    got = keys.get(name)
    if got is None:
        got = call_key(kind, name)
        if len(keys) < MAX_KEYS:
            keys[name] = got
    return got


class Pace:
    """One task's completed call durations, by :func:`call_key`. The samples of a task
    are read on one thread, but a lock keeps it safe if they are not."""

    def __init__(self) -> None:
        self.calls: dict[str, CallTimes] = {}
        self._lock = threading.Lock()

    def record(self, key: str, seconds: float) -> None:
        lock = self._lock
        lock.acquire()  # (a ``with`` costs two more method lookups per call)
        try:
            times = self.calls.get(key)
            if times is None:
                times = self.calls[key] = CallTimes()
            times.add(seconds)
        finally:
            lock.release()

    def times(self, key: str) -> CallTimes | None:
        return self.calls.get(key)


class Paces:
    """The paces of the tasks an engine has seen, by task (bounded)."""

    def __init__(self) -> None:
        self._paces: OrderedDict[tuple[str, str], Pace] = OrderedDict()
        self._lock = threading.Lock()

    def of(self, eval_id: str, task_id: str) -> Pace:
        key = (eval_id, task_id)
        with self._lock:
            pace = self._paces.get(key)
            if pace is None:
                pace = self._paces[key] = Pace()
                if len(self._paces) > MAX_TASKS:
                    self._paces.popitem(last=False)
            else:
                self._paces.move_to_end(key)
            return pace


def _seconds(value: Any) -> float | None:
    if type(value) is float:
        return value  # type: ignore[no-any-return]
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return None


class CallClock:
    """Times one sample attempt's calls from its completed events, into its task's pace."""

    __slots__ = ("pace", "model_open", "tools_open")

    def __init__(self, pace: Pace) -> None:
        self.pace = pace
        self.model_open: tuple[float, str] | None = None  # (start, key) awaiting an end
        self.tools_open: list[tuple[float, str]] = []

    def see(self, e: dict[str, Any]) -> None:
        """One completed event, in transcript order."""
        ts = _seconds(e.get("timestamp"))
        if ts is None:
            return
        etype = e.get("type")
        pace = self.pace
        # this event started after the calls still open had ended
        m = self.model_open
        if m is not None:
            self.model_open = None
            if ts >= m[0]:
                pace.record(m[1], ts - m[0])
        if self.tools_open and etype != "tool":
            for start, key in self.tools_open:
                if ts >= start:
                    pace.record(key, ts - start)
            self.tools_open = []
        if etype == "model":
            key = _key(_MODEL_KEYS, "model", e.get("model"))
        elif etype == "tool":
            key = _key(_TOOL_KEYS, "tool", e.get("function"))
        else:
            return
        if e.get("has_error") or e.get("error"):
            return  # a failed call is not what a call normally takes
        done = _seconds(e.get("completed"))
        if done is not None:
            if done >= ts:
                pace.record(key, done - ts)
        elif etype == "model":
            self.model_open = (ts, key)
        elif len(self.tools_open) < MAX_OPEN:
            self.tools_open.append((ts, key))
