"""The clock-driven `idle` detector against a real eval with a slow tool call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.jsonlines import complete_records

pytestmark = pytest.mark.e2e

FAST_STALL = """
id: fast-stall
title: Sample stalled (test thresholds)
description: The built-in stall rule with thresholds of seconds, for a test.
category: stall
severity: warning
needs: metadata
detect:
  idle:
    thresholds: {model: 3, tool: 3, sandbox: 3, none: 3}
    polls: 2
confidence:
  base: medium
  reason: Nothing new for longer than the threshold, confirmed over two polls.
message: "no progress for {idle_seconds}s ({kind} in flight: {function})"
handoff: Check the in-flight call.
"""


def test_a_pending_tool_call_is_reported_as_a_stall_from_the_clock(eval_runner: Any,
                                                                     tmp_path: Path) -> None:
    rule = tmp_path / "fast-stall.yaml"
    rule.write_text(FAST_STALL)
    proc = eval_runner("multi", "-T", "samples=1", "-T", "steps=1", tool_delay=8.0)
    proc.discovery()
    out = tmp_path / "stall.jsonl"
    res = subprocess.run(
        [sys.executable, "-m", "watcher", "watch", "--rules", str(rule), "--only", "fast-stall",
         "--format", "jsonl", "--output", str(out), "--poll", "0.5"],
        capture_output=True, text=True, timeout=180, env=dict(os.environ),
        stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr
    found = [json.loads(line) for line in out.read_text().splitlines()]
    stalls = [d for d in found if d["kind"] == "finding" and d["rule"] == "fast-stall"]
    assert stalls, found
    first = stalls[0]
    assert first["sample_id"] == "s0"
    assert first["evidence"]["facts"]["kind"] == "tool"
    assert "shell" in first["summary"]
    # one episode: later snapshots update it, they do not open new findings
    assert len({d["id"] for d in stalls}) == 1


# -- the built-in rule, learning each task's own pace (tests/evals/pace.py) ----------

PACE = Path(__file__).resolve().parent / "evals" / "pace.py"
BUILTIN = Path(__file__).resolve().parents[1] / "rules" / "stalled-sample.yaml"


def _records(path: Path) -> list[dict[str, Any]]:
    return complete_records(path)


def _stalls(path: Path, task: str | None = None) -> list[dict[str, Any]]:
    return [d for d in _records(path) if d.get("kind") == "finding"
            and d["rule"] == "stalled-sample" and (task is None or d["task"] == task)]


def _watch(*args: str, out: Path) -> subprocess.Popen[str]:
    from tests.evalproc import default_sigint

    return subprocess.Popen(
        [sys.executable, "-m", "watcher", "watch", "--only", "stalled-sample", "--format",
         "jsonl", "--output", str(out), "--poll", "1", *args], stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        preexec_fn=default_sigint)


def _stop(proc: subprocess.Popen[str]) -> str:
    import signal

    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    return err


def _wait(until: Any, proc: subprocess.Popen[str], cap: float = 240.0) -> None:
    """Until the condition holds (or the watch ended, or the cap on a wedged run)."""
    import time

    deadline = time.monotonic() + cap
    while not until() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)


def scaled_rule(tmp_path: Path, scale: float) -> Path:
    """The built-in rule with its call thresholds and floor scaled by ``scale`` (so a
    test of minutes runs in seconds); nothing else changed (its inline tests dropped:
    their fixtures live beside the original)."""
    import yaml

    doc = yaml.safe_load(BUILTIN.read_text())
    idle = doc["detect"]["idle"]
    idle["thresholds"] = {k: (v if k == "none" else v * scale)
                          for k, v in idle["thresholds"].items()}
    idle["learn"]["floor"] = idle["learn"]["floor"] * scale
    doc.pop("tests")
    path = tmp_path / "stalled-sample.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_a_quick_tasks_hung_generation_is_found_by_its_own_pace_and_slow_first_calls_are_not(
        eval_runner: Any, tmp_path: Path) -> None:
    """Two evals watched at once by the built-in rule: a quick task (1 s generations)
    whose one sample's generation hangs is found after the floor (30 s, not the default
    600 s), naming the in-flight kind and the task's own figure; a task whose first
    generations take 35 s (longer than that floor, but nothing of its pace is known yet)
    gets nothing."""
    quick = eval_runner("quick_hang", "--max-samples", "11", task_file=PACE)
    first = eval_runner("slow_first", "--max-samples", "3", task_file=PACE)
    quick.discovery()
    first.discovery()
    out = tmp_path / "stall.jsonl"
    watch = _watch(out=out)
    try:
        _wait(lambda: bool(_stalls(out, "quick_hang")) and first.proc.poll() is not None,
              watch)
        assert first.wait(120) == 0
    finally:
        err = _stop(watch)
    stalls = _stalls(out)
    assert stalls, (err, _records(out))
    assert {d["task"] for d in stalls} == {"quick_hang"}, stalls  # slow first calls: none
    f = stalls[0]
    facts = f["evidence"]["facts"]
    assert f["sample_id"] == "hang" and facts["kind"] == "model"
    assert facts["learned"] is True and facts["calls"] >= 20
    assert facts["threshold_seconds"] == 30.0  # the floor: 5 x p95 of ~1 s is less
    assert facts["percentile_seconds"] < 6.0
    assert f["summary"].startswith("model call (inspect_watch_scripted/test) pending ")
    assert "this task's calls to the model: p95 " in f["summary"]
    assert "threshold 30 s (the floor)" in f["summary"]


def test_a_slow_tasks_long_normal_tool_calls_are_not_stalls(eval_runner: Any,
                                                             tmp_path: Path) -> None:
    """Tool calls of 6-12 s (three-minute builds at 1/20 scale, and the rule at the same
    scale): each call is within what the task's own calls take, so nothing is found,
    while the same calls against the floor alone (what a fixed short threshold would
    do) would be stalls."""
    rule = scaled_rule(tmp_path, 1 / 20)
    proc = eval_runner("slow_tools", "--max-samples", "10", task_file=PACE)
    proc.discovery()
    out = tmp_path / "slow.jsonl"
    watch = _watch("--rules", str(rule), out=out)
    try:
        assert proc.wait(240) == 0
        _wait(lambda: watch.poll() is not None, watch, cap=60)
    finally:
        err = _stop(watch)
    assert "stalled-sample" in rule.read_text()
    assert _stalls(out) == [], _stalls(out)
    from inspect_ai.log import read_eval_log

    [log] = proc.logs()
    took = [e.working_time for s in read_eval_log(str(log)).samples or [] for e in s.events
            if e.event == "tool" and e.function == "build" and e.working_time is not None]
    assert len(took) == 30 and min(took) > 1.5, (took, err)  # each past the scaled floor
