"""The watchdog (watcher/act/watchdog.py) against a fake control server: what it asks
the server and when, what it refuses to do, and the audit record of each step.

Fakes only for what a real Inspect cannot be made to show here: a server without the
routes (an older Inspect), a strict-mutation-less API version, a refusal, a sample
that finishes between the dry run and the request. The real thing is in
tests/test_watchdog_e2e.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.fakeserver import FakeControlServer, model_event, tool_event
from tests.jsonlines import complete_records
from watcher import app
from watcher.act.policy import ActSpec, FactTest, InterruptSpec, Layer, Policy, load_policy
from watcher.act.watchdog import INTERRUPT_SIGNAL, Watchdog
from watcher.findings import Action, Evidence, Finding, Notice, SampleRef, finding_id
from watcher.run.values import Origin
from watcher.sources.http import HttpSource
from watcher.state import WatchState

CANCEL = "/evals/evalA/sample/cancel"
STARTED = 1_699_999_000.0  # before the fake's events (1_700_000_000 + n)



@pytest.fixture
def fake(control_dir: Path) -> Iterator[FakeControlServer]:
    server = FakeControlServer(control_dir).start()
    yield server
    server.stop()


def loop_events(n: int = 6) -> list[dict[str, Any]]:
    """A model call, then the same tool call with the same result, over and over."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        out.append(model_event(2 * i))
        out.append(tool_event(2 * i + 1, "cat /tmp/status"))
    return out


def add_loop(fake: FakeControlServer, sid: str = "s1", **row: Any) -> None:
    sample = fake.add_sample(sid, loop_events())
    sample.extra.update({"started_at": STARTED, "events": len(sample.events), **row})


def accept(fake: FakeControlServer, path: str = CANCEL) -> None:
    """The route answers as Inspect 0.3.285 does when it can cancel."""
    def answer(params: dict[str, str]) -> tuple[int, Any]:
        return 200, {"ok": True, "sample_id": params.get("sample_id"), "epoch": 1,
                     "action": params.get("action"), "dry_run": params["dry_run"] == "true",
                     "changed": True}
    fake.mutations[path] = answer


def posts(fake: FakeControlServer) -> list[tuple[str, dict[str, str]]]:
    return [(p, q) for p, q in fake.requests if p.startswith("POST ")]


def records(path: Path) -> list[dict[str, Any]]:
    return complete_records(path)


def watch_until(tmp_path: Path, done: Any, *, policy: str | None = None,
                name: str = "out", **options: Any) -> list[dict[str, Any]]:
    """``watch --act`` (over the fake, with the control channel alone) until ``done``
    says so of the records written, then stopped as Ctrl+C stops it."""
    out = tmp_path / f"{name}.jsonl"
    path = None
    if policy is not None:
        path = tmp_path / f"{name}-policy.yaml"
        path.write_text(policy)
    opts = app.WatchOptions(act=True, act_policy=str(path) if path else None, poll=0.1,
                            transport="http", format="jsonl", output=str(out), **options)
    handle = app.start(opts)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and handle.running and not done(records(out)):
        time.sleep(0.05)
    handle.stop()
    assert handle.wait(30) is not None
    return records(out)


NOW = "rules:\n  repeated-tool-call: {verb: cancel_sample, when: {confidence: high}}\n"


def actions(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in recs if r["kind"] == "action"]


def the_action(recs: list[dict[str, Any]]) -> dict[str, Any]:
    """The one action taken; after it, at most the watch's end saying it was left
    unconfirmed (the test stops the watch before the fake server ends the sample)."""
    act, *rest = actions(recs)
    assert [(r["outcome"], r.get("reason"), r["finding_id"]) for r in rest] in (
        [], [("unconfirmed", "watch_ended", act["finding_id"])]), rest
    return act


