"""What a watch produces besides findings: status snapshots and end-of-run summaries.

These are values, handed from the producer (:mod:`watcher.run`, ``report`` reading
JSONL and logs) to whatever renders them (:mod:`watcher.reporters`, a front end of
:mod:`watcher.app`). They live here, below both, so that neither imports the other.

* :class:`ReportContext` — what is being watched, given to an output when it starts.
* :class:`StatusSnapshot` (of :class:`TaskStatus` rows, and :class:`SampleProgress`
  rows when asked for) — the live picture, about once a second.
* :class:`RunSummary` (of :class:`TaskSummary` and :class:`SampleSummary`) — what the
  end-of-run reports show; :func:`fold_findings` keeps the last snapshot per finding;
  :func:`loop_spend` says what each task spent after its loops were found.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from watcher.findings import LOOP_CATEGORIES, SPEND_FACTS, Action, Finding, Notice, confidence_rank
from watcher.sources.base import TaskInfo


@dataclass(frozen=True)
class ReportContext:
    """Handed to a reporter's ``start``: what is being watched, for banners and headers.

    (Not the engine's :class:`watcher.engine.RunContext`, which is a task's samples as
    sample rules compare them.)
    """

    started_at: float = 0.0
    sources: tuple[str, ...] = ()  # e.g. "http://127.0.0.1:7575", "/logs/x.eval"
    log_dirs: tuple[str, ...] = ()
    rules: tuple[str, ...] = ()
    version: str = ""
    acting: str = ""  # "" (it only observes), "act" or "dry-run" (``watch --act``)
    # which evals it reads (and, with ``acting``, acts on): "" every one the user runs on
    # this host; else words naming the scope ("task X", "evals logging under DIR")
    scope: str = ""


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
    tokens: int | None = None  # the samples' total tokens, as the listing says
    idle: float | None = None  # seconds since the oldest-idle running sample's last event
    idle_sample: str | None = None  # that sample's id
    # findings (at or above the watch's confidence floor) on its samples, by level
    findings_by_confidence: dict[str, int] = field(default_factory=dict)

    @property
    def counts(self) -> tuple[object, ...]:
        """What changes when a sample starts or ends (not every second, as ``idle``)."""
        return (self.task, self.model, self.eval_id, self.running, self.done, self.errored,
                self.total, self.finished, tuple(sorted(self.findings_by_confidence.items())))


@dataclass(frozen=True)
class SampleProgress:
    """One sample (attempt) being read: for a front end that shows samples, not just counts.

    Built only when the watch is asked for it (``WatchOptions.sample_detail``): a scan
    of thousands of samples need not build thousands of rows a second for nobody.
    ``in_flight`` names what is pending (a tool's function, or the event type).
    """

    task: str
    eval_id: str
    sample_id: str
    epoch: int = 1
    attempt: int = 1
    status: str = ""  # the listing's: running, completed, error, cancelled, ...
    events: int = 0  # events read so far (this attempt and earlier ones)
    last_event_at: float | None = None
    in_flight: tuple[str, ...] = ()
    done: bool = False  # read to its end
    model: str = ""
    idle: float | None = None  # seconds since its last event (started or completed); running only
    last_event: str = ""  # the newest event's type, and a tool's function: "tool shell"
    tokens: int | None = None  # as the listing says
    worst: str | None = None  # the highest confidence of its findings (at or above the floor)
    worst_rule: str = ""  # that finding's rule id and title
    worst_title: str = ""
    findings: int = 0  # its findings at or above the floor

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.eval_id, self.sample_id, self.epoch)


@dataclass(frozen=True)
class StatusSnapshot:
    """The live picture the text reporter redraws in place.

    ``now`` is supplied by the caller (not read by the reporter) so rendering is
    deterministic and testable; ``since_last_poll`` derives from it. ``samples`` is
    empty unless the watch was asked for per-sample detail.
    """

    tasks: tuple[TaskStatus, ...] = ()
    findings_by_confidence: dict[str, int] = field(default_factory=dict)
    now: float = 0.0
    last_poll_at: float | None = None
    polls: int = 0
    notices: int = 0
    samples: tuple[SampleProgress, ...] = ()

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


def sample_summary(t: TaskInfo, sample_id: str, epoch: int, row: dict[str, Any]) -> SampleSummary:
    """A listing row as the summary's sample line."""
    status = {"completed": "success", "error": "error", "cancelled": "cancelled",
              "running": "running"}.get(str(row.get("status")), "unknown")
    scores = row.get("scores") or {}
    score = ", ".join(f"{k}={v}" for k, v in scores.items()) if isinstance(scores, dict) else None
    err = row.get("error")
    retry_errors = tuple(str(e.get("message") or "") if isinstance(e, dict) else str(e)
                         for e in row.get("error_retries") or [])
    return SampleSummary(
        task=t.task, model=t.model, sample_id=sample_id, epoch=epoch, eval_id=t.eval_id,
        status=status, total_time=_num(row.get("total_time")),
        working_time=_num(row.get("working_time")),
        total_tokens=int(row["total_tokens"]) if isinstance(row.get("total_tokens"), int) else None,
        retries=int(row.get("retries") or 0),
        error=(err.get("message") if isinstance(err, dict) else str(err)) if err else None,
        retry_errors=retry_errors, score=score or None, log_location=t.log_location,
    )


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


@dataclass(frozen=True)
class LoopSpend:
    """What one task spent in samples after their first ``high`` loop finding (a
    category of :data:`~watcher.findings.LOOP_CATEGORIES`): the budget a watchdog that
    stopped each loop when it became ``high`` would have saved. ``tokens_total`` is
    every sample of the task (as the listing or log reports them), if known."""

    task: str
    model: str
    eval_id: str
    samples: int
    tokens_after: int
    tokens_total: int | None = None

    @property
    def share(self) -> float | None:
        """``tokens_after`` as a share of ``tokens_total``."""
        if not self.tokens_total:
            return None
        return self.tokens_after / self.tokens_total


def loop_spend(summary: RunSummary) -> list[LoopSpend]:
    """Per task, the tokens spent after each sample's first ``high`` loop finding (the
    finding's ``tokens_since_high``; for a sample with several, the earliest, which
    spent the most after it), for the tasks that had one."""
    since_high = SPEND_FACTS[1]
    per_sample: dict[tuple[str, str, str, int, int], int] = {}
    names: dict[str, tuple[str, str]] = {}
    for f in fold_findings(summary.findings):
        tokens = f.evidence.facts.get(since_high)
        if f.category not in LOOP_CATEGORIES or type(tokens) is not int:
            continue
        s = f.sample
        key = (s.eval_id, s.task, s.sample_id, s.epoch, s.attempt)
        per_sample[key] = max(per_sample.get(key, 0), tokens)
        names[s.eval_id] = (s.task, s.model)
    totals: dict[str, int] = {}
    for smp in summary.samples:
        if smp.total_tokens is not None:
            totals[smp.eval_id] = totals.get(smp.eval_id, 0) + smp.total_tokens
    out: list[LoopSpend] = []
    for eval_id, (task, model) in names.items():
        mine = [v for k, v in per_sample.items() if k[0] == eval_id]
        out.append(LoopSpend(task=task, model=model, eval_id=eval_id, samples=len(mine),
                             tokens_after=sum(mine), tokens_total=totals.get(eval_id)))
    return sorted(out, key=lambda x: (x.task, x.model, x.eval_id))


def actions_of(notices: Iterable[Notice]) -> list[Action]:
    """The watchdog's action records among ``notices`` (``watch --act``)."""
    return [n for n in notices if isinstance(n, Action)]
