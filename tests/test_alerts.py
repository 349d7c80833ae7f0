"""Alerts beside the watch: ``--on-finding`` commands never hold up the other outputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from watcher.hooks import CommandHook
from watcher.reporters.examples import example_snapshots

# sleeps 30 s unless the test releases it; says when it started (with its pid) and ended
HOOK = """
import os, pathlib, sys, time
d = pathlib.Path(sys.argv[1])
data = sys.stdin.read()
n = len(list(d.glob("started.*"))) + 1
(d / f"started.{n}").write_text(f"{os.getpid()}\\n{data}")
for _ in range(300):
    if (d / "release").exists():
        break
    time.sleep(0.1)
(d / f"finished.{n}").write_text(data)
"""


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.e2e
def test_a_slow_hook_does_not_hold_up_the_jsonl_of_a_real_watch(eval_runner: Any,
                                                                tmp_path: Path) -> None:
    """Before, the watch ran each command on its routing thread: the JSONL line of the next
    finding waited for the hook (killed after 10 s). Now every line, up to the eval's exit,
    is written while the hook's first run is still going; the rest run after it, at the
    end, and none is lost."""
    proc = eval_runner("loops", tool_delay=0.1)
    proc.discovery()
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir()
    script = tmp_path / "hook.py"
    script.write_text(HOOK)
    out = tmp_path / "findings.jsonl"
    watcher = subprocess.Popen(
        [sys.executable, "-m", "watcher", "watch", "--poll", "0.3", "--format", "jsonl",
         "-o", str(out), "--on-finding", f"{sys.executable} {script} {hook_dir}",
         "--on-finding-timeout", "120", "--alert-drain", "120"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        deadline = time.time() + 180
        while time.time() < deadline and watcher.poll() is None:
            if any(r.get("notice") == "process_exited" for r in _records(out)):
                break
            time.sleep(0.2)
        records = _records(out)
        # the whole watch is on file: both loops, to the eval's exit ...
        assert {"repeated-tool-call", "submit-loop"} <= {r.get("rule") for r in records}
        assert any(r.get("notice") == "process_exited" for r in records)
        # ... while the hook's first run has not finished (and the second has not started)
        pid = int((hook_dir / "started.1").read_text().split("\n", 1)[0])
        assert _alive(pid) and not (hook_dir / "finished.1").exists()
        assert not (hook_dir / "started.2").exists()
        (hook_dir / "release").touch()
        stdout, stderr = watcher.communicate(timeout=180)
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    assert watcher.returncode == 0, stderr
    # the end of the watch waited for what was queued: every new or escalated snapshot
    # reached the command, in order, and nothing was reported dropped
    records = _records(out)
    sent = [r["id"] + r["status"] + r["confidence"] for r in records
            if r["kind"] == "finding" and r["status"] != "ended"]
    runs = sorted(hook_dir.glob("finished.*"), key=lambda p: int(p.suffix[1:]))
    got = [json.loads(p.read_text()) for p in runs]
    assert [d["id"] + d["status"] + d["confidence"] for d in got] == sent
    assert not [r for r in records if r.get("notice", "").startswith("alert_")]


def _hook_for(tmp_path: Path) -> tuple[CommandHook, Path]:
    script = tmp_path / "hook.py"
    script.write_text(HOOK)
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir()
    return CommandHook(f"{sys.executable} {script} {hook_dir}", timeout=120,
                       queue_size=1), hook_dir


def test_a_full_queue_drops_counts_and_says_so(tmp_path: Path) -> None:
    """A command slower than findings arrive: the queue holds one, the rest are dropped
    (submit never blocks), a notice says so during the watch, and the end says what was
    dropped, left queued and cut short: together, every finding not handled."""
    hook, hook_dir = _hook_for(tmp_path)
    snaps = [s for s in example_snapshots() if s.status != "ended"]
    assert hook.worker.submit("{}\n")  # the first is taken by the worker at once
    while not (hook_dir / "started.1").exists():
        time.sleep(0.05)
    for f in snaps:
        hook.finding(f)
    during = hook.pop_notices()
    assert [n.kind for n in during] == ["alert_dropped"]
    assert "--on-finding: its queue of 1 is full" in during[0].message
    assert during[0].details["dropped"] == len(snaps) - 1
    assert hook.pop_notices() == []  # said once, not for every drop
    hook.drain(0.5)  # the command is still waiting: it is cut short, the queued one unsent
    [end] = hook.pop_notices()
    assert end.kind == "alert_dropped"
    assert end.details == {"alert": "--on-finding", "submitted": len(snaps) + 1,
                           "dropped": len(snaps) - 1, "unsent": 1, "cut_short": 1}
    assert (f"{len(snaps) + 1} of {len(snaps) + 1} finding(s) not handled: "
            f"{len(snaps) - 1} dropped while its queue of 1 was full, 1 still queued when the "
            "watch ended, 1 cut short") in end.message
    pid = int((hook_dir / "started.1").read_text().split("\n", 1)[0])
    deadline = time.time() + 10
    while _alive(pid) and time.time() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)  # the end of the watch leaves no command behind
    assert not (hook_dir / "finished.1").exists()