def test_a_high_loop_is_cancelled_with_score_after_a_dry_run(
        fake: FakeControlServer, tmp_path: Path) -> None:
    add_loop(fake)
    accept(fake)
    state = tmp_path / "state.json"
    recs = watch_until(tmp_path, lambda r: any(a["outcome"] == "requested"
                                               for a in actions(r)),
                       policy=NOW, state_path=str(state))
    act = the_action(recs)
    assert (act["verb"], act["args"], act["outcome"], act["mode"], act["scope"]) == (
        "cancel_sample", {"action": "score"}, "requested", "act", "sample")
    assert (act["sample_id"], act["epoch"], act["attempt"], act["task"]) == ("s1", 1, 1,
                                                                              "fake_task")
    assert act["dry_run_answer"]["body"]["dry_run"] is True
    assert act["server_answer"]["status"] == 200 and act["server_answer"]["body"]["changed"]
    assert "requested; the server accepted it" in act["message"]
    assert "cancelled" not in act["message"]  # not until the sample's row shows it
    finding = next(r for r in recs if r["kind"] == "finding" and r["id"] == act["finding_id"])
    assert finding["rule"] == "repeated-tool-call" and finding["confidence"] == "high"
    # the dry run first, then the request: the same target, the same action
    sent = posts(fake)
    assert [q["dry_run"] for _, q in sent] == ["true", "false"]
    assert all(q == {**sent[0][1], "dry_run": q["dry_run"]} for _, q in sent)
    assert sent[0][1] == {"sample_id": "s1", "epoch": "1", "action": "score", "dry_run": "true"}
    # the sample was read before acting (running, attempt 1, started before the evidence)
    assert any(p == "/evals/evalA/sample" for p, _ in fake.requests)
    # the state remembers the episode, and a restarted watch does not act on it again
    saved = json.loads(state.read_text())
    assert set(saved["acted"]) == {act["finding_id"]}
    before = len(posts(fake))
    again = watch_until(tmp_path, lambda r: bool(actions(r)), policy=NOW,
                        state_path=str(state), name="again")
    [skip] = actions(again)
    assert (skip["outcome"], skip["reason"], skip["finding_id"]) == (
        "skipped", "already_acted", act["finding_id"])
    assert len(posts(fake)) == before


def test_an_older_server_without_the_route_keeps_the_hand_off(
        fake: FakeControlServer, tmp_path: Path) -> None:
    add_loop(fake, "s1")
    add_loop(fake, "s2")
    recs = watch_until(tmp_path, lambda r: len(actions(r)) >= 2, policy=NOW)
    acts = actions(recs)
    assert [a["outcome"] for a in acts] == ["unsupported", "unsupported"]
    first = next(a for a in acts if a["reason"] == "route_missing")
    assert first["dry_run_answer"] == {"status": 404, "body": {"detail": "Not Found"}}
    assert first["server_answer"] is None
    # one dry run told it: the second sample was not asked about, and nothing was sent
    assert [q["dry_run"] for _, q in posts(fake)] == ["true"]
    notices = [r for r in recs if r["kind"] == "notice" and r["notice"] == "watchdog"]
    assert len(notices) == 1 and "older Inspect" in notices[0]["message"]
    # the findings still hand off to the person running the eval
    loops = [r for r in recs if r["kind"] == "finding" and r["rule"] == "repeated-tool-call"]
    assert loops and all("kill -INT" in f["handoff"] for f in loops)


def test_a_server_before_strict_mutations_is_never_asked(
        control_dir: Path, tmp_path: Path) -> None:
    with FakeControlServer(control_dir, api_version=2) as fake:
        add_loop(fake)
        accept(fake)
        recs = watch_until(tmp_path, lambda r: bool(actions(r)), policy=NOW)
        [act] = actions(recs)
        assert (act["outcome"], act["reason"]) == ("unsupported", "unsupported")
        assert "a dry run could act" in act["message"]
        assert posts(fake) == []


@pytest.mark.parametrize("answer, outcome, reason, words", [
    ((409, {"error": "action 'error' is not permitted"}), "failed", "refused",
     "refused it (HTTP 409: «action 'error' is not permitted»)"),
    ((200, {"ok": True, "changed": False, "reason": "sample already finished"}), "skipped",
     "nothing_to_do", "nothing would change («sample already finished»)"),
    ((404, {"error": "sample s1 (epoch 1) not found"}), "skipped", "not_found",
     "does not know the target"),
])
def test_what_the_dry_run_answers_decides(fake: FakeControlServer, tmp_path: Path,
                                          answer: tuple[int, Any], outcome: str, reason: str,
                                          words: str) -> None:
    add_loop(fake)
    fake.mutations[CANCEL] = answer
    recs = watch_until(tmp_path, lambda r: bool(actions(r)), policy=NOW)
    act = the_action(recs)
    assert (act["outcome"], act["reason"]) == (outcome, reason)
    assert words in act["message"]
    assert [q["dry_run"] for _, q in posts(fake)] == ["true"]  # never the real request


