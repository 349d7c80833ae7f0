"""``launch`` -> ``watch --release-when-done`` -> the eval finishes -> released, on real evals.

tmux runs on a private server of this test process (``-L``), never the user's; the
launches' records, the evals' discovery files and logs live in the test's directory.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.evalproc import REPO, SCENARIOS
from tests.jsonlines import complete_records

TMUX = shutil.which("tmux")
SOCKET = f"iw-launch-tests-{os.getpid()}"


def tmux(*args: str) -> subprocess.CompletedProcess[str]:
    assert TMUX is not None
    return subprocess.run([TMUX, "-L", SOCKET, *args], capture_output=True, text=True,
                          timeout=30, check=False)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of every command here, and a private tmux server (kept up between
    sessions, so a launch just after a session ended does not race the server's exit)."""
    assert TMUX is not None
    bindir = str(Path(sys.executable).parent)
    e = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"),
         "INSPECT_WATCH_LAUNCHES": str(tmp_path / "launches"), "INSPECT_LOG_LEVEL": "warning",
         "SCENARIO_TOOL_DELAY": "0.3", "PATH": bindir + os.pathsep + os.environ["PATH"]}
    subprocess.run([TMUX, "-L", SOCKET, "-f", "/dev/null", "start-server", ";", "set-option",
                    "-g", "exit-empty", "off"], check=True, env=e, timeout=30)
    socket_path = tmux("display-message", "-p", "#{socket_path}").stdout.strip()
    try:
        yield e
    finally:
        for line in tmux("list-sessions", "-F", "#{pane_pid}").stdout.split():
            _interrupt(int(line))  # an eval a failed test left running
        tmux("kill-server")
        if socket_path:
            Path(socket_path).unlink(missing_ok=True)


def _interrupt(pid: int) -> None:
    import signal

    try:
        os.kill(pid, signal.SIGINT)
    except OSError:
        pass


