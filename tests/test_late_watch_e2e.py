"""A watch started after an eval's samples ended, while the eval is kept inspectable
(``--ctl-server keep``), reports what a scan of its log reports.

Such a watch reads every page over the control channel (the sample buffer is gone with
the rows), where a model event comes without what it answered. Until 2026-12-07 four of
these eight runs disagreed with their logs: submit loops whose harness nudges went
unseen, a conversation's retries after each customer reply read as a loop.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.evalproc import SCENARIOS
from tests.test_recall_e2e import QUALITY, _summary, watched_late
from tests.test_watch_e2e import KEEP, findings

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

RUNS = [("quality_weak", QUALITY), ("quality", QUALITY), ("quality_errors", QUALITY),
        ("loops", SCENARIOS), ("truth", SCENARIOS), ("conversation", SCENARIOS),
        ("shared", SCENARIOS), ("watchdog", SCENARIOS)]


@pytest.mark.parametrize(("task", "task_file"), RUNS, ids=[t for t, _ in RUNS])
def test_a_late_watch_reports_what_the_log_says(eval_runner: Any, tmp_path: Path,
                                                task: str, task_file: Path) -> None:
    args = ["-T", "messages=60"] if task == "watchdog" else []  # (it never ends itself)
    proc = eval_runner(task, *KEEP, *args, task_file=task_file, tool_delay=0.05)
    proc.discovery()
    out, post = watched_late(proc, tmp_path, task, timeout=300)
    # it read every sample to its end (a watch that read nothing would agree with a log
    # that has nothing to say, as the simulated user's conversation has)
    released = [d for d in map(json.loads, out.read_text().splitlines())
                if d.get("notice") == "released"]
    assert released and all(d["details"]["ok"] for d in released), released
    assert "read to the end" in released[0]["message"]
    assert _summary(findings(out)) == _summary(findings(post))
