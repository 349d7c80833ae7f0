"""CLI behaviour that needs no live eval: replay, suppression, bad input, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from watcher.cli import main


def _fixture(tmp_path: Path) -> Path:
    path = tmp_path / "loop.jsonl"
    events = []
    for i in range(4):
        events.append({"event": "tool", "uuid": f"u{i}", "timestamp": 1000.0 + i,
                       "function": "bash", "arguments": '{"cmd": "cat /tmp/status"}',
                       "result": "waiting", "has_error": False, "pending": None})
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def _rules(out: str) -> set[str]:
    return {json.loads(line)["rule"] for line in out.splitlines()
            if line.strip() and json.loads(line)["kind"] == "finding"}


def test_replay_finds_and_suppress_file_silences(tmp_path: Path) -> None:
    fixture = _fixture(tmp_path)
    res = CliRunner().invoke(main, ["replay", str(fixture), "--format", "jsonl"])
    assert res.exit_code == 0, res.output
    assert "repeated-tool-call" in _rules(res.output)
    supp = tmp_path / "suppress.yaml"
    supp.write_text("suppress:\n  - rule: repeated_tool_call\n    field: function\n"
                    "    op: equals\n    value: bash\n    reason: this task polls\n")
    res = CliRunner().invoke(main, ["replay", str(fixture), "--format", "jsonl",
                                    "--suppress", str(supp)])
    assert res.exit_code == 0, res.output
    assert not {r for r in _rules(res.output) if "repeat" in r}


def test_fail_on_sets_exit_code(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["replay", str(_fixture(tmp_path)), "--format", "jsonl",
                                    "--fail-on", "high"])
    assert res.exit_code == 1


def test_invalid_rule_refuses_to_start_with_located_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("id: my-rule\ntitle: x\ndetect: {match: {}}\nseverty: warning\n")
    res = CliRunner().invoke(main, ["watch", "--once", "--rules", str(bad)])
    assert res.exit_code == 2
    assert f"{bad}:4:1" in res.output and "severity" in res.output  # did-you-mean


def test_corrupt_state_file_is_a_clear_error(tmp_path: Path) -> None:
    state = tmp_path / "s.json"
    state.write_text("{not json")
    res = CliRunner().invoke(main, ["watch", "--once", "--state", str(state)])
    assert res.exit_code == 2 and "cannot read state file" in res.output


def test_no_running_evals_is_a_notice_not_an_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("INSPECT_WATCH_CONTROL_DIR", str(tmp_path / "empty"))
    res = CliRunner().invoke(main, ["watch", "--once", "--no-color"])
    assert res.exit_code == 0 and "no running Inspect evals" in res.output