def test_dry_run_mode_sends_only_the_dry_run(fake: FakeControlServer, tmp_path: Path) -> None:
    add_loop(fake)
    accept(fake)
    recs = watch_until(tmp_path, lambda r: bool(actions(r)), policy=NOW, dry_run=True)
    act = the_action(recs)
    assert (act["outcome"], act["mode"]) == ("dry_run", "dry-run")
    assert act["server_answer"] is None and act["dry_run_answer"]["body"]["changed"] is True
    assert "--dry-run: nothing was sent" in act["message"]
    assert [q["dry_run"] for _, q in posts(fake)] == ["true"]
    finding = next(r for r in recs if r["kind"] == "finding" and r["rule"] == "repeated-tool-call")
    assert "--act --dry-run" in finding["handoff"] and "Dry run: nothing is changed" in (
        finding["handoff"])


def test_a_sample_that_finishes_after_the_dry_run_is_left_alone(
        fake: FakeControlServer, tmp_path: Path) -> None:
    add_loop(fake)

    def finish_on_dry_run(params: dict[str, str]) -> tuple[int, Any]:
        fake.samples[("s1", 1)].status = "completed"  # it ends on its own meanwhile
        return 200, {"ok": True, "changed": True, "dry_run": True}

    fake.mutations[CANCEL] = finish_on_dry_run
    recs = watch_until(tmp_path, lambda r: bool(actions(r)), policy=NOW)
    act = the_action(recs)
    assert (act["outcome"], act["reason"]) == ("skipped", "sample_not_running")
    assert [q["dry_run"] for _, q in posts(fake)] == ["true"]


def test_the_limit_per_watch_holds(fake: FakeControlServer, tmp_path: Path) -> None:
    add_loop(fake, "s1")
    add_loop(fake, "s2")
    accept(fake)
    recs = watch_until(tmp_path, lambda r: len(actions(r)) >= 2, policy=NOW, act_max=1)
    outcomes = sorted((a["outcome"], a["reason"]) for a in actions(recs))
    # (and, as the watch ends before the fake server ends the sample, perhaps that the
    # requested cancel was left unconfirmed)
    assert outcomes in ([("requested", None), ("skipped", "limit_run")],
                        [("requested", None), ("skipped", "limit_run"),
                         ("unconfirmed", "watch_ended")])
    assert [q["dry_run"] for _, q in posts(fake)] == ["true", "false"]


# -- the Watchdog alone, with a fake clock ----------------------------------------------


REF = SampleRef("fake_task", "evalA-t", "evalA", "m", "s1", 1, pid=None)


def loop_finding(confidence: str = "high", status: str = "open", attempt: int = 1,
                 **facts: Any) -> Finding:
    ref = replace(REF, attempt=attempt)
    return Finding(id=finding_id("repeated-tool-call", ref, 1), rule="repeated-tool-call",
                   title="t", category="repeated_tool_call", severity="warning",
                   confidence=confidence, score=0.9,  # type: ignore[arg-type]
                   confidence_reason="", sample=ref, summary="",
                   evidence=Evidence(facts=dict(facts)), first_seen=1_700_000_001.0,
                   last_seen=1_700_000_005.0, count=3, status=status,  # type: ignore[arg-type]
                   handoff="")


def policy_of(spec: ActSpec, interrupt: InterruptSpec | None = None) -> Policy:
    return Policy([Layer("file", rules={"repeated-tool-call": spec})], interrupt)


def drain(wd: Watchdog, want: int, timeout: float = 10.0) -> list[Notice]:
    got: list[Notice] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got += wd.pop_notices()
        time.sleep(0.02)
    return got


