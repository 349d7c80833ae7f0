"""What ``inspect-watch top`` shows, as plain values: a sink, filters, rows.

:class:`TopSink` is the watch's sink (:func:`watcher.app.start`): the routing thread
hands it findings, notices and status snapshots, and it keeps them under a lock with
a version number. The screen (:mod:`watcher.top.app`) takes a :class:`View` (a copy)
when the version moved, and the functions here turn it into the rows of its tables
(:func:`fleet_rows`, :func:`sample_rows`, :func:`finding_rows`) under the
:class:`Filters` a person chose. Nothing here imports Textual, and nothing here
escapes text: the screen shows every string through :mod:`watcher.sanitize`.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from watcher.findings import CONFIDENCE_LEVELS, Finding, Notice, confidence_rank
from watcher.handoff import sample_cancel_command, view_command
from watcher.summary import ReportContext, RunSummary, SampleProgress, StatusSnapshot, TaskStatus

# notices kept for the screen (the newest); findings are all kept (one per episode)
MAX_NOTICES = 200


@dataclass(frozen=True)
class View:
    """One consistent copy of what the sink holds, for one redraw."""

    version: int
    snapshot: StatusSnapshot | None
    findings: tuple[Finding, ...]  # the latest snapshot of each, newest first
    notices: tuple[Notice, ...]
    context: ReportContext | None
    ended: bool  # the watch has ended (a --log-dir read to its end, or stopped)
    received: dict[str, float] = field(default_factory=dict)  # finding id -> when it came


class TopSink:
    """The watch's sink for the screen; every method is called on the routing thread
    except :meth:`view`, which the screen calls on its own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._findings: dict[str, Finding] = {}
        self._received: dict[str, float] = {}
        self._notices: deque[Notice] = deque(maxlen=MAX_NOTICES)
        self._snapshot: StatusSnapshot | None = None
        self._context: ReportContext | None = None
        self._ended = False
        self.version = 0
        self.summary: RunSummary | None = None

    def start(self, context: ReportContext) -> None:
        with self._lock:
            self._context = context
            self.version += 1

    def finding(self, f: Finding) -> None:
        with self._lock:
            self._findings.pop(f.id, None)  # re-inserted: the dict keeps arrival order
            self._findings[f.id] = f
            self._received.setdefault(f.id, time.time())
            self.version += 1

    def update(self, f: Finding) -> None:
        """A finding as it stands now (its count and spend grew): it keeps its place."""
        with self._lock:
            self._findings[f.id] = f
            self._received.setdefault(f.id, time.time())
            self.version += 1

    def notice(self, n: Notice) -> None:
        with self._lock:
            self._notices.append(n)
            self.version += 1

    def status(self, snapshot: StatusSnapshot) -> None:
        with self._lock:
            self._snapshot = snapshot
            self.version += 1

    def stop(self, summary: RunSummary | None = None) -> None:
        with self._lock:
            self.summary = summary
            self._ended = True
            self.version += 1

    def view(self) -> View:
        with self._lock:
            return View(self.version, self._snapshot,
                        tuple(reversed(self._findings.values())), tuple(self._notices),
                        self._context, self._ended, dict(self._received))


# -- filters and sorting ----------------------------------------------------------------

SORTS = ("worst", "idle", "tokens", "sample")  # the sample table's orders, `s` cycles


@dataclass(frozen=True)
class Filters:
    """What a person narrowed the screen to: one task (its eval id), a confidence floor,
    only samples with findings; and how the samples are sorted."""

    eval_id: str | None = None
    min_confidence: str = "low"
    only_findings: bool = False
    sort: str = "worst"

    def shows(self, f: Finding) -> bool:
        return (confidence_rank(f.confidence) >= confidence_rank(self.min_confidence)
                and (self.eval_id is None or f.sample.eval_id == self.eval_id))

    def next_confidence(self) -> Filters:
        i = CONFIDENCE_LEVELS.index(self.min_confidence)  # type: ignore[arg-type]
        return replace(self, min_confidence=CONFIDENCE_LEVELS[(i + 1) % len(CONFIDENCE_LEVELS)])

    def next_sort(self) -> Filters:
        return replace(self, sort=SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)])

    def describe(self, tasks: Sequence[TaskStatus] = ()) -> str:
        """``task loops · confidence ≥ medium · only with findings · sorted by idle``."""
        parts = []
        if self.eval_id is not None:
            names = [t.task for t in tasks if t.eval_id == self.eval_id]
            parts.append(f"task {names[0] if names else self.eval_id}")
        else:
            parts.append("all tasks")
        parts.append(f"confidence ≥ {self.min_confidence}")
        if self.only_findings:
            parts.append("only with findings")
        parts.append(f"sorted by {self.sort}")
        return " · ".join(parts)


# -- rows ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class FleetRow:
    """One task of the fleet table."""

    key: str  # eval id
    task: str
    model: str
    done: int
    running: int
    total: int | None
    errored: int
    tokens: int | None
    idle: float | None
    idle_sample: str | None
    by_level: dict[str, int]
    finished: bool


