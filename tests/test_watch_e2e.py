"""``inspect-watch watch`` end to end: real evals, the real CLI, real logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.jsonlines import complete_records
from watcher.run.values import Selector
from watcher.run.watch import Watch, WatchConfig
from watcher.state import WatchState

pytestmark = pytest.mark.e2e


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 240,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "watcher", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})},
                          cwd=cwd, stdin=subprocess.DEVNULL)


def findings(path: Path) -> list[dict[str, Any]]:
    return [d for d in complete_records(path) if d["kind"] == "finding"]


def folded(records: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for d in records:
        out[(d["rule"], d["sample_id"])] = d
    return out


# The live tests' evals are kept inspectable once they end (``--ctl-server keep``) until
# the watch releases them (``--release-when-done``): their samples take three or four
# seconds, about what a busy machine can take to start the watch, and an eval that ended
# before the watch first looked would leave it nothing to watch (as CI once saw of the
# gated eval in test_exit_codes).
KEEP = ("--ctl-server", "keep")


def test_live_watch_finds_loops_and_matches_post_hoc(eval_runner: Any, tmp_path: Path) -> None:
    proc = eval_runner("loops", *KEEP, tool_delay=0.3)
    proc.discovery()
    out = tmp_path / "live.jsonl"
    live = cli("watch", "--format", "jsonl", "--output", str(out), "--poll", "0.3",
               "--release-when-done")
    assert live.returncode == 0, live.stderr
    assert proc.wait() == 0
    got = folded(findings(out))
    rules_by_sample = {}
    for rule, sample in got:
        rules_by_sample.setdefault(sample, set()).add(rule)
    assert "repeated-tool-call" in rules_by_sample.get("repeat", set())
    assert "submit-loop" in rules_by_sample.get("submit-loop", set())
    assert not {r for r in rules_by_sample.get("clean", set())
                if got[(r, "clean")]["confidence"] != "low"}
    rep = got[("repeated-tool-call", "repeat")]
    assert rep["confidence"] == "high" and rep["count"] >= 3
    assert rep["task"] == "loops" and rep["epoch"] == 1 and rep["attempt"] == 1
    assert rep["schema"] == 1 and rep["evidence"]["event_uuids"]
    # the hand-off names the live ways out, for this process, and never claims an action
    assert f"kill -INT {proc.proc.pid}" in rep["handoff"]
    assert "inspect ctl sample cancel" in rep["handoff"] and "--dry-run" in rep["handoff"]
    assert "has not cancelled" in rep["handoff"]

    # the same run read back from its log gives the same findings
    post = tmp_path / "post.jsonl"
    res = cli("watch", "--log-dir", str(proc.log_dir), "--once", "--format", "jsonl",
              "--output", str(post))
    assert res.returncode == 0, res.stderr
    post_got = folded(findings(post))
    assert {k: (v["confidence"], v["count"]) for k, v in got.items()} == {
        k: (v["confidence"], v["count"]) for k, v in post_got.items()}
    assert {v["id"] for v in got.values()} == {v["id"] for v in post_got.values()}
    # read from a finished run's log, there is nothing left to cancel
    assert all("inspect ctl sample cancel" not in v["handoff"]
               and "kill -INT" not in v["handoff"] and "finished run" in v["handoff"]
               for v in post_got.values())


def test_whole_values_iteration_and_user_replies_live_equal_post_hoc(
        eval_runner: Any, tmp_path: Path) -> None:
    """What real transcripts hold, acted out by real evals and watched live: the same
    test re-run between edits with unchanged output (iteration: low), back-to-back runs
    whose 1,200-character outputs differ only after their first part (low), a real loop
    on long output (high), a simulated user answering every text turn (no narration and
    no submit loop). Live findings (sample buffer and control channel) equal post-hoc."""
    truth = eval_runner("truth", *KEEP, tool_delay=0.3)
    talk = eval_runner("conversation", *KEEP, tool_delay=0.3)
    truth.discovery()
    talk.discovery()
    out = tmp_path / "live.jsonl"
    live = cli("watch", "--format", "jsonl", "--output", str(out), "--poll", "0.3",
               "--release-when-done")
    assert live.returncode == 0, live.stderr
    assert truth.wait() == 0 and talk.wait() == 0
    got = folded(findings(out))
    level = {k: v["confidence"] for k, v in got.items()}
    assert level[("repeated-tool-call", "loop-long")] == "high"
    assert level[("repeated-tool-call", "edit-retest")] == "low"
    assert got[("repeated-tool-call", "edit-retest")]["evidence"]["facts"]["between"] == 3
    assert level[("repeated-tool-call", "long-prefix")] == "low"
    assert got[("repeated-tool-call", "long-prefix")]["evidence"]["facts"][
        "results_changed"] is True
    assert got[("repeated-tool-call", "loop-long")]["evidence"]["facts"][
        "compared_on"] == "whole values"
    assert not [k for k in got if k[1] == "simulated-user"]
    assert not [k for k, v in level.items() if v != "low" and k[1] != "loop-long"]
    posts = []
    for proc in (truth, talk):
        post = tmp_path / f"post-{len(posts)}.jsonl"
        res = cli("watch", "--log-dir", str(proc.log_dir), "--once", "--format", "jsonl",
                  "--output", str(post))
        assert res.returncode == 0, res.stderr
        posts += findings(post)
    post_got = folded(posts)
    assert {k: (v["confidence"], v["count"], v["evidence"]["facts"].get("compared_on"))
            for k, v in got.items()} == {
        k: (v["confidence"], v["count"], v["evidence"]["facts"].get("compared_on"))
        for k, v in post_got.items()}


def test_retried_sample_is_labelled_with_its_attempt(eval_runner: Any) -> None:
    from watcher.app import WatchOptions, load_engine

    proc = eval_runner("flaky", "--retry-on-error", "2", tool_delay=0.5)
    proc.discovery()
    notices: list[Any] = []

    class Sink:
        def finding(self, f: Any) -> None: ...
        def notice(self, n: Any) -> None: notices.append(n)
        def status(self, s: Any) -> None: ...

    engine = load_engine(WatchOptions())
    watch = Watch(engine, WatchConfig(poll=0.2), WatchState(), [Sink()])
    watch.run()
    proc.wait()
    tw = next(iter(next(iter(watch.runner.watchers.values())).tasks.values()))
    flaky = tw.samples[("flaky", 1)].stream
    assert flaky.attempt == 2
    assert tw.samples[("steady", 1)].stream.attempt == 1
    assert any(n.kind == "attempt" and n.sample and n.sample.sample_id == "flaky"
               and n.details.get("attempt") == 2 for n in notices)
    # running samples were read from the eval's sample buffer (the default transport),
    # so the retry was followed across the buffer's replaced rows
    source = next(iter(watch.runner.watchers.values())).source
    assert getattr(source, "buffer_reads", 0) > 0


def test_state_restart_reports_nothing_twice_and_misses_nothing(eval_runner: Any,
                                                                 tmp_path: Path) -> None:
    proc = eval_runner("loops", tool_delay=0.4)
    proc.discovery()
    state = tmp_path / "w.state"
    first = tmp_path / "first.jsonl"
    # an agent's polling loop: --once calls while the eval runs
    outputs = []
    deadline = time.time() + 120
    i = 0
    while time.time() < deadline:
        out = tmp_path / f"once{i}.jsonl"
        res = cli("watch", "--once", "--state", str(state), "--format", "jsonl",
                  "--output", str(out))
        assert res.returncode == 0, res.stderr
        outputs.append(out)
        i += 1
        if proc.proc.poll() is not None:
            break
        time.sleep(0.5)
    assert oct(state.stat().st_mode & 0o777) == "0o600"
    # after the eval, read its log with the same state: only what was never reported
    res = cli("watch", "--log-dir", str(proc.log_dir), "--once", "--state", str(state),
              "--format", "jsonl", "--output", str(first))
    assert res.returncode == 0, res.stderr
    outputs.append(first)
    records = [d for out in outputs if out.exists() for d in findings(out)]
    # a later snapshot of an open finding says how far it went on (a higher count);
    # the same snapshot twice, or a count going back, is a repeat
    snapshots = _snapshots(records)
    assert len(snapshots) == len(set(snapshots)), "a snapshot was reported twice"
    counts: dict[str, int] = {}
    for d in records:
        assert d["count"] >= counts.get(d["id"], 0), "a count went back"
        counts[d["id"]] = d["count"]
    # and nothing was missed: the union equals a fresh post-hoc read
    fresh = tmp_path / "fresh.jsonl"
    cli("watch", "--log-dir", str(proc.log_dir), "--once", "--format", "jsonl",
        "--output", str(fresh))
    assert {d["id"] for d in findings(fresh)} == {d["id"] for d in records}
    assert {"repeated-tool-call", "submit-loop"} <= {d["rule"] for d in records}


def test_selector_watches_one_sample(eval_runner: Any, tmp_path: Path) -> None:
    proc = eval_runner("loops", *KEEP, tool_delay=0.2)
    proc.discovery()
    out = tmp_path / "one.jsonl"
    res = cli("watch", "loops", "repeat", "1", "--format", "jsonl", "--output", str(out),
              "--poll", "0.3", "--release-when-done")
    assert res.returncode == 0, res.stderr
    got = findings(out)
    assert got and {d["sample_id"] for d in got} == {"repeat"}
    assert Selector("loops", "repeat", 1).sample_matches("repeat", 1)


def test_a_process_running_tasks_in_turn_is_watched_to_the_last_task(
        eval_runner: Any, tmp_path: Path) -> None:
    """Between two tasks of one process every known task is done: the watch goes on."""
    from tests.evalproc import SCENARIOS

    proc = eval_runner("multi", f"{SCENARIOS}@loops", "--max-tasks", "1",
                       "-T", "samples=2", *KEEP, tool_delay=0.2)
    proc.discovery()
    out = tmp_path / "two.jsonl"
    res = cli("watch", "--format", "jsonl", "--output", str(out), "--poll", "0.3",
              "--release-when-done")
    assert res.returncode == 0, res.stderr
    assert proc.wait() == 0
    got = findings(out)
    assert {"loops"} <= {d["task"] for d in got}
    assert "repeated-tool-call" in {d["rule"] for d in got if d["task"] == "loops"}


def _snapshots(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What makes a snapshot news: a level, an end, or (an open finding that went on)
    a higher count or more spent."""
    return [(d["id"], d["confidence"], d["status"], d["count"],
             d["evidence"]["facts"].get("tokens_since_first_seen")) for d in records]


