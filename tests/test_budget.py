"""A run-wide budget (watcher/run/budget.py): what each task and the whole watch spent,
the share in loops, and ``--task-budget`` raising a finding a watchdog acts on.

The end-to-end test runs a real eval (endless loops beside clean siblings, one sample at
a time) watched with ``--act --task-budget``: the task passes its budget while its first
samples run, the finding names the task's spend and what was and was not counted, the
watchdog drains the task through its control channel, and the eval's log shows the
samples still queued never ran.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.corpus import CORPUS
from watcher.cli import main
from watcher.findings import Evidence, Finding, SampleRef
from watcher.handoff import finding_actions
from watcher.run.budget import (
    COUNTED,
    NOT_COUNTED,
    SampleSpend,
    TaskBudget,
    TaskSpend,
    loop_tokens,
    merged_spend,
    spend_notice,
    task_spend,
)

TASK = SampleRef("t", "tid", "e1", "m", "", 0, pid=None, log_location="/logs/x.eval")


def loop(sid: str, tokens: int, confidence: str = "high", status: str = "open") -> Finding:
    ref = SampleRef("t", "tid", "e1", "m", sid, 1)
    return Finding(id=f"{sid}-{confidence}", rule="submit-loop", title="", category="submit_loop",
                   severity="warning", confidence=confidence,  # type: ignore[arg-type]
                   score=0.9, confidence_reason="", sample=ref, summary="",
                   evidence=Evidence(facts={"tokens_since_first_seen": tokens}),
                   first_seen=1.0, last_seen=2.0, count=3, status=status,  # type: ignore[arg-type]
                   handoff="")


def test_loop_tokens_count_strong_loops_once_per_sample_and_open_ones_apart() -> None:
    found = [loop("a", 100), loop("a", 300, "medium", "ended"), loop("b", 50, "low"),
             loop("c", 70, status="ended")]
    # a: its earliest (most spent) loop, still open; b: a weak inference, not counted
    assert loop_tokens(found) == {"e1": (370, 300)}


def test_a_task_passes_its_budget_once_and_ends_with_the_final_figures() -> None:
    budget = TaskBudget(1000)
    samples = [SampleSpend("a", 1, 1, 600, True), SampleSpend("b", 1, 1, 300, False, 5.0),
               SampleSpend("c", 1, 1, None, False)]
    under = task_spend(TASK, samples, (0, 0))
    assert (under.tokens, under.samples_counted, under.samples_not_counted) == (900, 2, 1)
    assert budget.check(under, samples, 10.0) is None
    samples[0] = SampleSpend("a", 1, 1, 800, True)
    over = task_spend(TASK, samples, (400, 400))
    f = budget.check(over, samples, 11.0)
    assert f is not None and (f.rule, f.category, f.status, f.confidence) == (
        "task-budget", "budget", "open", "high")
    assert f.sample.sample_id == "a"  # the running sample that spent the most
    facts = f.evidence.facts
    assert (facts["task_tokens"], facts["budget"], facts["over_by"]) == (1100, 1000, 100)
    assert facts["samples_not_counted"] == 1 and facts["in_open_loops_share"] == 0.3636
    assert facts["counted"] == COUNTED and facts["not_counted"] == NOT_COUNTED
    assert "1,100 tokens, past its budget of 1,000" in f.summary
    assert budget.check(over, samples, 12.0) is None  # said once
    done = task_spend(TASK, samples, (400, 0), finished=True)
    end = budget.check(done, samples, 13.0)
    assert end is not None and end.id == f.id and end.status == "ended"
    assert budget.check(done, samples, 14.0) is None
    # as data: its hand-off offers to drain the task (dry run first), by task id
    [drain] = [a for a in finding_actions(f, exited=False) if a["verb"] == "drain_task"]
    assert drain["scope"] == "task" and drain["target"]["task_id"] == "tid"
    assert drain["dry_run_argv"] == ["inspect", "ctl", "task", "drain", "--model", "m",
                                     "--dry-run", "--", "tid"]


def test_read_from_logs_the_finding_is_dated_when_the_task_passed_its_budget() -> None:
    samples = [SampleSpend("a", 1, 1, 600, False, 30.0), SampleSpend("b", 1, 1, 500, False, 20.0),
               SampleSpend("c", 1, 1, 700, False, 10.0)]
    spend = task_spend(TASK, samples, (0, 0), finished=True)
    f = TaskBudget(1000).check(spend, samples, 99.0)
    # ended at 10 (700), at 20 (1,200 > 1,000): b's end took the task past it
    assert f is not None and f.first_seen == 20.0 and f.sample.sample_id == "b"


def test_every_watch_says_what_it_spent_and_what_was_counted() -> None:
    """Over a real log (the corpus's CTF run): the closing ``spend`` notice adds up
    Inspect's own counts of every sample, the same as the log's rows, and says what it
    counted and what not; with a budget the task's finding says so too."""
    res = CliRunner().invoke(main, ["watch", "--log-dir", str(CORPUS / "docent-intercode-ctf-"
                                    "gpt4o.eval"), "--once", "-q", "--format", "jsonl",
                                    "--task-budget", "100000"])
    assert res.exit_code == 0, res.output
    records = [json.loads(x) for x in res.output.splitlines()]
    [spend] = [r for r in records if r.get("notice") == "spend"]
    from watcher.sources.logfiles import LogSource

    src = LogSource(str(CORPUS / "docent-intercode-ctf-gpt4o.eval"))
    [task] = src.tasks()
    rows = src.samples(task).samples
    src.close()
    total = sum(r.raw["total_tokens"] for r in rows)
    assert spend["details"]["watch"]["tokens"] == total == 425_882
    assert spend["details"]["watch"]["samples_counted"] == len(rows) == 15
    assert spend["details"]["counted"] == COUNTED
    assert spend["details"]["not_counted"] == NOT_COUNTED
    [t] = spend["details"]["tasks"]
    assert t["task_id"] == task.task_id and t["finished"] is True
    assert 0 < t["in_loops"] < total
    budget = [r for r in records if r["kind"] == "finding" and r["rule"] == "task-budget"]
    assert [b["status"] for b in budget] == ["open", "ended"]
    assert budget[-1]["evidence"]["facts"]["task_tokens"] == total
    assert budget[0]["evidence"]["facts"]["budget"] == 100000
    assert budget[0]["actions"] == [a for a in budget[0]["actions"] if a["verb"] == "view_log"]


def test_spend_notices_of_several_files_are_one_for_the_report() -> None:
    """Shards of one scan (or watchers of one run) each end with a ``spend`` notice; a
    report of their files says one spend, each task counted once at its latest view,
    as one scan would."""
    def task(eval_id: str, tokens: int, loops: int) -> TaskSpend:
        return TaskSpend("t", "tid-" + eval_id, eval_id, "m", tokens, 2, 1, loops, 0, True)

    a = spend_notice([task("e1", 1000, 500), task("e2", 3000, 0)], at=10.0)
    b = spend_notice([task("e3", 6000, 1500)], at=12.0)
    again = spend_notice([task("e2", 4000, 1000)], at=13.0)  # e2 read again, later
    other = a.__class__(kind="unreadable", message="x", at=11.0, details={})
    [first, merged] = merged_spend([other, a, b, again])
    assert first is other
    whole = spend_notice([task("e1", 1000, 500), task("e3", 6000, 1500),
                          task("e2", 4000, 1000)], at=13.0)
    assert merged.message == whole.message
    assert merged.message == ("spend: 11,000 tokens in 3 task(s), 6 sample(s) counted; "
                              "3,000 (27%) after a loop finding's first evidence; "
                              "3 sample(s) without a token figure")
    assert merged.details["watch"] == whole.details["watch"]
    # one notice, or one that cannot be read, is left as it is
    assert merged_spend([a]) == [a]
    broken = a.__class__(kind="spend", message="?", at=1.0, details={"tasks": [{}]})
    assert merged_spend([a, broken]) == [a, broken]


@pytest.mark.e2e
def test_the_watchdog_drains_a_task_that_passed_its_budget(eval_runner: Any,
                                                           tmp_path: Path) -> None:
    proc = eval_runner("watchdog", "--max-samples", "1", tool_delay=0.2)
    proc.discovery()
    out = tmp_path / "out.jsonl"
    res = subprocess.run([sys.executable, "-m", "watcher", "watch", "--act", "--format",
                          "jsonl", "--output", str(out), "--poll", "0.5", "--task-budget",
                          "3000"], capture_output=True, text=True, timeout=600,
                         env=dict(os.environ), stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr
    assert proc.wait() == 0
    records = [json.loads(x) for x in out.read_text().splitlines()]
    [opened] = [r for r in records if r["kind"] == "finding" and r["rule"] == "task-budget"
                and r["status"] == "open"]
    facts = opened["evidence"]["facts"]
    assert facts["task_tokens"] > facts["budget"] == 3000
    assert facts["counted"] == COUNTED and facts["not_counted"] == NOT_COUNTED
    assert opened["actions"][0]["by"] == "watchdog"
    assert opened["actions"][0]["verb"] == "drain_task"
    drains = [r for r in records if r["kind"] == "action" and r["verb"] == "drain_task"]
    assert [d["outcome"] for d in drains] == ["requested"], drains
    assert drains[0]["rule"] == "task-budget" and drains[0]["scope"] == "task"
    assert drains[0]["server_answer"]["body"]["changed"] is True
    # the log: the samples still queued when the task was drained never ran
    from inspect_ai.log import read_eval_log

    [log] = proc.logs()
    ran = {s.id for s in read_eval_log(str(log)).samples or []}
    assert 1 <= len(ran) < 4, ran
    [spend] = [r for r in records if r.get("notice") == "spend"]
    assert spend["details"]["task_budget"] == 3000
