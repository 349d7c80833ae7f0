"""``inspect-watch watch --act`` end to end: real evals (the scripted model), the real
CLI, the evals' own logs as the judge of what was done."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.evalproc import default_sigint
from tests.jsonlines import complete_records

pytestmark = pytest.mark.e2e


def cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "watcher", *args], capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ),
                          stdin=subprocess.DEVNULL)


def lines(path: Path) -> list[dict[str, Any]]:
    return complete_records(path)


def actions(path: Path) -> list[dict[str, Any]]:
    return [d for d in lines(path) if d["kind"] == "action"]


def read_log(proc: Any) -> Any:
    from inspect_ai.log import read_eval_log

    [log] = proc.logs()
    return read_eval_log(str(log))


def operator_limits(sample: Any) -> list[Any]:
    return [e for e in sample.events if e.event == "sample_limit" and e.type == "operator"]


def test_endless_loops_are_cancelled_with_score_and_their_siblings_run_on(
        eval_runner: Any, tmp_path: Path) -> None:
    proc = eval_runner("watchdog", "--max-samples", "4", tool_delay=0.2)
    proc.discovery()
    out, state, summary = tmp_path / "out.jsonl", tmp_path / "state.json", tmp_path / "s.md"
    res = cli("watch", "--act", "--format", "jsonl", "--output", str(out), "--poll", "0.5",
              "--state", str(state), "--summary", str(summary))
    assert res.returncode == 0, res.stderr
    assert proc.wait() == 0
    acts = actions(out)
    requested = {a["sample_id"]: a for a in acts if a["outcome"] == "requested"}
    assert set(requested) == {"submit-loop", "repeat"}, acts
    for sid, rule in (("submit-loop", "submit-loop"), ("repeat", "repeated-tool-call")):
        a = requested[sid]
        assert (a["verb"], a["args"], a["rule"], a["confidence"], a["mode"]) == (
            "cancel_sample", {"action": "score"}, rule, "high", "act")
        assert a["dry_run_answer"]["body"]["changed"] is True
        assert a["server_answer"]["body"]["changed"] is True
        # acted on at the first or second poll after its grace was over
        assert 1 <= a["details"]["checks_after_grace"] <= 2
        assert a["details"]["grace_met"] in ("events", "seconds")
    assert not [a for a in acts if a["sample_id"].startswith("clean")]
    assert not [a for a in acts if a["outcome"] in ("failed", "unsupported")]
    # the log says so: the loops ended by the operator's cancel and were scored
    log = read_log(proc)
    samples = {s.id: s for s in log.samples}
    for sid in ("submit-loop", "repeat"):
        s = samples[sid]
        assert s.limit is not None and s.limit.type == "operator", sid
        assert operator_limits(s), sid
        assert s.scores  # "score": what was done is kept and scored
        # and long before the message limit
        assert len(s.messages) < 400
    for sid in ("clean-0", "clean-1"):  # untouched: finished on their own, submitted
        s = samples[sid]
        assert s.limit is None and not operator_limits(s)
        assert s.scores and next(iter(s.scores.values())).value == "C"
    # once the sample's row showed it, a record says the cancel did it
    confirmed = {a["sample_id"] for a in acts if a["outcome"] == "confirmed"}
    assert confirmed <= {"submit-loop", "repeat"} and confirmed
    # the findings say what was done and what the loops spent; the state remembers
    findings = [d for d in lines(out) if d["kind"] == "finding"]
    ended = next(f for f in findings if f["rule"] == "repeated-tool-call"
                 and f["sample_id"] == "repeat" and f["status"] == "ended")
    assert "inspect-watch watchdog (--act): what it did about this finding" in ended["handoff"]
    assert "requested; the server accepted it" in ended["handoff"]
    assert ended["evidence"]["facts"]["tokens_since_first_seen"] > 0
    # what the cancel caused (the operator's limit it set, the model call it cut) is
    # no new problem: recorded beside the action, never reported as a finding
    caused = [f for f in findings if f["sample_id"] in requested
              and f["first_seen"] >= requested[f["sample_id"]]["at"]]
    caused += [f for f in findings if f["sample_id"] in requested
               and f["rule"] in ("sample-limit", "limit-row")]
    assert not caused, [(f["rule"], f["confidence"]) for f in caused]
    said = [d for d in lines(out) if d.get("notice") == "action_consequence"]
    assert {"sample-limit", "limit-row"} <= {d["details"]["rule"] for d in said}
    assert {d["sample"]["sample_id"] for d in said} <= set(requested)
    assert all(d["details"]["verb"] == "cancel_sample" for d in said)
    assert set(json.loads(state.read_text())["acted"]) == {
        a["finding_id"] for a in requested.values()}
    report = summary.read_text()
    assert "## Watchdog actions" in report and "## Spent after loops were found" in report


def test_dry_run_changes_nothing(eval_runner: Any, tmp_path: Path) -> None:
    proc = eval_runner("watchdog", "-T", "messages=160", "-T", "siblings=1",
                       "--max-samples", "3", tool_delay=0.2)
    proc.discovery()
    out = tmp_path / "out.jsonl"
    res = cli("watch", "--act=dry-run", "--format", "jsonl", "--output", str(out),
              "--poll", "0.5")
    assert res.returncode == 0, res.stderr
    assert proc.wait() == 0
    acts = actions(out)
    assert {a["sample_id"] for a in acts if a["outcome"] == "dry_run"} == {"submit-loop",
                                                                           "repeat"}
    assert all(a["mode"] == "dry-run" and a["server_answer"] is None for a in acts)
    assert not [a for a in acts if a["outcome"] in ("requested", "confirmed")]
    log = read_log(proc)
    for s in log.samples:  # no sample was cancelled: the loops ran to their message limit
        assert not operator_limits(s), s.id
        if s.id in ("submit-loop", "repeat"):
            assert s.limit is not None and s.limit.type == "message"


STALL_RULE = """\
id: stalled-sample
title: Sample stalled (test thresholds)
description: The built-in stall rule with a tool threshold of seconds, for a test.
category: stall
severity: warning
needs: metadata
detect:
  idle:
    thresholds: {model: 600, tool: 2, sandbox: 900, none: 60}
    polls: 2