def test_a_sigkilled_watcher_resumed_reports_nothing_twice(eval_runner: Any,
                                                           tmp_path: Path) -> None:
    """The state used to be saved only at exit: after a SIGKILL the resumed watch reported
    everything again (and would fire --on-finding again). Killed mid-run, resumed with the
    same --state, no snapshot is reported twice and nothing is missed."""
    from tests.evalproc import default_sigint

    proc = eval_runner("loops", tool_delay=1.0)
    proc.discovery()
    state, out1, out2 = tmp_path / "w.state", tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    first = subprocess.Popen(
        [sys.executable, "-m", "watcher", "watch", "--format", "jsonl", "--output", str(out1),
         "--state", str(state), "--poll", "0.2"], stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=default_sigint)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (out1.exists() and findings(out1)):
            assert first.poll() is None, first.stderr.read() if first.stderr else ""
            time.sleep(0.1)
    finally:
        first.kill()
        first.wait(30)
    killed_with = findings(out1)
    assert killed_with and proc.proc.poll() is None, "the eval ended before the kill"
    res = cli("watch", "--format", "jsonl", "--output", str(out2), "--state", str(state),
              "--poll", "0.2")
    assert res.returncode == 0, res.stderr
    assert proc.wait() == 0
    resumed = findings(out2)
    assert resumed, "the resumed watch reported nothing: the comparison is vacuous"
    both = _snapshots(killed_with) + _snapshots(resumed)
    assert len(both) == len(set(both)), "a snapshot was reported twice after the SIGKILL"
    fresh = tmp_path / "fresh.jsonl"
    cli("watch", "--log-dir", str(proc.log_dir), "--once", "--format", "jsonl",
        "--output", str(fresh))
    assert {d["id"] for d in findings(fresh)} == {i for i, *_ in both}


