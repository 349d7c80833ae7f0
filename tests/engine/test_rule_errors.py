"""Issue 23 item 9: a rule expression that fails at run time never matches, and is said
once per rule and reason (``rule_error``) with the rule's file and line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.corpus import CORPUS
from tests.engine.util import REF, REPO, episodes, load_text, run, tool
from watcher.engine import Engine, materialise
from watcher.findings import SampleRef

# a key JMESPath cannot compute for these events: length() of a number
REPEAT_BAD_KEY = """\
id: bad-key
title: repeat on a failing key
category: repeated_tool_call
severity: warning
events: [tool]
needs: content
detect:
  repeat:
    key: "length(args.n)"
    count: 3
    window: {events: 6}
"""


def test_a_failing_repeat_key_raises_no_finding(tmp_path: Path) -> None:
    """Before: the key became null for every event, so three different calls were
    'the same call' three times (the false repeats of 391 samples)."""
    rules = load_text(tmp_path, REPEAT_BAD_KEY)
    items = [tool(arguments={"n": i}) for i in range(3)]
    assert episodes(run(rules, items)) == []


def test_a_working_key_still_counts(tmp_path: Path) -> None:
    rules = load_text(tmp_path, REPEAT_BAD_KEY)
    (ep,) = episodes(run(rules, [tool(arguments={"n": "abc"})] * 3))  # length of a string
    assert ep.rule == "bad-key" and ep.count == 3


def test_a_failing_where_never_matches_even_negated(tmp_path: Path) -> None:
    """``not: {where: ...}`` read a failure as false, and its negation matched."""
    rules = load_text(tmp_path, """\
        id: neg-where
        title: negated failing where
        category: shortcut
        severity: info
        events: [tool]
        needs: content
        not:
          where: "length(args.n) > `0`"
        detect: match
        """)
    assert episodes(run(rules, [tool(arguments={"n": 5})])) == []
    assert len(episodes(run(rules, [tool(arguments={"n": ""})]))) == 1  # it works on text


def test_failures_are_recorded_once_per_rule_and_reason(tmp_path: Path) -> None:
    rules = load_text(tmp_path, REPEAT_BAD_KEY)
    engine = Engine(rules)
    assert engine.take_errors() == []
    for sample in ("s1", "s2"):
        ref = SampleRef(**{**REF.as_dict(), "sample_id": sample})
        watch = engine.open_sample(ref)
        for i in range(5):
            watch.feed(materialise(i, tool(arguments={"n": i})))
            watch.feed(materialise(10 + i, tool(arguments={"n": [1, 2]})))  # this works
    (err,) = engine.take_errors()
    assert engine.take_errors() == []  # reported once
    assert (err.rule, err.expression) == ("bad-key", "length(args.n)")
    assert err.file.endswith("rules.yaml") and err.line == 1
    assert err.reason == "length() was given a number, not a string or array or object"
    assert err.sample is not None and err.sample.sample_id == "s1"  # where it first failed
    notice = err.notice(at=1.0)
    assert notice.kind == "rule_error" and "rules.yaml:1" in notice.message
    assert notice.details["rule"] == "bad-key"


@pytest.mark.slow  # a watch in a process
def test_a_watch_reports_rule_error_once(tmp_path: Path) -> None:
    """End to end on real logs: the notice is written once, with file and line; the
    rule raises nothing (every tool call's key fails: abs() of a function name)."""
    path = tmp_path / "bad.yaml"
    path.write_text(REPEAT_BAD_KEY.replace("length(args.n)", "abs(function)"))
    out = tmp_path / "out.jsonl"
    got = subprocess.run(
        [sys.executable, "-m", "watcher", "watch", "--log-dir", str(CORPUS), "--once",
         "--rules", str(path), "--only", "bad-key", "--format", "jsonl", "-o", str(out), "-q"],
        capture_output=True, text=True, timeout=300, cwd=REPO)
    assert got.returncode in (0, 1), got.stderr
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    errors = [x for x in lines if x.get("notice") == "rule_error"]
    assert [x for x in lines if x.get("kind") == "finding"] == []
    assert len(errors) == 1, lines
    assert errors[0]["details"]["file"] == str(path) and errors[0]["details"]["line"] == 1
    assert errors[0]["details"]["reason"].startswith("abs() was given a string")
