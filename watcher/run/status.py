"""The runner's state as values: the live status snapshot and the end-of-run summary.

Both read the runner's task watchers (their listing rows and streams) and the
router's findings, and build the immutable values of :mod:`watcher.summary` that
sinks render. Called on the routing thread; the source threads only ever add rows
and streams, so each dictionary is copied before it is walked.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from watcher.findings import Finding, Notice, confidence_rank
from watcher.run.runner import Runner, TaskWatcher
from watcher.summary import (
    RunSummary,
    SampleProgress,
    SampleSummary,
    StatusSnapshot,
    TaskStatus,
    TaskSummary,
    sample_summary,
)


def status_snapshot(runner: Runner, findings: Iterable[Finding], *, min_confidence: str,
                    notices: int, samples: bool = False) -> StatusSnapshot:
    """A snapshot for the live status area (``samples``: with a row per sample read)."""
    tasks = []
    progress: list[SampleProgress] = []
    for sw in runner.watchers.values():
        for tw in list(sw.tasks.values()):
            rows = list(tw.rows.values())
            tasks.append(TaskStatus(
                task=tw.task.task, model=tw.task.model, eval_id=tw.task.eval_id,
                running=sum(r.status == "running" for r in rows),
                done=sum(r.status == "completed" for r in rows),
                errored=sum(r.status == "error" for r in rows),
                total=tw.task.counts.get("total") or len(rows) or None,
                finished=tw.finished,
            ))
            if samples:
                progress += _sample_progress(tw)
    by_conf: dict[str, int] = {"high": 0, "medium": 0, "low": 0}
    for f in findings:
        if confidence_rank(f.confidence) >= confidence_rank(min_confidence):
            by_conf[f.confidence] = by_conf.get(f.confidence, 0) + 1
    polls = [sw.last_poll_at for sw in runner.watchers.values() if sw.last_poll_at]
    return StatusSnapshot(
        tasks=tuple(tasks), findings_by_confidence=by_conf, now=time.time(),
        last_poll_at=max(polls) if polls else None,
        polls=sum(sw.cycles for sw in runner.watchers.values()),
        notices=notices, samples=tuple(progress),
    )


def _sample_progress(tw: TaskWatcher) -> list[SampleProgress]:
    out = []
    for (sid, epoch), stream in list(tw.streams.items()):
        row = tw.rows.get((sid, epoch))
        in_flight = tuple(str(e.get("function") or e.get("type") or "?")
                          for e in list(stream.in_flight.values()))
        out.append(SampleProgress(
            task=tw.task.task, eval_id=tw.task.eval_id, sample_id=sid, epoch=epoch,
            attempt=stream.attempt, status=row.status if row else "",
            events=stream.delivered, last_event_at=stream.last_event_at,
            in_flight=in_flight, done=stream.done))
    return out


def run_summary(runner: Runner, findings: Iterable[Finding], notices: Iterable[Notice], *,
                min_confidence: str, log_dir: str | None, started_at: float,
                merged: RunSummary | None = None) -> RunSummary:
    """What the end-of-run reports show: tasks, samples, findings, notices (``merged``:
    the tasks and samples a parallel scan's workers read)."""
    tasks: list[TaskSummary] = list(merged.tasks) if merged else []
    samples: list[SampleSummary] = list(merged.samples) if merged else []
    for sw in runner.watchers.values():
        for tw in sw.tasks.values():
            t = tw.task
            tasks.append(TaskSummary(task=t.task, model=t.model, eval_id=t.eval_id,
                                     task_id=t.task_id, status=t.status,
                                     total_samples=t.counts.get("total"),
                                     scores=dict(t.raw.get("scores") or {}),
                                     log_location=t.log_location))
            for (sid, epoch), row in tw.rows.items():
                samples.append(sample_summary(t, sid, epoch, row.raw))
    shown = [f for f in findings
             if confidence_rank(f.confidence) >= confidence_rank(min_confidence)]
    logs = sorted({t.log_location for t in tasks if t.log_location})
    return RunSummary(tasks=tuple(tasks), samples=tuple(samples),
                      findings=tuple(sorted(shown, key=Finding.sort_key)),
                      notices=tuple(notices),
                      log_dirs=(log_dir,) if log_dir else (),
                      log_files=tuple(logs), started_at=started_at,
                      ended_at=time.time())