def iw(env: dict[str, str], *args: str, cwd: Path | None = None,
       timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "watcher", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def records(path: Path) -> list[dict[str, Any]]:
    return complete_records(path)


def wait_gone(pid: int, cap: float = 60) -> bool:
    from watcher.discovery import pid_alive

    deadline = time.monotonic() + cap
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not pid_alive(pid)


def sessions(env: dict[str, str]) -> list[dict[str, Any]]:
    res = iw(env, "sessions", "--json")
    assert res.returncode == 0, res.stderr
    return list(json.loads(res.stdout)["sessions"])


def watched(env: dict[str, str], out: Path) -> list[dict[str, Any]]:
    """``watch --release-when-done`` until the evals are over; its JSONL."""
    res = iw(env, "watch", "--release-when-done", "--format", "jsonl", "-o", str(out),
             "--poll", "0.5")
    assert res.returncode == 0, res.stderr
    return records(out)


@pytest.mark.e2e
@pytest.mark.skipif(TMUX is None, reason="tmux not installed")
def test_launch_watch_release_and_the_record_runs_it_again(env: dict[str, str],
                                                            tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    cmd = ["inspect", "eval", f"{SCENARIOS}@loops", "--log-dir", "logs"]
    res = iw(env, "launch", "--tmux-socket", SOCKET, "--name", "iw-e2e", "--", *cmd, cwd=work)
    assert res.returncode == 0, res.stderr + res.stdout
    assert "its control endpoint is up" in res.stdout
    assert f"tmux -L {SOCKET} attach -t iw-e2e" in res.stdout  # how to attach and peek
    assert f"tmux -L {SOCKET} capture-pane -p -t iw-e2e" in res.stdout
    [rec_path] = (tmp_path / "launches").glob("*.json")
    rec = json.loads(rec_path.read_text())
    assert rec["given"] == cmd and rec["cwd"] == str(work)
    assert rec["command"] == [*cmd, "--ctl-server=keep"]  # what 0.3.285 keeps alive with
    assert rec["log_dir"] == str(work / "logs") and rec["session"] == "iw-e2e"
    assert not list((tmp_path / "launches").glob("*.env"))  # the environment file is gone
    assert tmux("has-session", "-t", "=iw-e2e").returncode == 0
    # Inspect's full screen runs in the session (a person could attach and cancel)
    deadline = time.monotonic() + 60
    screen = ""
    while "loops" not in screen and time.monotonic() < deadline:
        time.sleep(0.2)
        screen = tmux("capture-pane", "-p", "-t", "=iw-e2e:").stdout
    assert "loops" in screen, screen
    # the name is taken: refused, nothing started
    again = iw(env, "launch", "--tmux-socket", SOCKET, "--name", "iw-e2e", "--", *cmd,
               cwd=work)
    assert again.returncode == 2 and "exists already" in again.stderr

    first = watched(env, tmp_path / "first.jsonl")
    released = [r for r in first if r.get("notice") == "released"]
    assert [r["details"] for r in released] == [{"pid": rec["pid"], "ok": True}], first
    assert {(f["rule"], f["sample_id"]) for f in first if f["kind"] == "finding"} >= {
        ("repeated-tool-call", "repeat")}
    assert wait_gone(rec["pid"])
    ls = iw(env, "ls")
    assert ls.stdout.strip() == "no running Inspect evals", ls.stdout
    [row] = sessions(env)
    assert row["status"] == "gone" and row["exit_code"] == 0 and row["session_open"] is False

    # the record runs it again: the same command in the same directory, a session of its own
    rerun = iw(env, "launch", "--again", "iw-e2e", cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stderr + rerun.stdout
    newest = sessions(env)[0]
    assert newest["command"] == rec["command"] and newest["cwd"] == str(work)
    assert newest["session"] == "iw-loops" and newest["status"] == "running"
    second = watched(env, tmp_path / "second.jsonl")
    assert wait_gone(newest["pid"])

    from inspect_ai.log import read_eval_log

    logs = sorted((work / "logs").glob("*.eval"))
    assert len(logs) == 2
    a, b = (read_eval_log(str(p)) for p in logs)
    assert (a.eval.task, a.eval.model) == (b.eval.task, b.eval.model)
    assert sorted(str(s.id) for s in a.samples or []) == sorted(
        str(s.id) for s in b.samples or [])
    assert a.status == b.status == "success"

    def found(recs: list[dict[str, Any]]) -> set[tuple[str, str]]:
        return {(f["rule"], f["sample_id"]) for f in recs if f["kind"] == "finding"}

    assert found(first) == found(second)
    assert iw(env, "ls").stdout.strip() == "no running Inspect evals"
    assert all(s["status"] == "gone" for s in sessions(env))
    assert tmux("list-sessions").stdout == ""


@pytest.mark.e2e
def test_headless_launch_and_release_by_hand(env: dict[str, str], tmp_path: Path) -> None:
    """Headless: Inspect's own --detach; `release` leaves a running eval alone and
    releases it once it has finished and is parked."""
    cmd = ["inspect", "eval", f"{SCENARIOS}@multi", "-T", "samples=2", "-T", "steps=2",
           "--log-dir", str(tmp_path / "logs")]
    res = iw(env, "launch", "--headless", "--", *cmd, cwd=tmp_path)
    assert res.returncode == 0, res.stderr + res.stdout
    assert "headless: no terminal UI" in res.stdout and "inspect ctl sample cancel" in \
        res.stdout
    [row] = sessions(env)
    assert row["mode"] == "headless" and "--detach" in row["command"]
    assert "--ctl-server=keep" in row["command"]
    deadline = time.monotonic() + 180
    while row["status"] != "finished, kept alive" and time.monotonic() < deadline:
        if row["status"] == "running":
            early = iw(env, "release", "--dry-run")
            assert "nothing to release" in early.stdout or "would be" in early.stdout
        time.sleep(0.5)
        [row] = sessions(env)
    assert row["status"] == "finished, kept alive", row
    out = iw(env, "release")
    assert out.returncode == 0, out.stderr
    assert f"pid {row['pid']}: released; it has exited" in out.stdout
    assert iw(env, "ls").stdout.strip() == "no running Inspect evals"
    assert iw(env, "release").stdout.startswith("nothing to release")
    [row] = sessions(env)
    assert row["status"] == "gone"
    assert REPO.exists()  # (the scenarios come from the repository)
