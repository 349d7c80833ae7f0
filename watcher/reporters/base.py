"""What reporters receive: the lifecycle, the live status and the end-of-run summary.

Reporters are deliberately dumb: the engine decides what is new or escalated
and hands over immutable values (:class:`~watcher.findings.Finding`,
:class:`~watcher.findings.Notice`, :class:`StatusSnapshot`, :class:`RunSummary`);
a reporter only renders them. That keeps live output, JSONL and post-hoc reports
consistent, and lets ``report`` rebuild a :class:`RunSummary` from files alone.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from watcher.findings import CONFIDENCE_LEVELS, Finding, Notice, confidence_rank


@dataclass(frozen=True)
class RunContext:
    """Handed to :meth:`Reporter.start`: what is being watched, for banners and headers."""

    started_at: float = 0.0
    sources: tuple[str, ...] = ()  # e.g. "http://127.0.0.1:7575", "/logs/x.eval"
    log_dirs: tuple[str, ...] = ()
    rules: tuple[str, ...] = ()
    version: str = ""


@dataclass(frozen=True)
class TaskStatus:
    """One task+model row of the live status area."""

    task: str
    model: str
    eval_id: str = ""
    running: int = 0
    done: int = 0
    errored: int = 0
    total: int | None = None
    finished: bool = False


@dataclass(frozen=True)
class StatusSnapshot:
    """The live picture the text reporter redraws in place.

    ``now`` is supplied by the caller (not read by the reporter) so rendering is
    deterministic and testable; ``since_last_poll`` derives from it.
    """

    tasks: tuple[TaskStatus, ...] = ()
    findings_by_confidence: dict[str, int] = field(default_factory=dict)
    now: float = 0.0
    last_poll_at: float | None = None
    polls: int = 0
    notices: int = 0

    @property
    def since_last_poll(self) -> float | None:
        """Seconds since the last successful poll, or None before the first."""
        if self.last_poll_at is None:
            return None
        return max(0.0, self.now - self.last_poll_at)


@dataclass(frozen=True)
class SampleSummary:
    """One sample (epoch) at the end of the run. ``error`` may contain agent text."""

    task: str
    model: str
    sample_id: str
    epoch: int = 1
    eval_id: str = ""
    status: str = "success"  # success | error | cancelled | running | unknown
    total_time: float | None = None
    working_time: float | None = None
    total_tokens: int | None = None
    retries: int = 0
    error: str | None = None
    retry_errors: tuple[str, ...] = ()  # errors of earlier attempts that were retried
    score: str | None = None  # display form of the main score, if known
    log_location: str | None = None


@dataclass(frozen=True)
class TaskSummary:
    """One task+model at the end of the run; ``scores`` maps metric name to value.

    ``unknown`` says, in plain words, why its samples and scores are not known (a task
    known only from findings whose log was not read): reports then print ``?`` and the
    reason, not zeros.
    """

    task: str
    model: str
    eval_id: str = ""
    task_id: str = ""
    status: str = ""
    scores: dict[str, float] = field(default_factory=dict)
    total_samples: int | None = None
    log_location: str | None = None
    unknown: str = ""


FROM_FINDINGS_ONLY = ("known only from findings, which hold no sample counts or scores "
                      "(`inspect-watch report` reads them from the log)")


@dataclass(frozen=True)
class RunSummary:
    """Everything the end-of-run reports show. ``findings`` are final (folded) snapshots."""

    tasks: tuple[TaskSummary, ...] = ()
    samples: tuple[SampleSummary, ...] = ()
    findings: tuple[Finding, ...] = ()
    notices: tuple[Notice, ...] = ()
    log_dirs: tuple[str, ...] = ()
    log_files: tuple[str, ...] = ()
    started_at: float | None = None
    ended_at: float | None = None

    @classmethod
    def from_findings(
        cls, findings: Iterable[Finding], notices: Iterable[Notice] = (), **kw: Any
    ) -> RunSummary:
        """A summary known only from JSONL: tasks and log locations inferred from findings."""
        folded = fold_findings(findings)
        tasks: dict[tuple[str, str], TaskSummary] = {}
        logs: list[str] = []
        for f in folded:
            s = f.sample
            tasks.setdefault(
                (s.task, s.model),
                TaskSummary(task=s.task, model=s.model, eval_id=s.eval_id, task_id=s.task_id,
                            log_location=s.log_location, unknown=FROM_FINDINGS_ONLY),
            )
            if s.log_location and s.log_location not in logs:
                logs.append(s.log_location)
        kw.setdefault("tasks", tuple(tasks.values()))
        kw.setdefault("log_files", tuple(logs))
        return cls(findings=tuple(folded), notices=tuple(notices), **kw)


def _snapshot_rank(f: Finding) -> tuple[float, int, int, int]:
    return (f.last_seen, f.count, confidence_rank(f.confidence), int(f.status == "ended"))


def fold_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Keep the latest snapshot per id, in a stable order.

    "Latest" is the snapshot with the greatest (last_seen, count, confidence,
    ended); on a tie the one read later wins, so within one file the last line
    wins, and the same episode reported by two watchers folds to the fuller one.
    """
    best: dict[str, Finding] = {}
    for f in findings:
        cur = best.get(f.id)
        if cur is None or _snapshot_rank(f) >= _snapshot_rank(cur):
            best[f.id] = f
    return sorted(best.values(), key=lambda f: f.sort_key())


