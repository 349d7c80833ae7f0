"""The runner's state as values: the live status snapshot and the end-of-run summary.

Both read the runner's tasks as views (:class:`~watcher.run.values.TaskView`: their
listing rows and tracked samples, copied on the routing thread) and the router's
findings, and build the immutable values of :mod:`watcher.summary` that sinks render.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from watcher.findings import Finding, Notice, confidence_rank
from watcher.run.runner import Runner
from watcher.run.values import SampleView, TaskView
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
                    notices: int, samples: bool = False,
                    now: float | None = None) -> StatusSnapshot:
    """A snapshot for the live status area (``samples``: with a row per sample read).

    Each task's counts come from its last listing rows; its oldest idle sample and its
    findings by level from its streams and the findings at or above ``min_confidence``.
    """
    now = time.time() if now is None else now
    floor = confidence_rank(min_confidence)
    by_conf: dict[str, int] = {"high": 0, "medium": 0, "low": 0}
    by_task: dict[str, dict[str, int]] = {}
    worst: dict[tuple[str, str, int], tuple[int, int, Finding]] = {}
    for f in findings:
        rank = confidence_rank(f.confidence)
        if rank < floor:
            continue
        by_conf[f.confidence] = by_conf.get(f.confidence, 0) + 1
        levels = by_task.setdefault(f.sample.eval_id, {})
        levels[f.confidence] = levels.get(f.confidence, 0) + 1
        if samples:
            key = f.sample.key
            cur = worst.get(key)
            n = cur[1] + 1 if cur else 1
            worst[key] = (rank, n, f) if cur is None or rank > cur[0] else (cur[0], n, cur[2])
    tasks = []
    progress: list[SampleProgress] = []
    for tv in runner.views():
        rows = tv.rows
        tokens = [r.raw["total_tokens"] for r in rows
                  if isinstance(r.raw.get("total_tokens"), int)]
        task_tokens = tv.task.raw.get("total_tokens")
        idle, idle_sample = _oldest_idle(tv, now)
        tasks.append(TaskStatus(
            task=tv.task.task, model=tv.task.model, eval_id=tv.task.eval_id,
            running=sum(r.status == "running" for r in rows),
            done=sum(r.status == "completed" for r in rows),
            errored=sum(r.status == "error" for r in rows),
            total=tv.task.counts.get("total") or len(rows) or None,
            finished=tv.finished,
            tokens=sum(tokens) if tokens else (
                task_tokens if isinstance(task_tokens, int) else None),
            idle=idle, idle_sample=idle_sample,
            findings_by_confidence=by_task.get(tv.task.eval_id, {}),
        ))
        if samples:
            progress += _sample_progress(tv, now, worst)
    polls = [sw.last_poll_at for sw in runner.watchers.values() if sw.last_poll_at]
    return StatusSnapshot(
        tasks=tuple(tasks), findings_by_confidence=by_conf, now=now,
        last_poll_at=max(polls) if polls else None,
        polls=sum(sw.cycles for sw in runner.watchers.values()),
        notices=notices, samples=tuple(progress),
    )


def _last_seen(sample: SampleView) -> float | None:
    """When the sample last did something: its newest event, started or completed."""
    times = [t for e in sample.in_flight if isinstance(t := e.get("timestamp"), int | float)]
    if sample.last_event_at is not None:
        times.append(sample.last_event_at)
    return max(times) if times else None


def _idle(sample: SampleView, now: float) -> float | None:
    """Seconds since a running sample's last event (``None`` for one not running)."""
    row = sample.row
    if sample.done or row is None or row.status != "running":
        return None
    last = _last_seen(sample)
    if last is None:
        started = row.raw.get("started_at")
        last = started if isinstance(started, int | float) else sample.last_change_at
    return max(0.0, now - last)


def _oldest_idle(tv: TaskView, now: float) -> tuple[float | None, str | None]:
    best: tuple[float | None, str | None] = (None, None)
    for sample in tv.samples:
        idle = _idle(sample, now)
        if idle is not None and (best[0] is None or idle > best[0]):
            best = (idle, sample.sample_id)
    return best


def _last_event(sample: SampleView) -> str:
    """The newest event's type (and a tool's function): an event in flight is newer than
    every completed one (the stream holds back what follows it)."""
    pending = sample.in_flight
    event = pending[-1] if pending else sample.last_event
    if not event:
        return ""
    kind = str(event.get("type") or "?")
    function = event.get("function")
    return f"{kind} {function}" if kind == "tool" and function else kind


def _sample_progress(tv: TaskView, now: float,
                     worst: dict[tuple[str, str, int], tuple[int, int, Finding]],
                     ) -> list[SampleProgress]:
    out = []
    task = tv.task
    for sample in tv.samples:
        sid, epoch, row = sample.sample_id, sample.epoch, sample.row
        in_flight = tuple(str(e.get("function") or e.get("type") or "?")
                          for e in sample.in_flight)
        tokens = row.raw.get("total_tokens") if row else None
        bad = worst.get((task.eval_id, sid, epoch))
        f = bad[2] if bad else None
        out.append(SampleProgress(
            task=task.task, eval_id=task.eval_id, sample_id=sid, epoch=epoch,
            attempt=sample.attempt, status=row.status if row else "",
            events=sample.events, last_event_at=sample.last_event_at,
            in_flight=in_flight, done=sample.done, model=task.model,
            idle=_idle(sample, now), last_event=_last_event(sample),
            tokens=tokens if isinstance(tokens, int) else None,
            worst=f.confidence if f else None, worst_rule=f.rule if f else "",
            worst_title=f.title if f else "", findings=bad[1] if bad else 0))
    return out


def run_summary(runner: Runner, findings: Iterable[Finding], notices: Iterable[Notice], *,
                min_confidence: str, log_dir: str | None, started_at: float,
                merged: RunSummary | None = None) -> RunSummary:
    """What the end-of-run reports show: tasks, samples, findings, notices (``merged``:
    the tasks and samples a parallel scan's workers read)."""
    tasks: list[TaskSummary] = list(merged.tasks) if merged else []
    samples: list[SampleSummary] = list(merged.samples) if merged else []
    for tv in runner.views():
        t = tv.task
        tasks.append(TaskSummary(task=t.task, model=t.model, eval_id=t.eval_id,
                                 task_id=t.task_id, status=t.status,
                                 total_samples=t.counts.get("total"),
                                 scores=dict(t.raw.get("scores") or {}),
                                 log_location=t.log_location))
        for row in tv.rows:
            samples.append(sample_summary(t, row.sample_id, row.epoch, row.raw))
    shown = [f for f in findings
             if confidence_rank(f.confidence) >= confidence_rank(min_confidence)]
    logs = sorted({t.log_location for t in tasks if t.log_location})
    return RunSummary(tasks=tuple(tasks), samples=tuple(samples),
                      findings=tuple(sorted(shown, key=Finding.sort_key)),
                      notices=tuple(notices),
                      log_dirs=(log_dir,) if log_dir else (),
                      log_files=tuple(logs), started_at=started_at,
                      ended_at=time.time())