def reads(fake: FakeControlServer, n: int, timeout: float = 10.0) -> None:
    """Wait until the watchdog has read the sample's row ``n`` times (a loaded machine
    may take longer than any fixed sleep)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and sum(
            p == "/evals/evalA/sample" for p, _ in fake.requests) < n:
        time.sleep(0.02)


def origin(fake: FakeControlServer) -> Origin:
    server = fake.control_server()
    return Origin("k", "fake", HttpSource(server), server)


@pytest.mark.parametrize("row, reason", [
    ({"status": "completed"}, "sample_not_running"),
    ({"status": "queued"}, "sample_not_running"),
    ({"retries": 1}, "new_attempt"),
    ({"started_at": 1_700_000_100.0}, "requeued"),
    ({"interrupt": "score"}, "cancel_pending"),
])
def test_never_on_a_finished_retried_or_requeued_attempt(
        fake: FakeControlServer, row: dict[str, Any], reason: str) -> None:
    add_loop(fake)
    sample = fake.samples[("s1", 1)]
    if "status" in row:
        sample.status = row.pop("status")
    if "retries" in row:
        sample.retries = row.pop("retries")
    sample.extra.update(row)
    accept(fake)
    wd = Watchdog(policy_of(ActSpec("cancel_sample", action="score")), poll=0.05)
    assert wd.decide(loop_finding(), origin(fake)) == []
    [rec] = drain(wd, 1)
    assert isinstance(rec, Action) and (rec.outcome, rec.reason) == ("skipped", reason)
    assert posts(fake) == []
    wd.drain(1.0)


def test_never_on_low_and_never_on_logs(fake: FakeControlServer) -> None:
    wd = Watchdog(policy_of(ActSpec("cancel_sample", confidence="medium")), poll=0.05)
    assert wd.decide(loop_finding("low"), origin(fake)) == []
    assert wd.decide(loop_finding(), None) == []  # read from a log: no control server
    logs = Origin("logs", "log dir", HttpSource(fake.control_server()), None)
    assert wd.decide(loop_finding(), logs) == []
    time.sleep(0.2)
    assert wd.pop_notices() == [] and fake.requests == []
    wd.drain(1.0)


def test_the_grace_waits_for_events_or_seconds_and_an_ended_finding_drops_it(
        fake: FakeControlServer) -> None:
    add_loop(fake)
    accept(fake)
    now = [1000.0]
    spec = ActSpec("cancel_sample", action="score", grace_events=10, grace_seconds=30.0)
    wd = Watchdog(policy_of(spec), poll=0.05, clock=lambda: now[0])
    wd.decide(loop_finding(), origin(fake))
    reads(fake, 3)  # checked a few times: neither 10 events nor 30 s have passed
    assert wd.pop_notices() == [] and posts(fake) == []
    fake.samples[("s1", 1)].extra["events"] += 10  # the agent went on: 10 more events
    rec = drain(wd, 1)[0]
    assert isinstance(rec, Action) and rec.outcome == "requested"
    assert rec.details["grace_met"] == "events" and rec.details["events_since"] == 10
    assert rec.details["checks_after_grace"] == 1
    wd.drain(1.0)
    # by time, and an ended finding first: nothing is asked
    fake.requests.clear()
    wd = Watchdog(policy_of(spec), poll=0.05, clock=lambda: now[0])
    wd.decide(loop_finding(), origin(fake))
    time.sleep(0.2)
    [ended] = wd.decide(loop_finding(status="ended"), origin(fake))
    assert isinstance(ended, Action) and (ended.outcome, ended.reason) == (
        "skipped", "finding_ended")
    now[0] += 31
    time.sleep(0.3)
    assert posts(fake) == []
    wd.drain(1.0)


def test_when_facts_wait_for_the_spend_to_grow(fake: FakeControlServer) -> None:
    """A condition on tokens since first seen holds only once the refreshed snapshots
    say so; the grace starts then."""
    add_loop(fake)
    accept(fake)
    spec = ActSpec("cancel_sample", action="score",
                   facts=(FactTest("tokens_since_first_seen", "gte", 5000),))
    wd = Watchdog(policy_of(spec), poll=0.05)
    wd.decide(loop_finding(tokens_since_first_seen=100), origin(fake))
    time.sleep(0.3)
    assert wd.pop_notices() == [] and posts(fake) == []
    wd.update(loop_finding(tokens_since_first_seen=6000), origin(fake))
    [rec] = drain(wd, 1)
    assert isinstance(rec, Action) and rec.outcome == "requested"
    wd.drain(1.0)


def test_the_run_interrupt_is_sigint_only_and_once(fake: FakeControlServer,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[int, int]] = []

    def kill(pid: int, sig: int) -> None:
        if sig != 0:  # signal 0 only asks whether the process is alive
            sent.append((pid, sig))

    monkeypatch.setattr("watcher.act.watchdog.os.kill", kill)
    for i in range(4):
        fake.add_sample(f"s{i}", [])
    interrupt = InterruptSpec(share=0.5, min_samples=2)
    wd = Watchdog(Policy([Layer("file")], interrupt), poll=0.05)
    wd.decide(replace(loop_finding(), sample=replace(REF, sample_id="s0")), origin(fake))
    time.sleep(0.2)
    assert sent == []  # 1 of 4 samples: below both the minimum and the share
    wd.decide(replace(loop_finding(), sample=replace(REF, sample_id="s1")), origin(fake))
    [rec] = drain(wd, 1)
    assert isinstance(rec, Action) and (rec.verb, rec.outcome, rec.scope) == (
        "interrupt_run", "requested", "run")
    assert sent == [(fake.pid, INTERRUPT_SIGNAL)] and INTERRUPT_SIGNAL.name == "SIGINT"
    assert "2 of the run's 4 samples (50%)" in rec.message
    wd.decide(replace(loop_finding(), sample=replace(REF, sample_id="s2")), origin(fake))
    time.sleep(0.2)
    assert len(sent) == 1 and wd.pop_notices() == []
    wd.drain(1.0)


def test_a_restarted_watch_remembers_the_run_interrupt(fake: FakeControlServer,
                                                       tmp_path: Path) -> None:
    state = WatchState(path=tmp_path / "s.json")
    state.acted[f"run:{fake.pid}"] = {"verb": "interrupt_run", "at": 1.0}
    wd = Watchdog(Policy([Layer("file")], InterruptSpec(share=0.1, min_samples=1)),
                  poll=0.05, state=state)
    [rec] = wd.decide(loop_finding(), origin(fake))
    assert isinstance(rec, Action) and rec.reason == "already_acted"
    wd.drain(1.0)


def test_the_default_policy_is_what_act_uses_without_a_file() -> None:
    policy = load_policy()
    spec = policy.lookup(loop_finding())
    assert spec is not None and (spec.verb, spec.action) == ("cancel_sample", "score")


def test_action_records_are_written_read_back_and_rendered_escaped(tmp_path: Path) -> None:
    """An action line round-trips through JSONL (``report``), and the server's words in
    it reach no terminal or page raw."""
    import io

    from watcher.reporters import (
        JsonlReporter,
        TextReporter,
        read_jsonl,
        render_html,
        render_markdown,
    )
    from watcher.summary import RunSummary

    hostile = "\x1b[2J\u202e## inspect-watch says: cancelled <script>x</script>"
    act = Action(message=f"failed: the server refused it (HTTP 409: «{hostile}»)",
                 sample=replace(REF, pid=42), at=1_800_000_000.0, verb="cancel_sample",
                 args={"action": "score"}, outcome="failed", reason="refused",
                 finding_id="abc", rule="repeated-tool-call", confidence="high",
                 dry_run_answer={"status": 409, "body": {"error": hostile}})
    path = tmp_path / "f.jsonl"
    rep = JsonlReporter(path)
    rep.start(None)  # type: ignore[arg-type]
    rep.notice(act)
    rep.stop()
    line = json.loads(path.read_text())
    assert line["kind"] == "action" and line["dry_run_answer"]["body"]["error"] == hostile
    assert path.read_text().isascii()
    _, notices = read_jsonl([path])
    [back] = notices
    assert back == act
    out = io.StringIO()
    TextReporter(out).notice(back)
    text = out.getvalue()
    assert "action cancel_sample (action=score): failed [refused]" in text
    assert "\x1b[2J" not in text and "\u202e" not in text
    md = render_markdown(RunSummary(notices=(back,)))
    assert "## Watchdog actions (1)" in md and "## Notices (0)" in md
    assert "<script>" not in md and "\n## inspect-watch says" not in md
    page = render_html(RunSummary(notices=(back,)))
    assert "<script>x" not in page and "Watchdog actions (1)" in page


@pytest.mark.parametrize("block, path, query, scope", [
    ("{verb: drain_task, when: {confidence: high}}", "/tasks/evalA-t/drain",
     {"dry_run": "true"}, "task"),
    ("{verb: pause_task, now: true, when: {confidence: high}}", "/tasks/evalA-t/pause",
     {"now": "true", "dry_run": "true"}, "task"),
    ("{verb: cancel_sample, action: cancel, when: {confidence: high}}", CANCEL,
     {"sample_id": "s1", "epoch": "1", "action": "cancel", "dry_run": "true"}, "sample"),
])
def test_each_verb_asks_its_own_route_dry_run_first(
        fake: FakeControlServer, tmp_path: Path, block: str, path: str,
        query: dict[str, str], scope: str) -> None:
    add_loop(fake)

    def answer(params: dict[str, str]) -> tuple[int, Any]:  # as 0.3.285's task routes do
        return 200, {"ok": True, "task_id": "evalA-t", "dry_run": params["dry_run"] == "true",
                     "in_flight": 1, "queued": 3, "changed": True}

    fake.mutations[path] = answer
    recs = watch_until(tmp_path, lambda r: any(a["outcome"] == "requested"
                                               for a in actions(r)),
                       policy=f"rules:\n  repeated-tool-call: {block}\n")
    act = the_action(recs)
    assert (act["outcome"], act["scope"], act["task_id"]) == ("requested", scope, "evalA-t")
    sent = posts(fake)
    assert sent == [(f"POST {path}", query), (f"POST {path}", {**query, "dry_run": "false"})]
    assert "requested; the server accepted it" in act["message"]


def test_the_watchdogs_options_need_act_and_a_live_eval(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from watcher.cli import main

    def run(*args: str) -> Any:
        return CliRunner().invoke(main, ["watch", *args])

    for args, words in [
        (["--dry-run"], "is for --act"),
        (["--act-policy", str(tmp_path / "p.yaml")], "is for --act"),
        (["--act", "--log-dir", str(tmp_path), "--once"], "a watch over logs never acts"),
        (["--act=dry-run", "--transport", "cli"], "does not work with --transport cli"),
        (["--act=yes"], "the only value --act takes is =dry-run"),
        (["--act", "--act-max", "0"], "--act-max"),
    ]:
        res = run(*args)
        assert res.exit_code == 2, (args, res.output)
        assert words in res.output, (args, res.output)
    with pytest.raises(app.OptionsError, match="a watch over logs never acts"):
        app.check(app.WatchOptions(act=True, replay=[str(tmp_path / "r.jsonl")]))
    assert app.check(app.WatchOptions(act=True, dry_run=True)).dry_run


def test_an_invalid_policy_file_stops_the_watch_before_it_starts(tmp_path: Path) -> None:
    """Validated like rules: every error located (file:line:col) and coded, exit 2."""
    from click.testing import CliRunner

    from watcher.cli import main

    path = tmp_path / "p.yaml"
    path.write_text("rules:\n  submit-lop: {verb: cancel_sample}\n"
                    "  repeated-tool-call: {verb: cancel_sample, when: {confidence: low}}\n")
    res = CliRunner().invoke(main, ["watch", "--act", "--act-policy", str(path), "--once"])
    assert res.exit_code == 2, res.output
    assert f"{path}:3:" in res.output and "W114" in res.output  # never on low
    assert "refusing to start with an invalid action policy" in res.output
    path.write_text("rules:\n  submit-lop: {verb: cancel_sample}\n")
    res = CliRunner().invoke(main, ["watch", "--act", "--act-policy", str(path), "--once"])
    assert res.exit_code == 2 and f"{path}:2:3" in res.output and "W121" in res.output
    assert "did you mean 'submit-loop'?" in res.output


def test_a_failed_read_before_the_request_is_retried_at_the_next_check_counted_once(
        fake: FakeControlServer) -> None:
    """The sample cannot be read just before the request (503s past the client's
    retries): nothing is sent; the next check asks the dry run again and acts. The record
    says it took two checks after the grace, and the action counted once (--act-max 1)."""
    add_loop(fake)
    dry_runs: list[str] = []

    def answer(params: dict[str, str]) -> tuple[int, Any]:
        if params["dry_run"] == "true":
            dry_runs.append("dry")
            if len(dry_runs) == 1:  # the read right after this one fails, three times
                fake.inject("/evals/evalA/sample", "503", "503", "503")
        return 200, {"ok": True, "changed": True, "dry_run": params["dry_run"] == "true"}

    fake.mutations[CANCEL] = answer
    wd = Watchdog(policy_of(ActSpec("cancel_sample", action="score")), poll=0.05,
                  max_actions=1)
    wd.decide(loop_finding(), origin(fake))
    [rec] = drain(wd, 1)
    assert isinstance(rec, Action) and (rec.outcome, rec.reason) == ("requested", None)
    assert rec.details["checks_after_grace"] == 2
    assert [q["dry_run"] for _, q in posts(fake)] == ["true", "true", "false"]
    wd.drain(1.0)


def test_another_findings_hand_off_says_what_was_done_about_its_sample(
        fake: FakeControlServer) -> None:
    """A finding with no action of its own (the sample-limit finding a cancel causes)
    must not read as if nothing was done about its sample."""
    add_loop(fake)
    accept(fake)
    wd = Watchdog(policy_of(ActSpec("cancel_sample", action="score")), poll=0.05)
    other = replace(loop_finding(), id="other0000000000", rule="sample-limit",
                    category="limit")
    untouched = replace(other, sample=replace(REF, sample_id="s9"))
    before = wd.handoff(other, True, False)
    assert "no action in its policy for this finding; it has not acted on this sample" in (
        before)
    wd.decide(loop_finding(), origin(fake))
    [rec] = drain(wd, 1)
    assert isinstance(rec, Action) and rec.outcome == "requested"
    after = wd.handoff(other, True, False)
    assert "not acted" not in after
    assert "About this sample, its task or its run, for other findings, it has:" in after
    assert "cancel sample: requested: Cancel the sample (action score) requested" in after
    assert "The person running the eval can also:" in after
    assert "it has not acted on this sample" in wd.handoff(untouched, True, False)
    wd.drain(1.0)


# -- what the watchdog checks just before it acts (issue 34, item 12) -----------------------


def test_the_run_interrupt_signals_only_the_process_serving_the_socket(
        control_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A discovery file names a pid; a signal went to whatever process that was. Now the
    socket's peer credentials must name the same pid (here the socket is served by this
    test's process, the file names another live one)."""
    import subprocess

    other = subprocess.Popen(["sleep", "120"])
    sent: list[tuple[int, int]] = []
    real_kill = __import__("os").kill

    def kill(pid: int, sig: int) -> None:
        if sig != 0:
            sent.append((pid, sig))
        else:
            real_kill(pid, 0)

    try:
        with FakeControlServer(control_dir, pid=other.pid) as fake:
            monkeypatch.setattr("watcher.act.watchdog.os.kill", kill)
            for i in range(2):
                fake.add_sample(f"s{i}", [])
            wd = Watchdog(Policy([Layer("file")], InterruptSpec(share=0.5, min_samples=1)),
                          poll=0.05)
            wd.decide(replace(loop_finding(), sample=replace(REF, sample_id="s0",
                                                             pid=other.pid)), origin(fake))
            [rec] = drain(wd, 1)
            monkeypatch.undo()
            assert isinstance(rec, Action) and (rec.verb, rec.outcome, rec.reason) == (
                "interrupt_run", "skipped", "not_verified")
            assert f"served by pid {__import__('os').getpid()}, not by pid {other.pid}" in (
                rec.message)
            assert sent == [] and other.poll() is None
            wd.drain(1.0)
    finally:
        other.kill()
        other.wait()


def test_the_api_version_is_read_again_before_a_request(fake: FakeControlServer) -> None:
    """docs/watchdog.md: the server's API version is checked before each request, from
    its discovery file as it is then, not as the watch first found it."""
    add_loop(fake)
    accept(fake)
    spec = ActSpec(verb="cancel_sample", action="score", confidence="high")
    wd = Watchdog(policy_of(spec), poll=0.05)
    found = origin(fake)  # found at API version 8
    data = json.loads(fake.discovery_path.read_text())
    fake.discovery_path.write_text(json.dumps({**data, "api_version": 2}))  # now 2
    wd.decide(loop_finding(), found)
    [rec] = drain(wd, 2)[-1:]
    assert isinstance(rec, Action) and (rec.outcome, rec.reason) == ("unsupported",
                                                                       "unsupported")
    assert "control API version is 2" in rec.message and posts(fake) == []
    wd.drain(1.0)