def by_confidence(findings: Iterable[Finding]) -> dict[str, list[Finding]]:
    """Group findings high → low (every level present, possibly empty)."""
    out: dict[str, list[Finding]] = {lvl: [] for lvl in reversed(CONFIDENCE_LEVELS)}
    for f in findings:
        out.setdefault(f.confidence, []).append(f)
    return out


# Outlier thresholds: far slower / heavier than the task's median, and above a
# floor so that 3 s vs 0.5 s does not count.
OUTLIER_FACTOR = 3.0
OUTLIER_TIME_FLOOR = 60.0
OUTLIER_TOKEN_FLOOR = 20_000
OUTLIER_MIN_SAMPLES = 3


@dataclass(frozen=True)
class Outlier:
    """A sample far above its task's median in time or tokens."""

    sample: SampleSummary
    metric: str  # "total_time" | "total_tokens"
    value: float
    median: float

    @property
    def ratio(self) -> float:
        return self.value / self.median if self.median else float("inf")


def find_outliers(
    samples: Iterable[SampleSummary],
    factor: float = OUTLIER_FACTOR,
    time_floor: float = OUTLIER_TIME_FLOOR,
    token_floor: float = OUTLIER_TOKEN_FLOOR,
) -> list[Outlier]:
    """Samples > ``factor`` × their task+model median and above the floor."""
    groups: dict[tuple[str, str], list[SampleSummary]] = {}
    for s in samples:
        groups.setdefault((s.task, s.model), []).append(s)
    out: list[Outlier] = []
    for rows in groups.values():
        for metric, floor in (("total_time", time_floor), ("total_tokens", token_floor)):
            vals = [(s, float(v)) for s in rows if (v := getattr(s, metric)) is not None]
            if len(vals) < OUTLIER_MIN_SAMPLES:
                continue
            med = statistics.median(v for _, v in vals)
            for s, v in vals:
                if v > floor and v > factor * med:
                    out.append(Outlier(s, metric, v, med))
    out.sort(key=lambda o: (o.sample.task, o.sample.model, o.metric, -o.value))
    return out


def task_samples(t: TaskSummary, samples: Iterable[SampleSummary]) -> list[SampleSummary]:
    """The samples of task ``t``: by eval id when both know it (two runs of one task and
    model are two rows), else by task and model."""
    if t.eval_id:
        return [s for s in samples if s.eval_id == t.eval_id
                or not s.eval_id and (s.task, s.model) == (t.task, t.model)]
    return [s for s in samples if (s.task, s.model) == (t.task, t.model)]


def task_cells(t: TaskSummary, samples: Iterable[SampleSummary]) -> tuple[str, str, str, str]:
    """The Samples, Succeeded, Errored and Retried cells of a task row: ``?`` when no sample
    of the task is known (a zero would claim that none succeeded)."""
    rows = task_samples(t, samples)
    if not rows:
        total = "?" if t.total_samples is None else f"? of {t.total_samples}"
        return total, "?", "?", "?"
    c = sample_counts(rows)
    total = str(c["total"])
    if t.total_samples is not None and t.total_samples != c["total"]:
        total += f" of {t.total_samples}"
    return total, str(c["success"]), str(c["error"]), str(c["retried"])


def unknown_tasks(summary: RunSummary) -> list[tuple[TaskSummary, str]]:
    """Tasks whose samples are not known, each with why (for "could not know" notes)."""
    out = []
    for t in summary.tasks:
        if t.unknown:
            out.append((t, t.unknown))
        elif not task_samples(t, summary.samples):
            out.append((t, "no sample of it was read"))
    return out


def sample_counts(samples: Iterable[SampleSummary]) -> dict[str, int]:
    """Count samples by status, plus ``retried`` (samples that needed a retry)."""
    counts: dict[str, int] = {"total": 0, "success": 0, "error": 0, "cancelled": 0,
                              "running": 0, "retried": 0}
    for s in samples:
        counts["total"] += 1
        counts[s.status] = counts.get(s.status, 0) + 1
        if s.retries:
            counts["retried"] += 1
    return counts


class Reporter:
    """Base lifecycle; every hook is optional. Subclasses render, never decide.

    Call order: ``start`` once, then any number of ``finding`` / ``notice`` /
    ``status``, then ``stop`` once (with the summary when one is available).
    ``finding`` receives every new, escalated or ended snapshot.
    """

    name = "base"

    def start(self, context: RunContext) -> None:
        """The run begins."""

    def finding(self, f: Finding) -> None:
        """A new or updated snapshot of a finding."""

    def notice(self, n: Notice) -> None:
        """A message from the watcher itself (gap, process gone, error)."""

    def status(self, snapshot: StatusSnapshot) -> None:
        """The live status changed (called after each poll round)."""

    def stop(self, summary: RunSummary | None = None) -> None:
        """The run ended; flush and release resources."""
