"""The inline-test runner: JSONL case files and tick/row control items."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from watcher.engine import load_rules, run_rule_tests


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "r.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_jsonl_case_file(tmp_path: Path) -> None:
    lines = [{"function": "bash", "arguments": "ls", "error": "denied"}] * 2
    (tmp_path / "case.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    path = write(tmp_path, """
        id: two-errors
        title: t
        category: error_storm
        severity: info
        events: [tool]
        needs: metadata
        where: has_error
        detect: {threshold: {count: 2, window: {events: 5}}}
        tests:
          - {name: from file, file: case.jsonl, expect: [{count: 2}]}
          - {name: wrong on purpose, file: case.jsonl, expect: []}
        """)
    results = run_rule_tests(load_rules(paths=[path], builtin=False, user_dir=False).rules)
    assert [r.passed for r in results] == [True, False]
    assert results[1].problem == "expected 0 finding(s), got 1"


def test_tick_and_row_control_items(tmp_path: Path) -> None:
    path = write(tmp_path, """
        id: stall
        title: t
        category: stall
        severity: warning
        detect: {idle: {thresholds: {none: 60}}}
        tests:
          - name: stalls
            events:
              - {function: bash}
              - {tick: {now: 1100, last_change_at: 1000, polls_without_change: 2}}
            expect: [{count: 1}]
          - name: not corroborated
            events:
              - {tick: {now: 1100, last_change_at: 1000, polls_without_change: 1}}
            expect: []
        ---
        id: errored
        title: t
        category: retry_exhausted
        severity: critical
        detect: {sample: {row: {where: "status == 'error'"}}}
        confidence_when:
          - {when: {task_wide: true}, raise: high, reason: shared.}
        tests:
          - name: task-wide
            events:
              - row: {sample_id: "1", status: error, error: boom}
                context:
                  - {sample_id: "2", status: error, error: boom}
                  - {sample_id: "3", status: error, error: boom}
            expect: [{confidence: high}]
          - name: running
            events: [{row: {status: running}}]
            expect: []
        """)
    results = run_rule_tests(load_rules(paths=[path], builtin=False, user_dir=False).rules)
    assert all(r.passed for r in results), [r.problem for r in results]
    assert len(results) == 4