@dataclass(frozen=True)
class SampleRow:
    """One sample of the drilled-in table."""

    key: str  # eval id|sample id|epoch
    eval_id: str
    task: str
    sample_id: str
    epoch: int
    status: str
    attempt: int
    idle: float | None
    last_event: str
    in_flight: bool
    tokens: int | None
    worst: Finding | None
    findings: int


@dataclass(frozen=True)
class FindingRow:
    key: str  # finding id
    finding: Finding
    age: float


def _levels(findings: Iterable[Finding]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for f in findings:
        levels = out.setdefault(f.sample.eval_id, {})
        levels[f.confidence] = levels.get(f.confidence, 0) + 1
    return out


def fleet_rows(view: View, filters: Filters) -> list[FleetRow]:
    """Every task the watch reads, the busiest first: unfinished, most findings."""
    snap = view.snapshot
    if snap is None:
        return []
    floor = confidence_rank(filters.min_confidence)  # every task's, whichever is chosen
    levels = _levels(f for f in view.findings if confidence_rank(f.confidence) >= floor)
    rows = [FleetRow(key=t.eval_id, task=t.task, model=t.model, done=t.done,
                     running=t.running, total=t.total, errored=t.errored, tokens=t.tokens,
                     idle=t.idle, idle_sample=t.idle_sample,
                     by_level=levels.get(t.eval_id, {}), finished=t.finished)
            for t in snap.tasks]
    rank: dict[str, int] = {lvl: i for i, lvl in enumerate(reversed(CONFIDENCE_LEVELS))}

    def order(r: FleetRow) -> tuple[Any, ...]:
        worst = min((rank[lvl] for lvl, n in r.by_level.items() if n), default=9)
        return (r.finished, worst, -sum(r.by_level.values()), r.task)
    return sorted(rows, key=order)


def _worst(findings: Iterable[Finding]) -> dict[tuple[str, str, int], tuple[Finding, int]]:
    out: dict[tuple[str, str, int], tuple[Finding, int]] = {}
    for f in findings:
        cur = out.get(f.sample.key)
        if cur is None:
            out[f.sample.key] = (f, 1)
        elif confidence_rank(f.confidence) > confidence_rank(cur[0].confidence):
            out[f.sample.key] = (f, cur[1] + 1)
        else:
            out[f.sample.key] = (cur[0], cur[1] + 1)
    return out


def sample_rows(view: View, filters: Filters) -> list[SampleRow]:
    """The samples of the chosen task (or all), filtered and sorted as asked; the worst
    finding of each is the highest at or above the floor."""
    snap = view.snapshot
    if snap is None:
        return []
    worst = _worst(f for f in view.findings if filters.shows(f))
    rows = []
    for s in snap.samples:
        if filters.eval_id is not None and s.eval_id != filters.eval_id:
            continue
        bad = worst.get(s.key)
        if filters.only_findings and bad is None:
            continue
        rows.append(_sample_row(s, bad))
    return sorted(rows, key=_SORT_KEYS[filters.sort])


def _sample_row(s: SampleProgress, bad: tuple[Finding, int] | None) -> SampleRow:
    return SampleRow(
        key=f"{s.eval_id}|{s.sample_id}|{s.epoch}", eval_id=s.eval_id, task=s.task,
        sample_id=s.sample_id, epoch=s.epoch, status=s.status or ("done" if s.done else "?"),
        attempt=s.attempt, idle=s.idle, last_event=s.last_event, in_flight=bool(s.in_flight),
        tokens=s.tokens, worst=bad[0] if bad else None, findings=bad[1] if bad else 0)


def _worst_key(r: SampleRow) -> tuple[Any, ...]:
    rank = confidence_rank(r.worst.confidence) if r.worst else -1
    return (-rank, -r.findings, -(r.idle or -1.0), r.task, r.sample_id, r.epoch)


_SORT_KEYS = {
    "worst": _worst_key,
    "idle": lambda r: (-(r.idle if r.idle is not None else -1.0), r.task, r.sample_id, r.epoch),
    "tokens": lambda r: (-(r.tokens or 0), r.task, r.sample_id, r.epoch),
    "sample": lambda r: (r.task, r.sample_id, r.epoch),
}


def finding_rows(view: View, filters: Filters, now: float | None = None) -> list[FindingRow]:
    """The findings at or above the floor (of the chosen task), newest first."""
    now = time.time() if now is None else now
    rows = [FindingRow(f.id, f, max(0.0, now - f.last_seen)) for f in view.findings
            if filters.shows(f)]
    return sorted(rows, key=lambda r: -r.finding.last_seen)


# -- what a key copies -------------------------------------------------------------------


def handoff_command(f: Finding) -> str | None:
    """The one command of a finding's hand-off worth copying: for a running eval the
    dry run of ``inspect ctl sample cancel`` (it names the target and changes nothing),
    else the ``inspect view`` of its log; ``None`` if it names neither. Never the
    ``kill -INT`` of a whole run: that is for the person to type, with the user's say."""
    if "inspect ctl sample cancel" in f.handoff:
        return sample_cancel_command(f, dry_run=True)
    if f.sample.log_location:
        return view_command(f.sample.log_location)
    return None
