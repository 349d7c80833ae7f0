"""What `launch` adds to a command and what it refuses, without starting evals."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from watcher.launch import LaunchError, describe, keep_flag, plan
from watcher.sessions import LaunchRecord

BIN = str(Path(sys.executable).parent)
ENV = {**os.environ, "PATH": BIN + os.pathsep + os.environ.get("PATH", "")}


def fake_inspect(tmp_path: Path, help_text: str, name: str) -> dict[str, str]:
    """An `inspect` on PATH whose `--help` says ``help_text`` (an older release)."""
    d = tmp_path / name
    d.mkdir()
    exe = d / "inspect"
    exe.write_text(f"#!/bin/sh\ncat <<'EOF'\n{help_text}\nEOF\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return {**os.environ, "PATH": f"{d}{os.pathsep}{os.environ.get('PATH', '')}"}


def test_the_installed_inspect_keeps_alive_with_ctl_server_keep() -> None:
    assert keep_flag(str(Path(BIN) / "inspect"), "eval", ENV) == "--ctl-server=keep"
    assert keep_flag(str(Path(BIN) / "inspect"), "eval-set", ENV) == "--ctl-server=keep"


def test_an_older_inspect_keeps_alive_with_keep_alive_or_not_at_all(tmp_path: Path) -> None:
    old = fake_inspect(tmp_path, "  --keep-alive  Keep the process alive after the eval.",
                       "old")
    p = plan(["inspect", "eval", "t.py", "--log-dir", "logs"], str(tmp_path), old)
    assert p.command[-1] == "--keep-alive" and p.keep == "--keep-alive"
    older = fake_inspect(tmp_path, "  --log-dir TEXT  Directory for log files.", "older")
    p = plan(["inspect", "eval", "t.py", "--log-dir", "logs"], str(tmp_path), older)
    assert p.keep is None and p.command == ["inspect", "eval", "t.py", "--log-dir", "logs"]
    rec = LaunchRecord(id="x", session="x", mode="tmux", command=p.command, given=p.given,
                       cwd=str(tmp_path), log_dir=p.log_dir, pid=1, keep=None)
    assert "cannot keep a finished eval's control surface up" in describe(rec)


def keep(inspect: str, sub: str, env: dict[str, str]) -> str:
    return "--ctl-server=keep"


def test_what_launch_adds(tmp_path: Path) -> None:
    p = plan(["inspect", "eval-set", "a.py", "b.py", "--model", "m", "--log-dir", "runs"],
             str(tmp_path), ENV, keep=keep)
    assert p.command == ["inspect", "eval-set", "a.py", "b.py", "--model", "m", "--log-dir",
                         "runs", "--ctl-server=keep"]
    assert p.log_dir == str(tmp_path / "runs")
    # given already: not twice
    for given in (["--ctl-server", "keep"], ["--ctl-server=keep"]):
        p = plan(["inspect", "eval", "a.py", "--log-dir", "l", *given], str(tmp_path), ENV,
                 keep=keep)
        assert p.command.count("--ctl-server=keep") + p.command.count("keep") == 1
        assert p.added == []
    # another value of --ctl-server becomes keep (the same server, kept up)
    p = plan(["inspect", "eval", "a.py", "--ctl-server", "true", "--log-dir", "l"],
             str(tmp_path), ENV, keep=keep)
    assert p.command == ["inspect", "eval", "a.py", "--log-dir", "l", "--ctl-server=keep"]
    # `inspect eval` without a log dir: the one Inspect would use, made explicit
    p = plan(["inspect", "eval", "a.py"], str(tmp_path), {**ENV, "INSPECT_LOG_DIR": "out"},
             keep=keep)
    assert p.command[3:5] == ["--log-dir", str(tmp_path / "out")]


@pytest.mark.parametrize("argv,why", [
    (["python", "run.py"], "launch runs `inspect eval"),
    (["inspect", "view"], "launch runs `inspect eval"),
    (["inspect", "eval-set", "a.py", "--model", "m"], "resume key"),
    (["inspect", "eval", "a.py", "--ctl-server", "false"], "turns off the control channel"),
    (["inspect", "eval", "a.py", "--detach"], "--headless"),
])
def test_what_launch_refuses(argv: list[str], why: str, tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match=why.replace("`", ".").replace("-", ".")):
        plan(argv, str(tmp_path), ENV, keep=keep)


def test_without_tmux_it_says_how_to_install_it(tmp_path: Path) -> None:
    env = {**ENV, "PATH": BIN, "INSPECT_WATCH_LAUNCHES": str(tmp_path / "l")}  # no tmux
    res = subprocess.run([sys.executable, "-m", "watcher", "launch", "--", "inspect", "eval",
                          "a.py"], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert "tmux is not installed" in res.stderr and "apt-get install tmux" in res.stderr
    assert "--headless" in res.stderr
    assert not (tmp_path / "l").exists()  # nothing recorded


def test_release_when_done_is_for_live_evals(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "watcher", "watch", "--release-when-done",
                          "--log-dir", str(tmp_path)], env=ENV, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2 and "--release-when-done" in res.stderr


def test_release_when_done_leaves_an_eval_the_watch_did_not_read_to_its_end() -> None:
    """A watch stopped (Ctrl+C) before an eval's tasks were over releases nothing: only a
    task read to its end, in a process still alive, is released."""
    from types import SimpleNamespace

    from watcher.discovery import ControlServer
    from watcher.sessions import ReleaseWhenDone

    sent: list[int] = []

    def runner(finished: bool) -> SimpleNamespace:
        server = ControlServer(pid=os.getpid(), socket_path=Path("/nonexistent"),
                               started_at=0.0, api_version=8)
        tw = SimpleNamespace(finished=finished,
                             task=SimpleNamespace(task="t", raw={"keep_alive": True}))
        return SimpleNamespace(
            origins={"pid1": SimpleNamespace(server=server)},
            threads={"pid1": SimpleNamespace(is_alive=lambda: False)},
            watchers={"pid1": SimpleNamespace(tasks={"e": tw})})

    import watcher.sessions as sessions

    real = sessions.release
    sessions.release = lambda server, **kw: (sent.append(server.pid),  # type: ignore
                                             sessions.Released(server.pid, True, "ok"))[1]
    try:
        r = ReleaseWhenDone(wait=0.0)
        r.watch = SimpleNamespace(runner=runner(finished=False))
        r.drain(1.0)
        assert sent == [] and r.pop_notices() == []
        r.watch = SimpleNamespace(runner=runner(finished=True))
        (n,) = r.pop_notices()
        assert sent == [os.getpid()] and n.kind == "released" and n.details["ok"] is True
        assert r.pop_notices() == []  # once
    finally:
        sessions.release = real


def _zombie() -> subprocess.Popen[bytes]:
    """A child that has exited and is not reaped yet (as an eval started by a script
    that has not waited for it is)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    stat_path = Path(f"/proc/{child.pid}/stat")
    while b") Z " not in stat_path.read_bytes():  # a condition, not a time
        os.sched_yield()
    return child


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads Linux's /proc")
def test_an_exited_child_not_yet_reaped_is_not_alive() -> None:
    from watcher.discovery import pid_alive

    child = _zombie()
    try:
        assert not pid_alive(child.pid)  # signal 0 still answers for a zombie
        assert pid_alive(os.getpid())
    finally:
        child.wait()
    assert not pid_alive(child.pid)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads Linux's /proc")