def test_once_calls_end_open_findings_after_the_eval_exits(eval_runner: Any,
                                                          tmp_path: Path) -> None:
    """``watch --once --state`` called while an eval runs, then after it exited: the
    findings still open used to be never reported as ended (later calls only said
    no_evals). The state remembers the task's log, and the next call finishes it there."""
    proc = eval_runner("loops", tool_delay=1.5)
    proc.discovery()
    state = tmp_path / "w.state"
    seen: list[dict[str, Any]] = []
    deadline = time.time() + 120
    i = 0
    def still_open() -> set[str]:
        return {d["id"] for d in seen} - {d["id"] for d in seen if d["status"] == "ended"}

    while time.time() < deadline and not still_open():
        assert proc.proc.poll() is None, "the eval ended before a finding was open"
        out = tmp_path / f"once{i}.jsonl"
        res = cli("watch", "--once", "--state", str(state), "--format", "jsonl",
                  "--output", str(out))
        assert res.returncode == 0, res.stderr
        seen += findings(out) if out.exists() else []
        i += 1
        time.sleep(0.3)
    open_ids = still_open()
    assert open_ids
    assert proc.wait() == 0
    last = tmp_path / "after.jsonl"
    res = cli("watch", "--once", "--state", str(state), "--format", "jsonl",
              "--output", str(last))
    assert res.returncode == 0, res.stderr
    lines = [json.loads(line) for line in last.read_text().splitlines()]
    kinds = [d.get("notice") for d in lines if d["kind"] == "notice"]
    assert "no_evals" not in kinds and "process_exited" in kinds, kinds
    after = findings(last)
    assert open_ids <= {d["id"] for d in after if d["status"] == "ended"}
    # read from the log of a run that is over: nothing left to cancel
    assert all("inspect ctl sample cancel" not in d["handoff"] for d in after)
    both = _snapshots(seen) + _snapshots(after)
    assert len(both) == len(set(both)), "a snapshot was reported twice"
    fresh = tmp_path / "fresh.jsonl"
    cli("watch", "--log-dir", str(proc.log_dir), "--once", "--format", "jsonl",
        "--output", str(fresh))
    assert {d["id"] for d in findings(fresh)} == {i for i, *_ in both}
    # the log was read once: a further call has nothing to say
    again = tmp_path / "again.jsonl"
    res = cli("watch", "--once", "--state", str(state), "--format", "jsonl",
              "--output", str(again))
    assert res.returncode == 0 and not findings(again)
    assert "process_exited" not in again.read_text()


