"""CLI commands against real evals: demo, ls, record → replay, --on-finding, --fail-on."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e


def cli(*args: str, timeout: float = 900, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "watcher", *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          env={**os.environ, **(env or {})})


def _demo_processes() -> list[str]:
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if "inspect-watch-demo-" in line]


def test_demo_watches_the_example_and_leaves_no_process(tmp_path: Path) -> None:
    res = cli("demo", "--no-color", "--verbose", "--keep-logs", str(tmp_path / "logs"),
              env={"XDG_DATA_HOME": str(tmp_path / "data")})
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    # one line per finding event, the evidence and hand-off once per finding
    assert re.search(r"\[HIGH\] (escalated from \w+ )?repeated-tool-call \d+× "
                     r"demo/repeated-call/1: ", out), out
    assert "Same tool call repeated (repeated-tool-call, new)" in out
    assert "sample repeated-call" in out and "sample submit-loop" in out
    assert "Claims a final answer but never submits (submit-loop, new)" in out
    assert out.count("If this sample should stop") == len(re.findall(r", new\)$", out, re.M))
    assert "sample clean  epoch" not in out  # no finding block for the clean run ...
    # ... and the demo says so, and why that is right
    assert ("inspect-watch demo: no findings for sample clean: it ran two different commands "
            "once each and submitted its answer, so no rule had anything to flag: that is the "
            "right result.") in out
    assert "no findings for sample repeated-call" not in out
    assert "only observes" in out
    [log] = (tmp_path / "logs").glob("*.eval")
    # the log it keeps is the one the hand-offs name
    assert f"Log: {log} (open with: inspect view --log-dir {tmp_path / 'logs'})" in out
    time.sleep(0.5)
    assert _demo_processes() == []


def test_demo_with_a_long_tmpdir_and_without_keep_logs(tmp_path: Path) -> None:
    """A TMPDIR as long as macOS's once put the eval's control socket past the AF_UNIX
    path limit (the eval did not start). And without --keep-logs the log is removed at the
    end: the findings' hand-offs do not name it (they said "open with inspect view" for a
    file the demo then deleted), and the demo says where it went."""
    tmpdir = tmp_path / ("t" * 60)
    tmpdir.mkdir()
    res = cli("demo", "--no-color", env={"XDG_DATA_HOME": str(tmp_path / "data"),
                                         "TMPDIR": str(tmpdir)})
    assert res.returncode == 0, res.stdout + res.stderr
    # one line per finding event: no evidence or hand-off without --verbose
    assert re.search(r"\] (escalated from \w+ )?repeated-tool-call \d+× demo/repeated-call/1",
                     res.stdout)  # the findings are all there ...
    assert "If this sample should stop" not in res.stdout
    assert "Log: " not in res.stdout and "inspect view" not in res.stdout  # ... no log named
    assert str(tmpdir) not in res.stdout
    assert ("its log goes to a temporary directory, removed at the end (--keep-logs DIR keeps "
            "it)") in res.stdout
    assert "now removed (--keep-logs DIR keeps it)" in res.stdout


def test_demo_in_the_background_stops_its_eval_gracefully(tmp_path: Path) -> None:
    """Run as a non-interactive shell runs a background job (SIGINT ignored, which the
    eval would inherit) and stopped with SIGTERM mid-run: the demo exits 130 without
    waiting for the eval, and stops it through Inspect's graceful path (its log says
    cancelled; a SIGKILL would leave no finished log)."""
    logs = tmp_path / "logs"
    proc = subprocess.Popen(
        [sys.executable, "-m", "watcher", "demo", "--no-color", "--keep-logs", str(logs)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
        env={**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), "DEMO_TOOL_DELAY": "3",
             "PYTHONUNBUFFERED": "1"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        assert proc.stdout is not None
        seen = ""
        while not re.match(r"\d\d:\d\d:\d\dZ \[", seen) and proc.poll() is None:
            seen = proc.stdout.readline()  # up to the first finding
        proc.send_signal(signal.SIGTERM)
        out = seen + proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, out
    assert "interrupted; stopping the example eval" in out and "eval finished" not in out
    from inspect_ai.log import read_eval_log

    [log] = logs.glob("*.eval")
    assert read_eval_log(str(log), header_only=True).status == "cancelled"
    time.sleep(0.5)
    assert _demo_processes() == []


def test_ls_lists_running_tasks(eval_runner: Any) -> None:
    proc = eval_runner("slow", "-T", "samples=1", "-T", "turns=40", tool_delay=0.3)
    disc = proc.discovery()
    deadline = time.time() + 60
    rows: list[dict[str, Any]] = []
    while time.time() < deadline and not rows:
        res = cli("ls", "--json")
        assert res.returncode == 0, res.stderr
        rows = [r for r in json.loads(res.stdout)["tasks"] if r.get("task") == "slow"]
        time.sleep(0.3)
    assert rows and rows[0]["pid"] == disc["pid"]
    assert rows[0]["model"] == "inspect_watch_scripted/test"
    text = cli("ls")
    assert "slow" in text.stdout and f"pid {disc['pid']}" in text.stdout


def test_record_then_replay_finds_the_same(eval_runner: Any, tmp_path: Path) -> None:
    proc = eval_runner("loops", "--ctl-server", "keep", tool_delay=0.05)
    proc.discovery()
    deadline = time.time() + 90
    while time.time() < deadline:
        res = cli("ls", "--json")
        rows = json.loads(res.stdout)["tasks"]
        if rows and rows[0].get("status") not in ("running", None):
            break
        time.sleep(0.5)
    rec = tmp_path / "repeat.jsonl"
    res = cli("record", "loops", "repeat", "1", "-o", str(rec))
    assert res.returncode == 0, res.stderr
    assert rec.read_text().count("\n") >= 2
    out = tmp_path / "replayed.jsonl"
    res = cli("replay", str(rec), "--format", "jsonl", "-o", str(out), "--fail-on", "high")
    assert res.returncode == 1  # a high finding was reported
    found = [json.loads(line) for line in out.read_text().splitlines()]
    assert {d["rule"] for d in found if d["kind"] == "finding"} >= {"repeated-tool-call"}


def test_on_finding_command_gets_json_and_failures_do_not_stop(eval_runner: Any,
                                                               tmp_path: Path) -> None:
    # kept inspectable until the watch has read it (on a busy machine the watch may start
    # after the eval ended), then released by the watch
    proc = eval_runner("loops", "--ctl-server", "keep", tool_delay=0.1)
    proc.discovery()
    sink = tmp_path / "hook.jsonl"
    hook = f"{sys.executable} -c \"import sys; open({str(sink)!r}, 'a').write(sys.stdin.read())\""
    res = cli("watch", "--poll", "0.3", "--quiet", "--no-color", "--on-finding", hook,
              "--release-when-done")
    assert res.returncode == 0, res.stderr
    got = [json.loads(line) for line in sink.read_text().splitlines()]
    assert got and all(d["schema"] == 1 and d["status"] != "ended" for d in got)
    assert {"repeated-tool-call", "submit-loop"} <= {d["rule"] for d in got}
    # a failing hook is reported and the watch still ends normally
    proc2 = proc  # the eval is over: read its log
    res = cli("watch", "--log-dir", str(proc2.log_dir), "--once", "--quiet",
              "--on-finding", f"{sys.executable} -c \"import sys; sys.exit(3)\"")
    assert res.returncode == 0
    assert "--on-finding command failed (exit 3)" in res.stderr
