"""The one interface every event source implements.

A source answers three questions, mirroring the control channel's routes:
which tasks exist (``GET /tasks``), which samples a task has
(``GET /evals/{id}/samples``), and a page of one sample's events
(``GET /evals/{id}/sample/events``). Events are returned *as served* (compact
or raw dicts); the stream normalises them. Errors are typed so the pull loop
can tell "try again" from "this process is gone" from "this is garbage".

A source also *declares* what the pull loop may expect of it (:class:`Source`):
whether it is a running eval (``live``), how many page reads it takes at once
(``parallel_reads``), whether it can say which samples grew without being asked
(``moved_samples``), and what it noticed about its own input (``pop_notices``).
Sources subclass :class:`Source` explicitly, so those they do not override keep the
defaults written here.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from orjson import loads as _loads

from watcher.events import Tier


class SourceError(Exception):
    """Base of every source failure; ``transient`` says whether a retry may help."""

    transient = False


class SourceBusy(SourceError):
    """A read timed out or the server answered 503: retry later."""

    transient = True


class ProcessGone(SourceError):
    """The eval process is gone (connection refused, socket missing)."""


class NotFound(SourceError):
    """The task or sample is not (or no longer) known to the source."""


class BadResponse(SourceError):
    """Malformed, truncated or unexpected data from the source."""


class LimitExceeded(BadResponse):
    """Input past a documented bound (:mod:`watcher.limits`): a response too large or
    too slow, a log entry that inflates too far. Reported, never retried: the same
    read would break the same bound."""


@dataclass
class TaskInfo:
    """One task of one eval (a row of ``GET /tasks``, or a log file's header)."""

    eval_id: str
    task: str
    task_id: str
    model: str
    status: str = "running"
    started_at: float | None = None
    completed_at: float | None = None
    log_location: str | None = None
    pid: int | None = None
    run_id: str | None = None
    api_version: int | None = None
    counts: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        """The task completed (its remaining sample streams can still drain)."""
        return self.completed_at is not None or self.status not in ("running", "started")


@dataclass
class SampleRow:
    """One row of the samples listing. ``raw`` keeps every field the server sent."""

    sample_id: str
    epoch: int
    status: str
    retries: int = 0
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def attempt(self) -> int:
        """1 for the first attempt; each recorded error retry adds one."""
        return self.retries + 1

    @property
    def terminal(self) -> bool:
        return self.status in ("completed", "error", "cancelled")


@dataclass
class SampleListing:
    """``{as_of, samples, truncated}`` from the samples listing."""

    as_of: float
    samples: list[SampleRow]
    truncated: bool = False


@dataclass
class EventPage:
    """One page of a sample's events: ``events`` as served, ``next`` cursor, ``done``."""

    events: list[dict[str, Any]]
    next: str | None
    done: bool
    missed: int = 0


@dataclass(frozen=True)
class SourceNotice:
    """What a source noticed about its own input, for the watch to report as a
    :class:`~watcher.findings.Notice` (a log it could not read, attachment references it
    could not resolve, a sample buffer it stopped reading)."""

    kind: str  # a notice kind of docs/findings.md
    message: str
    details: Mapping[str, Any] = field(default_factory=dict)


class Source(Protocol):
    """What the pull loop needs from any source, and what the source says of itself."""

    name: str
    # a running eval: it may start more tasks, and a read that fails may work later;
    # not live: files (logs, recordings) that hold what they will ever hold
    live: bool = False
    # page reads the pull loop may have in flight at once: 1 for reads that are CPU
    # work in this process (local logs: threads would only take turns at the GIL)
    parallel_reads: int = 4

    def tasks(self) -> list[TaskInfo]:
        """Tasks this source can see now."""
        ...

    def samples(self, task: TaskInfo, active_since: float | None = None,
                all_rows: bool = False) -> SampleListing:
        """Sample rows of ``task`` (only those active since ``active_since`` if given)."""
        ...

    def events(self, task: TaskInfo, sample_id: str, epoch: int, *, since: str | None,
               types: frozenset[str] | None, tier: Tier, limit: int = 500) -> EventPage:
        """A page of events after cursor ``since`` (``None`` = from the start).

        ``types=None`` asks for every type; the tier selects the projection.
        """
        ...

    def moved_samples(self, task: TaskInfo) -> set[tuple[str, int]] | None:
        """``(sample_id, epoch)`` of the samples with new events since the last call,
        known without asking the eval (the sample buffer); ``None``: this source cannot
        tell, so the pull loop lists the samples every cycle."""
        return None

    def reads_in_process(self, task: TaskInfo, sample_id: str, epoch: int,
                         since: str | None) -> bool:
        """Whether the next read of this sample after ``since`` is served here, without
        waiting on anyone (the sample buffer): the pull loop then reads it on its own
        thread, where a hand-off to a reader thread would cost more than the read."""
        return False

    def read_batch(self, task: TaskInfo) -> contextlib.AbstractContextManager[None]:
        """Around a run of in-process reads of one task (see :meth:`reads_in_process`):
        the sample buffer serves them from one snapshot. Nothing by default."""
        return contextlib.nullcontext()

    def pop_notices(self) -> list[SourceNotice]:
        """What the source noticed since the last call (each said once)."""
        return []

    def close(self) -> None:
        """Release connections and files."""
        ...


def sample_row(d: dict[str, Any]) -> SampleRow:
    """Build a :class:`SampleRow` from a listing row, tolerating missing fields."""
    try:
        epoch = int(d.get("epoch") or 1)
    except (TypeError, ValueError, OverflowError):  # (1e400 is a float infinity)
        epoch = 1
    retries = d.get("retries") or 0
    try:
        retries = int(retries)
    except (TypeError, ValueError, OverflowError):
        retries = 0
    return SampleRow(sample_id=str(d.get("sample_id")), epoch=epoch,
                     status=str(d.get("status") or "unknown"), retries=retries, raw=d)


def encode_cursor(nonce: str, offset: int) -> str:
    """A control-channel cursor token: the server's own format (attempt nonce, offset).

    Cursors are opaque to clients; the watcher relies on the format in two places only,
    each with a safe fallback: the stream peeks at the nonce to notice a new attempt
    early, and the sample-buffer reader continues a page the control channel served.
    """
    # the bytes of json.dumps({"n": nonce, "i": offset}, separators=(",", ":")), built
    # without a JSON encoder made per call (a third of the cost): one per sample read
    raw = ('{"n":' + json.dumps(nonce) + ',"i":' + str(int(offset)) + "}").encode("utf-8")
    return base64.urlsafe_b64encode(raw).decode("ascii")


@functools.lru_cache(maxsize=4096)
def decode_cursor(token: str | None) -> tuple[str | None, int]:
    """``(nonce, offset)`` of a control-channel cursor; a missing or garbled one means
    "from the start" ``(None, 0)``, and a negative offset reads as 0 (as the server does)."""
    if not token:
        return None, 0
    try:
        # orjson: a live watch decodes a new token for every sample it polls, and
        # json.loads of bytes first guesses their encoding (the server writes UTF-8)
        data = _loads(base64.urlsafe_b64decode(token))
        return str(data["n"]), max(0, int(data["i"]))
    except (ValueError, KeyError, TypeError, UnicodeError):
        return None, 0