def test_release_when_done_sees_an_unreaped_eval_exit() -> None:
    """A released eval that exited but whose parent has not reaped it is over: the watch
    neither waits its grace for it nor says it has not exited (it waited 15 s and said so
    of every eval a test or an agent had started and not yet waited for)."""
    from watcher.sessions import Released, ReleaseWhenDone

    child = _zombie()
    try:
        r = ReleaseWhenDone(wait=30.0)
        r.released[child.pid] = Released(child.pid, True, "ok")
        r.drain(1.0)
        assert r.pop_notices() == []
    finally:
        child.wait()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads Linux's /proc")
def test_a_process_whose_main_thread_ended_first_is_alive() -> None:
    """Linux shows a process whose main thread exited as a zombie while its other threads
    run on: it is alive until the last one ends."""
    from watcher.discovery import pid_alive

    code = ("import ctypes, sys, threading\n"
            "threading.Thread(target=sys.stdin.read).start()\n"
            "ctypes.CDLL(None).pthread_exit(None)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
    assert child.stdin is not None
    stat_path = Path(f"/proc/{child.pid}/stat")
    try:
        while b") Z " not in stat_path.read_bytes():  # its main thread has ended
            assert child.poll() is None, "the process ended with its main thread"
            os.sched_yield()
        assert pid_alive(child.pid)  # its reading thread runs on
    finally:
        child.stdin.close()
        child.wait()
    assert not pid_alive(child.pid)