confidence:
  base: medium
  reason: Nothing new for longer than the threshold, confirmed over two polls.
message: "no progress for {idle_seconds}s ({kind} in flight: {function})"
"""

STALL_POLICY = """\
rules:
  stalled-sample:
    verb: cancel_tool_call
    when: {confidence: medium, kind: tool}
    grace: {seconds: 1}
"""


def test_a_hung_tool_call_is_cancelled_and_the_sample_continues(
        eval_runner: Any, tmp_path: Path) -> None:
    rule, policy = tmp_path / "stall.yaml", tmp_path / "policy.yaml"
    rule.write_text(STALL_RULE)
    policy.write_text(STALL_POLICY)
    proc = eval_runner("hung_tool", tool_delay=0.1)
    proc.discovery()
    out = tmp_path / "out.jsonl"
    res = cli("watch", "--act", "--rules", str(rule), "--act-policy", str(policy),
              "--format", "jsonl", "--output", str(out), "--poll", "0.5")
    assert res.returncode == 0, res.stderr
    assert proc.wait() == 0  # an hour-long tool call did not hold the eval
    [act] = [a for a in actions(out) if a["outcome"] == "requested"]
    assert (act["verb"], act["scope"], act["rule"]) == (
        "cancel_tool_call", "tool_call", "stalled-sample")
    assert act["dry_run_answer"]["body"]["function"] == "shell"
    assert act["args"]["tool_call_id"] == act["server_answer"]["body"]["tool_call_id"]
    [sample] = read_log(proc).samples
    tools = [e for e in sample.events if e.event == "tool"]
    hung = next(e for e in tools if e.arguments.get("cmd") == "hang now")
    assert hung.error is not None and hung.error.type == "timeout"  # what the model saw
    assert hung.id == act["args"]["tool_call_id"]
    # and it went on: the next call ran, it submitted, it was scored, nothing cancelled it
    assert [e.arguments.get("cmd") for e in tools][-2:] == ["echo after", None]
    assert sample.limit is None and next(iter(sample.scores.values())).value == "C"


RESTART_POLICY = """\
defaults: false
rules:
  repeated-tool-call:
    verb: cancel_tool_call
    when: {confidence: high}
    grace: {seconds: 0.5}
"""


def _watch_until(args: list[str], out: Path, done: Any, timeout: float = 120) -> None:
    """A live watch in the background until ``done(records)``, then Ctrl+C."""
    proc = subprocess.Popen([sys.executable, "-m", "watcher", "watch", *args, "--output",
                             str(out)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and proc.poll() is None and not done(lines(out)):
            time.sleep(0.2)
        assert done(lines(out)), lines(out)
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err  # interrupted: its state saved


def test_a_watch_restarted_with_its_state_does_not_act_twice(
        eval_runner: Any, tmp_path: Path) -> None:
    """The action (a tool call cancelled: the sample goes on, so a second watch sees
    the same finding episode again) is remembered in the state before it is sent."""
    proc = eval_runner("watchdog", "-T", "siblings=0", "-T", "messages=30", tool_delay=2.0)
    proc.discovery()
    policy, state = tmp_path / "policy.yaml", tmp_path / "state.json"
    policy.write_text(RESTART_POLICY)
    common = ["--act", "--act-policy", str(policy), "--state", str(state), "--format",
              "jsonl", "--poll", "0.3"]
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"

    def acted(recs: list[dict[str, Any]]) -> bool:
        return any(r["kind"] == "action" and r["outcome"] == "requested"
                   and r["sample_id"] == "repeat" for r in recs)

    _watch_until(common, first, acted)
    [done] = [a for a in actions(first) if a["outcome"] == "requested"]
    assert json.loads(state.read_text())["acted"].keys() >= {done["finding_id"]}

    def seen_again(recs: list[dict[str, Any]]) -> bool:
        return any(r["kind"] == "action" and r["finding_id"] == done["finding_id"]
                   for r in recs)

    _watch_until(common, second, seen_again)
    again = [a for a in actions(second) if a["finding_id"] == done["finding_id"]]
    assert [(a["outcome"], a["reason"]) for a in again] == [("skipped", "already_acted")]
    assert proc.wait() == 0  # the loop ends at its message limit
    # the eval's own log: that tool call was cancelled once
    sample = next(s for s in read_log(proc).samples if s.id == "repeat")
    cancelled = [e for e in sample.events if e.event == "tool" and e.error is not None
                 and e.error.type == "timeout"]
    requested = [a for a in actions(first) + actions(second) if a["outcome"] == "requested"]
    assert len(cancelled) == len(requested)
    assert done["args"]["tool_call_id"] in {e.id for e in cancelled}
