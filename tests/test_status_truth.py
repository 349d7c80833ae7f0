"""The status snapshots a watch sends tell the truth: the last one is every task as it
ended, and the rows per sample carry what a fleet view shows (issue 21)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.test_app import Front
from watcher import app
from watcher.exit_codes import ExitCode
from watcher.findings import confidence_rank
from watcher.summary import fold_findings

pytestmark = pytest.mark.e2e


def test_the_last_status_is_every_task_as_it_ended(eval_runner: Any) -> None:
    """After the eval exited the status area was left at ``running 3  done 0 of 3`` (the
    last snapshot was sent up to a second before the end, from a listing seconds older)
    and its findings count missed what was printed above it."""
    proc = eval_runner("loops", tool_delay=0.3)
    proc.discovery()
    front = Front()
    handle = app.start(app.WatchOptions(poll=0.3, format=None, sample_detail=True),
                       sinks=[front])
    assert handle.wait(180) is ExitCode.OK
    assert proc.wait() == 0
    last = front.snapshots[-1]
    assert [(t.task, t.running, t.done, t.total, t.finished) for t in last.tasks] == [
        ("loops", 0, 3, 3, True)]
    shown = fold_findings(front.findings)
    counted = {lvl: sum(f.confidence == lvl for f in shown) for lvl in ("high", "medium", "low")}
    assert last.findings_by_confidence == counted
    assert last.tasks[0].findings_by_confidence == {k: v for k, v in counted.items() if v}
    assert last.tasks[0].tokens and last.tasks[0].tokens > 0
    # a row per sample, with its worst finding and what it did last
    rows = {s.sample_id: s for s in last.samples}
    assert set(rows) == {"repeat", "submit-loop", "clean"}
    worst = {sid: max((f for f in shown if f.sample.sample_id == sid),
                      key=lambda f: confidence_rank(f.confidence), default=None)
             for sid in rows}
    for sid, row in rows.items():
        f = worst[sid]
        assert row.worst == (f.confidence if f else None)
        assert row.findings == sum(g.sample.sample_id == sid for g in shown)
        assert row.done and row.idle is None and row.status == "completed"
        assert row.tokens and row.tokens > 0 and row.last_event and row.attempt == 1
    assert rows["repeat"].worst == "high" and rows["repeat"].worst_rule == "repeated-tool-call"


def test_a_running_sample_row_says_how_long_it_has_been_idle(eval_runner: Any) -> None:
    """While a slow tool call runs the sample's row names it as in flight and counts
    its idle time; the task row names its oldest idle sample."""
    proc = eval_runner("slow", "-T", "samples=1", "-T", "turns=3", tool_delay=4.0)
    proc.discovery()
    front = Front()
    handle = app.start(app.WatchOptions(poll=0.3, format=None, sample_detail=True),
                       sinks=[front])
    try:
        seen = None
        deadline = time.time() + 120
        while seen is None and time.time() < deadline and handle.running:
            for snap in list(front.snapshots):
                rows = [s for s in snap.samples if s.in_flight and s.idle is not None]
                if rows and rows[0].idle > 1.0:
                    seen = (snap, rows[0])
            time.sleep(0.2)
        assert seen is not None, "no snapshot showed the tool call in flight"
        snap, row = seen
        assert row.in_flight == ("shell",) and row.last_event == "tool shell"
        assert row.status == "running" and not row.done
        task = snap.tasks[0]
        assert task.idle_sample == row.sample_id and task.idle is not None
        assert task.idle >= row.idle
    finally:
        handle.stop()
        handle.wait(60)
