"""The hand-off as data: an agent decides and acts from a finding's JSONL fields alone.

A real eval (the scripted model, an endless identical tool call) is watched by the real
CLI; the test reads the JSONL as an agent would, picks the action ``inspect_ctl`` can
take on the sample, runs its ``dry_run_argv`` against the eval (nothing changes: the
sample keeps running), then, as the user agreeing, the run's ``interrupt_run`` argv (the
eval ends gracefully). An eval process that has exited is never offered a cancel or a
``kill -INT`` (real processes that have exited, one of them not yet reaped).
"""

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
from watcher.findings import Evidence, Finding, SampleRef
from watcher.handoff import BY, finding_actions, process_running
from watcher.run.router import Router
from watcher.state import WatchState


def records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        if line.endswith("}"):  # a line being written is not read yet
            out.append(json.loads(line))
    return out


def wait_for(cond: Any, timeout: float = 180.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.e2e
def test_an_agent_acts_from_the_jsonl_fields_alone(eval_runner: Any, tmp_path: Path) -> None:
    proc = eval_runner("watchdog", "--max-samples", "4", tool_delay=0.2)
    proc.discovery()
    out = tmp_path / "out.jsonl"
    watcher = subprocess.Popen(
        [sys.executable, "-m", "watcher", "watch", "--format", "jsonl", "--output", str(out),
         "--poll", "0.5", "--task-budget", "1000"], stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL, preexec_fn=default_sigint)
    try:
        def high_loop() -> dict[str, Any] | None:
            for d in records(out):
                if (d["kind"] == "finding" and d["rule"] == "repeated-tool-call"
                        and d["confidence"] == "high" and d["status"] != "ended"):
                    return d
            return None

        f = wait_for(high_loop, what="a high repeated-tool-call finding")
        # the agent's decision, from fields alone: who can do what, on what
        assert {a["by"] for a in f["actions"]} <= set(BY)
        by = {(a["verb"], a["by"]): a for a in f["actions"]}
        cancel = by[("cancel_sample", "inspect_ctl")]
        assert cancel["scope"] == "sample" and cancel["changes_eval"] is True
        assert cancel["target"] == {k: f[k] for k in ("task", "task_id", "eval_id", "model",
                                                      "sample_id", "epoch", "attempt", "pid")}
        assert f["pid"] == proc.proc.pid
        assert cancel["dry_run_argv"][-3:] == [f["task"], f["sample_id"], str(f["epoch"])]
        assert "--dry-run" in cancel["dry_run_command"]
        assert "--dry-run" not in cancel["argv"]
        interrupt = by[("interrupt_run", "person_shell")]
        assert interrupt["argv"] == ["kill", "-INT", str(proc.proc.pid)]
        assert interrupt["needs"] == "user_consent" and interrupt["dry_run_argv"] is None
        assert by[("view_log", "anyone")]["changes_eval"] is False

        # the offered dry run, against the real eval: it names the target, changes nothing
        env = {**os.environ, "XDG_DATA_HOME": str(proc.data_home)}
        dry = subprocess.run([*cancel["dry_run_argv"][:4], "--json",
                              *cancel["dry_run_argv"][4:]], capture_output=True, text=True,
                             env=env, timeout=120, stdin=subprocess.DEVNULL)
        assert dry.returncode == 0, dry.stdout + dry.stderr
        answer = json.loads(dry.stdout)
        assert answer["dry_run"] is True and answer["applied"] is False, answer
        assert f["sample_id"] in json.dumps(answer["target"]), answer
        show = subprocess.run(["inspect", "ctl", "sample", "show", "--json", "--",
                               f["task"], f["sample_id"], str(f["epoch"])],
                              capture_output=True, text=True, env=env, timeout=120)
        assert show.returncode == 0, show.stderr
        assert '"running"' in show.stdout  # the dry run left it running

        # a task past its budget: the offered drain's dry run names the task, changes nothing
        budget = wait_for(lambda: next((d for d in records(out) if d["kind"] == "finding"
                                        and d["rule"] == "task-budget"), None),
                          what="a task-budget finding")
        [drain] = [a for a in budget["actions"] if a["verb"] == "drain_task"]
        assert drain["by"] == "inspect_ctl" and drain["target"]["task_id"] == f["task_id"]
        dry = subprocess.run([*drain["dry_run_argv"][:4], "--json",
                              *drain["dry_run_argv"][4:]], capture_output=True, text=True,
                             env=env, timeout=120, stdin=subprocess.DEVNULL)
        assert dry.returncode == 0, dry.stdout + dry.stderr
        answer = json.loads(dry.stdout)
        assert answer["dry_run"] is True and answer["applied"] is False, answer
        assert f["task_id"] in json.dumps(answer["target"]), answer

        # the user agrees: the run's own interrupt, as offered (Inspect's graceful path)
        subprocess.run(interrupt["argv"], check=True, timeout=30)
        assert proc.wait(120) is not None
        watcher.wait(120)
    finally:
        if watcher.poll() is None:
            watcher.send_signal(signal.SIGINT)
            watcher.wait(30)


def _finding(pid: int | None) -> Finding:
    ref = SampleRef(task="t", task_id="tid", eval_id="e", model="m", sample_id="s", epoch=1,
                    pid=pid, log_location="/logs/x.eval")
    return Finding(id="f1", rule="r", title="R", category="repeated_tool_call",
                   severity="warning", confidence="high", score=0.9, confidence_reason="",
                   sample=ref, summary="", evidence=Evidence(), first_seen=1.0, last_seen=2.0,
                   count=3, status="open", handoff="")


def test_an_exited_eval_is_offered_no_cancel_and_no_interrupt(tmp_path: Path) -> None:
    """The pid of a process that has exited (and of one that exited and was not reaped
    yet: a zombie) is offered nothing that would stop it, as data or in words."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    wait_for(lambda: Path(f"/proc/{zombie.pid}/stat").read_text().rpartition(")")[2]
             .split()[0] == "Z", 30, "a zombie")
    try:
        for pid in (gone.pid, zombie.pid):
            assert process_running(pid) is False
            assert [a["verb"] for a in finding_actions(_finding(pid))] == ["view_log"]
            sink = _Sink()
            router = Router(WatchState(), [sink])
            router.route(_finding(pid))
            router.flush(force=True)
            [f] = sink.found
            assert [a["verb"] for a in f.actions] == ["view_log"]
            assert "has exited" in f.handoff and "kill -INT" not in f.handoff
            assert "sample cancel" not in f.handoff
    finally:
        zombie.wait()
    alive = finding_actions(_finding(os.getpid()))
    assert "interrupt_run" in [a["verb"] for a in alive]
    assert process_running(None) is None


class _Sink:
    def __init__(self) -> None:
        self.found: list[Finding] = []

    def start(self, context: Any) -> None: ...
    def finding(self, f: Finding) -> None:
        self.found.append(f)
    def notice(self, n: Any) -> None: ...
    def status(self, snapshot: Any) -> None: ...
    def stop(self, summary: Any = None) -> None: ...


def test_a_routed_findings_hand_off_is_made_once_until_its_eval_exits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A live watch routes each open finding again every poll: its hand-off and actions
    are made once for all they read, and made anew when one of those changes (here the
    eval's process exits between two snapshots, so the later one offers only the log)."""
    from dataclasses import replace

    from watcher.run import router as router_module

    made: list[str] = []
    real = router_module.finding_handoff

    def counting(f: Finding, **kw: Any) -> str:
        made.append(f.id)
        return real(f, **kw)

    monkeypatch.setattr(router_module, "finding_handoff", counting)
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                            stdin=subprocess.PIPE)
    try:
        sink = _Sink()
        router = Router(WatchState(), [sink])
        first = _finding(proc.pid)
        for count in (3, 4, 5):  # the same loop, seen again as it grows
            router.route(replace(first, count=count))
        assert made == ["f1"]
        assert "kill -INT" in router.findings["f1"].handoff
        assert "interrupt_run" in [a["verb"] for a in router.findings["f1"].actions]
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait()
        router.route(replace(first, count=6))
        assert made == ["f1", "f1"]
        assert "has exited" in router.findings["f1"].handoff
        assert [a["verb"] for a in router.findings["f1"].actions] == ["view_log"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
