"""Exit codes that say what happened: one meaning per code, in every command, documented.

A selector that matches nothing is no success (4); a watch started while an ``inspect
eval`` is still starting says "no eval yet" apart from "no evals" (5), and ``--wait``
waits for it. The eval that starts late is real: its task file holds its import (and so
its control server) until the test opens a gate.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.corpus import CORPUS
from tests.evalproc import SCENARIOS, EvalProc, start_eval
from watcher.cli import EXIT_CODES, main
from watcher.exit_codes import ExitCode
from watcher.starting import starting_evals

README = Path(__file__).resolve().parent.parent / "README.md"

GATED = '''
import importlib.util
import os
import time

from inspect_ai import Task, task

while not os.path.exists(os.environ["EVAL_GATE"]):
    time.sleep(0.05)
_spec = importlib.util.spec_from_file_location("gated_scenarios", os.environ["SCENARIO_FILE"])
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)


@task
def gated() -> Task:
    return _mod.loops()
'''


def test_every_exit_code_is_in_the_help_and_the_readme_table() -> None:
    helped = {int(m) for m in re.findall(r"^\s+(\d+)\s{2,}", EXIT_CODES, re.M)}
    assert helped == {int(c) for c in ExitCode}
    for command in ([], ["watch"], ["record"], ["replay"], ["report"], ["ls"], ["rules"],
                    ["top"], ["demo"], ["launch"], ["sessions"], ["release"], ["mcp"]):
        res = CliRunner().invoke(main, [*command, "--help"])
        assert "Exit codes" in res.output and "4    nothing matched" in res.output, command
    text = README.read_text()
    table = text[text.index("### Exit codes"):]
    table = table[:table.index("\n### ", 10)]
    rows = {int(m) for m in re.findall(r"^\| (\d+) \|", table, re.M)}
    assert rows == {int(c) for c in ExitCode}


def test_a_task_or_sample_that_matches_nothing_exits_4(tmp_path: Path) -> None:
    """Over logs, a mistyped task or sample id reads nothing: exit 4 (it was 0, like a
    clean run); `record` of a task or sample that is not there says the same."""
    def watch(*selector: str) -> Any:
        return CliRunner().invoke(main, ["watch", "--log-dir", str(CORPUS), *selector,
                                         "--once", "-q", "--format", "jsonl"])

    res = watch("no_such_task")
    assert res.exit_code == ExitCode.NO_MATCH == 4, res.output
    assert json.loads(res.output.splitlines()[-1])["notice"] == "no_match"
    res = watch("inspect_evals/luce_intercode_ctf", "no-such-sample")
    assert res.exit_code == 4, res.output
    res = CliRunner().invoke(main, ["record", "no_such_task", "1", "--log-dir", str(CORPUS),
                                    "-o", str(tmp_path / "r.jsonl")])
    assert res.exit_code == 4 and "no task matching 'no_such_task'" in res.output
    # nothing to watch at all is still a clean exit, as it always was
    empty = tmp_path / "empty"
    empty.mkdir()
    res = CliRunner().invoke(main, ["watch", "--log-dir", str(empty), "--once", "-q"])
    assert res.exit_code == 0, res.output


def _gated_eval(tmp: Path, data_home: Path) -> tuple[EvalProc, Path]:
    """Kept inspectable once it ends (``--ctl-server keep``) until the watch releases it:
    its three samples take a second or two, less than a busy machine can take to start
    the watch (CI saw the eval end before the watch looked, and the watch wait on)."""
    task_file = tmp / "gated.py"
    task_file.write_text(GATED)
    gate = tmp / "gate"
    proc = start_eval(tmp, "gated", "--ctl-server", "keep", data_home=data_home,
                      task_file=task_file,
                      env={"EVAL_GATE": str(gate), "SCENARIO_FILE": str(SCENARIOS)})
    return proc, gate


def _watch(data_home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "watcher", "watch", "--format", "jsonl",
                           *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "XDG_DATA_HOME": str(data_home)},
                          stdin=subprocess.DEVNULL)


@pytest.mark.e2e
def test_no_eval_yet_is_not_no_evals_and_wait_waits_for_it(tmp_path: Path) -> None:
    data_home = tmp_path / "data"
    data_home.mkdir()
    proc, gate = _gated_eval(tmp_path, data_home)
    try:
        control = data_home / "inspect_ai" / "control"
        deadline = time.monotonic() + 60
        while not starting_evals(control) and time.monotonic() < deadline:
            time.sleep(0.1)  # the process is up (its command line readable)
        assert [e.pid for e in starting_evals(control)] == [proc.proc.pid]
        res = _watch(data_home, "--once")
        assert res.returncode == ExitCode.NOT_STARTED == 5, res.stdout + res.stderr
        [notice] = [json.loads(line) for line in res.stdout.splitlines()]
        assert notice["notice"] == "no_eval_yet" and notice["details"]["pids"] == [
            proc.proc.pid]
        assert f"pid {proc.proc.pid}" in notice["message"] and "--wait" in notice["message"]
        # another user's data directory (another XDG_DATA_HOME) is not this watch's eval
        other = tmp_path / "other"
        other.mkdir()
        res = _watch(other, "--once")
        assert res.returncode == 0
        assert json.loads(res.stdout.splitlines()[-1])["notice"] == "no_evals"
        # --wait: the same watch waits for it, then watches it to its end
        watcher = subprocess.Popen(
            [sys.executable, "-m", "watcher", "watch", "--format", "jsonl", "--wait", "120",
             "--release-when-done", "--output", str(tmp_path / "f.jsonl")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
            env={**os.environ, "XDG_DATA_HOME": str(data_home)})
        gate.touch()
        out, err = watcher.communicate(timeout=300)
        assert watcher.returncode == 0, err
        records = [json.loads(line) for line in (tmp_path / "f.jsonl").read_text().splitlines()]
        assert {r["rule"] for r in records if r["kind"] == "finding"} >= {
            "repeated-tool-call", "submit-loop"}
        assert not [r for r in records if r.get("notice") in ("no_evals", "no_eval_yet")]
        assert proc.wait() == 0
    finally:
        gate.touch()
        proc.stop()
