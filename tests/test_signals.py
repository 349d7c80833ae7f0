"""``kill -INT`` stops a watch started in the background of a script (issue 34, 7a).

A non-interactive shell starts background jobs with SIGINT ignored, and Python then
installs no SIGINT handler of its own: the watch must handle it explicitly, as it does
SIGTERM, or ``inspect-watch watch ... & kill -INT $!`` does nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.evalproc import alive


def ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as `cmd &` in a non-interactive shell


@pytest.mark.parametrize("via_shell", [False, True])
def test_sigint_stops_a_watch_started_with_sigint_ignored(tmp_path: Path,
                                                          via_shell: bool) -> None:
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data")}  # no eval: it waits
    out, state = tmp_path / "f.jsonl", tmp_path / "state.json"
    args = [sys.executable, "-m", "watcher", "watch", "--follow", "--format", "jsonl",
            "-o", str(out), "--state", str(state), "--poll", "0.2"]
    if via_shell:  # the real thing: a script's background job
        script = f"{' '.join(args)} & echo $! > {tmp_path / 'pid'}; wait"
        shell = subprocess.Popen(["bash", "-c", script], env=env, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        while not (tmp_path / "pid").exists() or not (tmp_path / "pid").read_text().strip():
            assert shell.poll() is None
            time.sleep(0.05)
        pid = int((tmp_path / "pid").read_text())
        done = shell
    else:
        proc = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                preexec_fn=ignore_sigint)
        pid, done = proc.pid, proc
    try:
        # until it exits: a signal sent before the watch took SIGINT over is ignored,
        # as the shell asked; one sent after must end it
        deadline = time.monotonic() + 90
        while done.poll() is None and time.monotonic() < deadline:
            if not via_shell or alive(pid):
                os.kill(pid, signal.SIGINT)
            try:
                done.wait(0.5)
            except subprocess.TimeoutExpired:
                pass
        assert done.poll() is not None, "kill -INT did not stop the watch"
    finally:
        if done.poll() is None:
            os.kill(pid, signal.SIGKILL)
            done.kill()
            done.wait()
    if not via_shell:
        assert done.returncode == 130, done.stderr.read().decode() if done.stderr else ""
    assert state.exists()  # the graceful path: the state saved


