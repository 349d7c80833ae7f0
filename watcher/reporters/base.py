"""The reporter lifecycle, and what the end-of-run reports compute from a summary.

Reporters are deliberately dumb: the watch decides what is new or escalated and
hands over immutable values (:class:`~watcher.findings.Finding`,
:class:`~watcher.findings.Notice`, and from :mod:`watcher.summary` the
:class:`~watcher.summary.StatusSnapshot` and :class:`~watcher.summary.RunSummary`);
a reporter only renders them. That keeps live output, JSONL and post-hoc reports
consistent, and lets ``report`` rebuild a summary from files alone. The helpers here
(grouping by confidence, outliers, sample counts per task) are the reports' own
arithmetic over a summary.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from watcher.findings import CONFIDENCE_LEVELS, Finding, Notice
from watcher.median import median
from watcher.summary import ReportContext, RunSummary, SampleSummary, StatusSnapshot, TaskSummary


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
            med = median(v for _, v in vals)
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


@dataclass(frozen=True)
class OutputOptions:
    """The watch's options a reporter may honour when it is opened (:meth:`Reporter.open`)."""

    quiet: bool = False  # findings and notices only: no banner or status
    color: bool | None = None  # None: colour on a terminal unless NO_COLOR is set
    min_confidence: str = "low"
    full_evidence: bool = False  # JSONL: evidence in full, not shortened
    verbose: bool = False  # text: each finding's evidence and hand-off under its first line


class OutputError(Exception):
    """An output that cannot be written; raised by ``start`` before the watch begins."""


class Reporter:
    """Base lifecycle; every hook is optional. Subclasses render, never decide.

    Call order: ``start`` once, then any number of ``finding`` / ``notice`` /
    ``status``, then ``stop`` once (with the summary when one is available).
    ``finding`` receives every new, escalated or ended snapshot. An output that
    cannot be written raises :class:`OutputError` (or :class:`OSError`) from ``start``,
    or :class:`OSError` later (the watch then stops and saves its state).

    A reporter is found by ``name`` in the registry (:mod:`watcher.reporters.registry`);
    ``commands`` says where it can be chosen: ``"watch"`` (``watch --format``: it takes
    findings as the watch goes) and/or ``"report"`` (``report --format``: it renders a
    whole run's summary at ``stop``).
    """

    name = "base"
    commands: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def open(cls, output: str | None, options: OutputOptions) -> Reporter:
        """The reporter writing to ``output`` (a path or URL; ``None``: standard output).

        The default builds ``cls(output)`` or ``cls(stream=sys.stdout)`` and honours no
        option; a reporter that takes options, or other outputs, overrides it."""
        if output:
            return cls(output)  # type: ignore[call-arg]
        return cls(stream=sys.stdout)  # type: ignore[call-arg]

    @property
    def lost(self) -> bool:
        """Findings did not reach the output (and were kept elsewhere, said where): the
        watch then ends with exit code 3."""
        return False

    def start(self, context: ReportContext) -> None:
        """The run begins."""

    def finding(self, f: Finding) -> None:
        """A new or updated snapshot of a finding."""

    def update(self, f: Finding) -> None:
        """A later snapshot of a reported finding that is not news: a live loop's count
        and spend as they grow (every few seconds). Ignored unless overridden: a
        reporter that keeps findings as they stand (a file of snapshots) takes it."""

    def notice(self, n: Notice) -> None:
        """A message from the watcher itself (gap, process gone, error)."""

    # whether ``status`` uses its snapshot: a reporter that overrides it says so
    takes_status = False

    def status(self, snapshot: StatusSnapshot) -> None:
        """The live status changed (called after each poll round)."""

    def stop(self, summary: RunSummary | None = None) -> None:
        """The run ended; flush and release resources."""