def test_a_front_end_watches_a_live_eval_in_process(eval_runner: Any, tmp_path: Path) -> None:
    """What the fleet view and the watchdog build on: app.start() on a thread, status
    snapshots with a row per sample, and a decider that sees each finding that is news
    with the control server it came from, its records written with the findings."""
    from watcher import app
    from watcher.exit_codes import ExitCode
    from watcher.findings import Notice

    proc = eval_runner("loops", tool_delay=0.3)
    proc.discovery()
    seen: list[Any] = []

    class Watchdog:
        def decide(self, finding: Any, origin: Any) -> list[Notice]:
            seen.append((finding, origin))
            return [Notice(kind="watchdog", message="would act", at=time.time(),
                           details={"finding": finding.id})]

        def pop_notices(self) -> list[Notice]:
            return []

    out = tmp_path / "live.jsonl"
    handle = app.start(app.WatchOptions(poll=0.3, format="jsonl", output=str(out),
                                        sample_detail=True), deciders=[Watchdog()])
    rows: set[str] = set()
    deadline = time.time() + 180
    while handle.running and time.time() < deadline:
        snap = handle.status()
        if snap is not None:
            rows |= {s.sample_id for s in snap.samples}
        time.sleep(0.2)
    assert handle.wait(60) is ExitCode.OK
    assert proc.wait() == 0
    assert {"repeat", "submit-loop", "clean"} <= rows
    assert seen
    finding, origin = seen[0]
    assert origin.server is not None and origin.server.pid == proc.proc.pid
    assert origin.source.live and origin.key == f"pid{proc.proc.pid}"
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    audits = [d for d in lines if d.get("notice") == "watchdog"]
    assert {d["details"]["finding"] for d in audits} == {f.id for f, _ in seen}
