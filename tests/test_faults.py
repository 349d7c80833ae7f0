"""Fault injection: a fake control server that stalls, 503s, refuses, lies and floods.

The unit part runs against :mod:`tests.fakeserver` (real HTTP over a real AF_UNIX
socket in a thread). The ``e2e`` part kills real ``inspect eval`` processes and
signals a real ``inspect-watch watch`` subprocess.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.evalproc import default_sigint
from tests.fakeserver import FakeControlServer, model_event, tool_event
from tests.jsonlines import complete_records
from watcher.engine import Engine, load_rules
from watcher.engine.runtime import SampleWatch
from watcher.findings import Finding, Notice, SampleRef
from watcher.run.runner import Runner
from watcher.run.values import RunOptions
from watcher.run.watch import Watch, WatchConfig
from watcher.sources.base import BadResponse, ProcessGone, SourceBusy
from watcher.sources.http import HttpSource
from watcher.state import WatchState
from watcher.stream import SampleStream
from watcher.summary import StatusSnapshot

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def control_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "control"
    d.mkdir(mode=0o700)
    os.chmod(d, 0o700)
    monkeypatch.setenv("INSPECT_WATCH_CONTROL_DIR", str(d))
    return d


@pytest.fixture
def fake(control_dir: Path) -> Iterator[FakeControlServer]:
    server = FakeControlServer(control_dir).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def builtin_engine() -> Engine:
    return Engine(load_rules(builtin=True, user_dir=False))


def _source(fake: FakeControlServer, **kw: Any) -> HttpSource:
    kw.setdefault("timeout", 0.3)
    kw.setdefault("retries", 2)
    kw.setdefault("backoff", 0.01)
    return HttpSource(fake.control_server(), **kw)


def _repeat_events(n: int = 12, start: int = 0) -> list[dict[str, Any]]:
    """A model call, then the same tool call over and over (a repeat finding)."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        out.append(model_event(start + 2 * i))
        out.append(tool_event(start + 2 * i + 1, "cat /tmp/status"))
    return out


class ListSink:
    def __init__(self) -> None:
        self.findings: list[Finding] = []
        self.notices: list[Notice] = []
        self.snapshots = 0

    def finding(self, f: Finding) -> None:
        self.findings.append(f)

    def notice(self, n: Notice) -> None:
        self.notices.append(n)

    def status(self, snapshot: StatusSnapshot) -> None:
        self.snapshots += 1


class RecordingEngine(Engine):
    """The real engine, remembering every event uuid fed to any sample."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.fed: list[tuple[str, str]] = []

    def open_sample(self, ref: SampleRef) -> SampleWatch:
        engine = self

        class Recording(SampleWatch):
            def feed(self, event: dict[str, Any]) -> list[Finding]:
                engine.fed.append((self.ref.sample_id, str(event.get("uuid"))))
                return super().feed(event)

        return Recording(self, ref)


# -- HttpSource: typed errors after retries ------------------------------------


def _task(src: HttpSource) -> Any:
    return src.tasks()[0]


def test_delay_past_timeout_is_source_busy_after_retries(fake: FakeControlServer) -> None:
    fake.add_sample("s1", _repeat_events(2))
    src = _source(fake)
    task = _task(src)
    fake.inject("sample/events", "delay:1.0", "delay:1.0", "delay:1.0")
    with pytest.raises(SourceBusy):
        src.events(task, "s1", 1, since=None, types=None, tier="content")
    assert fake.count("sample/events") == 3  # first try + 2 retries
    # the server recovers: the next read works
    page = src.events(task, "s1", 1, since=None, types=None, tier="content")
    assert [e["uuid"] for e in page.events] == ["ev-0", "ev-1", "ev-2", "ev-3"]


def test_503_is_source_busy_after_retries(fake: FakeControlServer) -> None:
    fake.add_sample("s1", _repeat_events(1))
    src = _source(fake, retries=3)
    task = _task(src)
    fake.inject("sample/events", *["503"] * 4)
    with pytest.raises(SourceBusy, match="503"):
        src.events(task, "s1", 1, since=None, types=None, tier="content")
    assert fake.count("sample/events") == 4


def test_transient_503_is_retried_transparently(fake: FakeControlServer) -> None:
    fake.add_sample("s1", _repeat_events(1))
    src = _source(fake, retries=3)
    task = _task(src)
    fake.inject("sample/events", "503", "503")
    page = src.events(task, "s1", 1, since=None, types=None, tier="content")
    assert len(page.events) == 2
    assert fake.count("sample/events") == 3


def test_transient_server_error_is_retried_and_a_lasting_one_reported(
        fake: FakeControlServer) -> None:
    """Inspect answers 500 when it reads a finished sample from a log still being
    written; the next try works."""
    fake.add_sample("s1", _repeat_events(1))
    src = _source(fake, retries=2)
    task = _task(src)
    fake.inject("sample/events", "500")
    page = src.events(task, "s1", 1, since=None, types=None, tier="content")
    assert len(page.events) == 2 and fake.count("sample/events") == 2
    fake.inject("sample/events", "500", "500", "500")
    with pytest.raises(BadResponse, match="EOCD"):
        src.events(task, "s1", 1, since=None, types=None, tier="content")


@pytest.mark.parametrize("fault", ["malformed", "truncated", "drop"])
def test_garbage_is_bad_response(fake: FakeControlServer, fault: str) -> None:
    fake.add_sample("s1", _repeat_events(1))
    src = _source(fake)
    task = _task(src)
    fake.inject("sample/events", fault, fault, fault)
    with pytest.raises(BadResponse):
        src.events(task, "s1", 1, since=None, types=None, tier="content")
    assert fake.count("sample/events") == 3


def test_wrong_shapes_are_bad_response(fake: FakeControlServer) -> None:
    src = _source(fake)
    fake.tasks_override = {"not": "a list"}
    with pytest.raises(BadResponse):
        src.tasks()


def test_refused_connection_is_process_gone_without_retries(fake: FakeControlServer) -> None:
    src = _source(fake)
    _task(src)
    before = len(fake.requests)
    fake.refuse()
    with pytest.raises(ProcessGone):
        src.tasks()
    assert len(fake.requests) == before


def test_missing_socket_is_process_gone(fake: FakeControlServer) -> None:
    src = _source(fake)
    fake.stop()
    with pytest.raises(ProcessGone):
        src.tasks()


# -- the stream: exactly once across failures -------------------------------------


def test_stream_delivers_exactly_once_across_transient_failures(
        fake: FakeControlServer) -> None:
    events = _repeat_events(20)  # 40 events
    sample = fake.add_sample("s1", events[:15])
    src = _source(fake, retries=0)
    task = _task(src)
    stream = SampleStream(task, "s1", 1, types=None, tier="content", page_limit=4)
    got: list[str] = []
    errors: list[str] = []
    # fail on the 3rd page of the first poll (after two pages were read)
    fake.inject("sample/events", "503", after=2)
    for step in range(30):
        if step == 3:
            sample.events = events[:30]
            fake.inject("sample/events", "malformed", after=1)
        if step == 6:
            sample.events = list(events)
            sample.status = "completed"
            fake.inject("sample/events", "drop")
        try:
            item = stream.poll(src)
        except (SourceBusy, BadResponse) as e:
            errors.append(type(e).__name__)
            continue
        got += [e["uuid"] for e in item.events]
        if stream.done:
            break
    assert stream.done
    assert errors, "the injected faults never reached the stream"
    assert got == [e["uuid"] for e in events], "events lost, repeated or out of order"


def test_a_short_page_ends_the_poll_without_asking_again(fake: FakeControlServer) -> None:
    """A page that scanned fewer events than its limit reached the transcript's end: a
    second request per sample and poll would find nothing (or what the next poll gets)."""
    events = _repeat_events(5)  # 10 events
    sample = fake.add_sample("s1", events[:3])
    src = _source(fake)
    stream = SampleStream(_task(src), "s1", 1, types=None, tier="content", page_limit=4)
    assert [e["uuid"] for e in stream.poll(src).events] == [e["uuid"] for e in events[:3]]
    assert fake.count("sample/events") == 1
    sample.events = list(events)  # 7 more: a full page of 4, then a short one of 3
    assert len(stream.poll(src).events) == 7
    assert fake.count("sample/events") == 3
    assert stream.poll(src).events == [] and fake.count("sample/events") == 4


def test_pending_event_completed_after_a_failure_is_delivered_once(
        fake: FakeControlServer) -> None:
    done = _repeat_events(3)
    pending = tool_event(100, "make test", pending=True)
    sample = fake.add_sample("s1", [*done, pending])
    src = _source(fake, retries=0)
    task = _task(src)
    stream = SampleStream(task, "s1", 1, types=None, tier="content", page_limit=2)
    got: list[str] = []
    item = stream.poll(src)
    got += [e["uuid"] for e in item.events]
    assert "ev-100" in stream.in_flight
    # it completes in place; the next read fails, the one after succeeds
    sample.events[-1] = tool_event(100, "make test")
    sample.events.append(model_event(101))
    sample.status = "completed"
    fake.inject("sample/events", "503")
    with pytest.raises(SourceBusy):
        stream.poll(src)
    for _ in range(5):
        got += [e["uuid"] for e in stream.poll(src).events]
        if stream.done:
            break
    assert got == [e["uuid"] for e in done] + ["ev-100", "ev-101"]
    assert not stream.in_flight


def test_huge_tool_result_and_unknown_events_pass_through(
        fake: FakeControlServer, builtin_engine: Engine) -> None:
    big = "x" * (10 * 1024 * 1024)
    odd = {"event": "hologram", "uuid": "ev-odd", "span_id": None, "timestamp": 1.7e9,
           "pending": False, "shimmer": {"nested": [1, 2, 3]}, "level": 9}
    extra = tool_event(3, "ls", result=big)
    extra["future_field"] = {"anything": True}
    sample = fake.add_sample("s1", [model_event(1), odd, extra, model_event(4)],
                             status="completed")
    assert sample.events[2]["result"] is big
    src = _source(fake, timeout=30.0)
    task = _task(src)
    stream = SampleStream(task, "s1", 1, types=None, tier="full")
    item = stream.poll(src)
    assert [e["uuid"] for e in item.events] == ["ev-1", "ev-odd", "ev-3", "ev-4"]
    by_uuid = {e["uuid"]: e for e in item.events}
    assert by_uuid["ev-odd"]["type"] == "hologram"
    assert by_uuid["ev-odd"]["shimmer"] == {"nested": [1, 2, 3]}
    assert len(by_uuid["ev-3"]["result"]) == len(big)
    assert by_uuid["ev-3"]["future_field"] == {"anything": True}
    watch = builtin_engine.open_sample(SampleRef(task="t", task_id="t", eval_id="e",
                                                 model="m", sample_id="s1", epoch=1))
    for ev in item.events:
        watch.feed(ev)  # must not raise
    watch.finalize()


# -- the runner / watch: notices, not tracebacks; no duplicates -----------------


@pytest.fixture
def thread_errors() -> Iterator[list[BaseException]]:
    errors: list[BaseException] = []
    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        errors.append(args.exc_value or RuntimeError(str(args.exc_type)))

    threading.excepthook = hook
    yield errors
    threading.excepthook = previous


def _run_runner(runner: Runner, until: Any, limit: int = 600) -> list[Finding | Notice]:
    out: list[Finding | Notice] = []
    for _ in range(limit):
        out += list(runner.drain(timeout=0.05))
        if until(out) or not runner.active():
            break
    runner.shutdown()
    out += list(runner.drain(timeout=0.0))
    return out


def test_runner_turns_source_faults_into_notices(
        fake: FakeControlServer, thread_errors: list[BaseException]) -> None:
    fake.tasks_override = "garbage"
    engine = Engine(load_rules(builtin=True, user_dir=False))
    runner = Runner(engine, RunOptions(poll=0.05, exit_grace=0.0), WatchState())
    runner.add("fake", _source(fake, retries=0), "fake")
    out = _run_runner(runner, lambda o: any(isinstance(x, Notice) for x in o))
    notices = [x for x in out if isinstance(x, Notice)]
    assert notices and notices[0].kind == "source_error"
    assert "fake" in notices[0].message
    assert not thread_errors


def test_runner_exactly_once_and_no_duplicate_findings_under_faults(
        fake: FakeControlServer, thread_errors: list[BaseException]) -> None:
    events = _repeat_events(15)
    sample = fake.add_sample("s1", events[:10])
    fake.add_sample("s2", [model_event(500), tool_event(501, "ls")], status="completed")
    engine = RecordingEngine(load_rules(builtin=True, user_dir=False))
    runner = Runner(engine, RunOptions(poll=0.05, page_limit=3, resync_every=0.0, exit_grace=0.0),
                    WatchState())
    runner.add("fake", _source(fake, retries=1), "fake")
    fake.inject("sample/events", "503", "503", after=2)
    fake.inject("sample/events", "malformed", "malformed", after=4)
    fake.inject("/samples", "delay:0.6", "delay:0.6")
    out: list[Finding | Notice] = []
    for _ in range(400):
        out += list(runner.drain(timeout=0.05))
        if fake.count("sample/events") > 12 and sample.status == "running":
            sample.events = list(events)
            sample.status = "completed"
            fake.task_status = "completed"
        if not runner.active():
            break
    runner.shutdown()
    out += list(runner.drain(timeout=0.0))
    assert not thread_errors
    fed_s1 = [u for s, u in engine.fed if s == "s1"]
    assert fed_s1 == [e["uuid"] for e in events]
    assert [u for s, u in engine.fed if s == "s2"] == ["ev-500", "ev-501"]
    notices = [x for x in out if isinstance(x, Notice)]
    assert any(n.kind == "source_error" for n in notices)
    findings = [x for x in out if isinstance(x, Finding)]
    assert any(f.sample.sample_id == "s1" and f.rule == "repeated-tool-call" for f in findings)
    # (an open finding is emitted again when its sample spends more: watcher/run/spend.py;
    # that is a new snapshot, with more tokens since it was first seen)
    snaps = [(f.id, f.confidence, f.status, f.count,
              f.evidence.facts.get("tokens_since_first_seen")) for f in findings]
    assert len(snaps) == len(set(snaps)), "the same finding snapshot was emitted twice"


def _list_inet_sockets() -> list[Any]:
    psutil = pytest.importorskip("psutil")
    return list(psutil.Process().net_connections(kind="inet"))


def test_watch_keeps_permissions_and_opens_no_network_socket(
        fake: FakeControlServer, control_dir: Path, tmp_path: Path) -> None:
    fake.add_sample("s1", _repeat_events(6), status="completed")
    fake.task_status = "completed"
    os.chmod(fake.socket_path, 0o600)
    os.chmod(fake.discovery_path, 0o600)
    os.chmod(fake.socket_path.parent, 0o700)
    paths = [control_dir, fake.discovery_path, fake.socket_path, fake.socket_path.parent]
    before = {p: stat.S_IMODE(os.stat(p).st_mode) for p in paths}
    seen_inet: list[Any] = []
    inet_before = _list_inet_sockets()

    class Probe(ListSink):
        def status(self, snapshot: StatusSnapshot) -> None:
            seen_inet.extend(_list_inet_sockets())

        def finding(self, f: Finding) -> None:
            super().finding(f)
            seen_inet.extend(_list_inet_sockets())

    sink = Probe()
    state = WatchState(path=tmp_path / "state.json")
    engine = Engine(load_rules(builtin=True, user_dir=False))
    result = Watch(engine, WatchConfig(poll=0.1, exit_grace=0.0), state, [sink]).run()
    assert result.watchers == 1
    assert sink.findings, "the watch saw nothing: the permission check would be vacuous"
    after = {p: stat.S_IMODE(os.stat(p).st_mode) for p in paths}
    assert after == before
    assert stat.S_IMODE(os.stat(tmp_path / "state.json").st_mode) == 0o600
    assert not [c for c in seen_inet if c not in inet_before]
    assert not [c for c in _list_inet_sockets() if c not in inet_before]


def test_watch_falls_back_to_cli_for_newer_api(control_dir: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from watcher.sources.cli import CliSource

    calls: list[list[str]] = []

    def fake_run(self: CliSource, args: list[str]) -> Any:
        calls.append(args)
        return {"tasks": []}

    monkeypatch.setattr(CliSource, "_run", fake_run)
    with FakeControlServer(control_dir, api_version=999) as server:
        sink = ListSink()
        watch = Watch(Engine(load_rules(builtin=True, user_dir=False)),
                      WatchConfig(poll=0.1, once=True), WatchState(), [sink])
        result = watch.run()
        assert server.requests == [], "an unknown API version was spoken to over HTTP"
    kinds = [n.kind for n in sink.notices]
    assert "transport" in kinds
    transport = next(n for n in sink.notices if n.kind == "transport")
    assert "999" in transport.message
    assert result.watchers == 1
    (sw,) = watch.runner.watchers.values()
    assert isinstance(sw.source, CliSource) and sw.source.pid == server.pid
    assert calls and calls[0][:2] == ["task", "list"]


def test_watch_reports_process_gone_as_notice(
        fake: FakeControlServer, thread_errors: list[BaseException]) -> None:
    fake.add_sample("s1", _repeat_events(8))
    sink = ListSink()
    watch = Watch(Engine(load_rules(builtin=True, user_dir=False)),
                  WatchConfig(poll=0.05, exit_grace=0.0), WatchState(), [sink])
    killer = threading.Timer(1.0, fake.refuse)
    killer.start()
    try:
        result = watch.run()
    finally:
        killer.cancel()
    kinds = [n.kind for n in sink.notices]
    assert "process_gone" in kinds
    assert "sample_abandoned" in kinds
    assert any(f.rule == "repeated-tool-call" for f in sink.findings)
    assert result.exit_code == 0
    assert not thread_errors


def test_a_process_exiting_under_a_sample_read_is_no_read_failure(
        fake: FakeControlServer, thread_errors: list[BaseException]) -> None:
    """An eval exits between the listing and a sample's read: that is the process going,
    said once as such, not "events could not be read ...; trying again" for the sample."""
    fake.add_sample("s1", _repeat_events(8))
    fake.add_sample("s2", _repeat_events(8))
    fake.always("sample/events", "vanish", {"sample_id": "s2"})  # s2's first read
    sink = ListSink()
    watch = Watch(Engine(load_rules(builtin=True, user_dir=False)),
                  WatchConfig(poll=0.05, exit_grace=0.0), WatchState(), [sink])
    watch.run()
    # the read that met the exit happened (s1's may come before or not at all: once the
    # process is gone nothing more is read, and which sample is read first is not fixed)
    assert [q for p, q in list(fake.requests)
            if "sample/events" in p and q.get("sample_id") == "s2"]
    kinds = [n.kind for n in sink.notices]
    assert "process_gone" in kinds
    assert not [n for n in sink.notices if n.kind == "source_error"], sink.notices
    assert not thread_errors


# -- real processes -----------------------------------------------------------------


def _inspect_watch() -> list[str]:
    return [sys.executable, "-m", "watcher"]


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return complete_records(path)


@pytest.mark.e2e
def test_sigkilled_eval_is_reported_and_the_watch_goes_on(eval_runner: Any,
                                                          tmp_path: Path) -> None:
    from watcher.discovery import list_servers

    doomed = eval_runner("slow", "-T", "samples=2", "-T", "turns=200", tool_delay=0.2)
    doomed.discovery()
    sink = ListSink()
    engine = Engine(load_rules(builtin=True, user_dir=False))
    watch = Watch(engine, WatchConfig(poll=0.2, follow=True), WatchState(), [sink])
    thread = threading.Thread(target=watch.run, daemon=True)
    thread.start()
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not any(
                sw.tasks and any(tw.samples for tw in sw.tasks.values())
                for sw in watch.runner.watchers.values()):
            time.sleep(0.2)
        time.sleep(1.0)
        doomed.proc.kill()
        doomed.proc.wait(10)
        survivor = eval_runner("loops", tool_delay=0.2)
        survivor.discovery()
        assert any(s.pid == survivor.proc.pid for s in list_servers())
        assert survivor.wait(180) == 0
        deadline = time.time() + 60
        while time.time() < deadline:
            sw = watch.runner.watchers.get(f"pid{survivor.proc.pid}")
            if sw is not None and not watch.runner.threads[f"pid{survivor.proc.pid}"].is_alive():
                break
            time.sleep(0.2)
    finally:
        watch.request_stop()
        thread.join(30)
    gone = [n for n in sink.notices if n.kind == "process_gone"]
    assert any(str(doomed.proc.pid) in n.message for n in gone)
    live = {(f.rule, f.sample.sample_id) for f in sink.findings
            if f.sample.pid == survivor.proc.pid}
    # the same log, scanned after the fact, finds the same things: nothing was lost
    posthoc = ListSink()
    Watch(Engine(load_rules(builtin=True, user_dir=False)),
          WatchConfig(log_dir=str(survivor.log_dir), once=True), WatchState(),
          [posthoc]).run()
    offline = {(f.rule, f.sample.sample_id) for f in posthoc.findings}
    assert offline, "the survivor's log produced no findings: the comparison is vacuous"
    assert offline <= live


def _watch_cmd(out: Path, state: Path, summary: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [*_inspect_watch(), "watch", "--format", "jsonl", "-o", str(out), "--state", str(state),
         "--summary", str(summary), "--poll", "0.2"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
        cwd=str(REPO), start_new_session=True, preexec_fn=default_sigint)


@pytest.mark.e2e
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signalled_watch_flushes_and_restart_repeats_nothing(
        eval_runner: Any, tmp_path: Path, sig: signal.Signals) -> None:
    ev = eval_runner("loops", tool_delay=1.5)
    ev.discovery()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    out, state, summary = tmp_path / "f.jsonl", tmp_path / "state.json", tmp_path / "s.md"
    proc = _watch_cmd(out, state, summary, env)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not any(
                r.get("kind") == "finding" for r in _jsonl(out)):
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            time.sleep(0.2)
        assert ev.proc.poll() is None, "the eval ended before the watch was signalled"
        proc.send_signal(sig)
        code = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 130
    text = out.read_text()
    assert text.endswith("\n")
    first = _jsonl(out)  # every line parses: no half-written record
    assert summary.exists() and summary.read_text().strip()
    saved = json.loads(state.read_text())
    reported = {(r["id"], r["confidence"], r["status"]) for r in first
                if r.get("kind") == "finding"}
    assert reported and set(saved["reported"]) >= {i for i, _, _ in reported}

    out2 = tmp_path / "f2.jsonl"
    proc2 = _watch_cmd(out2, state, tmp_path / "s2.md", env)
    try:
        assert ev.wait(180) == 0
        proc2.wait(120)
    finally:
        if proc2.poll() is None:
            proc2.kill()
            proc2.wait()
    # a finding that went on is written again with its higher count (not news); the
    # same snapshot again would be a repeat
    def snap(r: dict[str, Any]) -> tuple[Any, ...]:
        return (r["id"], r["confidence"], r["status"], r["count"],
                r["evidence"]["facts"].get("tokens_since_first_seen"))

    firsts = {snap(r) for r in first if r.get("kind") == "finding"}
    second = [snap(r) for r in _jsonl(out2) if r.get("kind") == "finding"]
    assert not set(second) & firsts, "a finding was reported again after the restart"
    assert len(second) == len(set(second))


@pytest.mark.e2e
def test_reader_leaving_the_pipe_ends_the_watch_with_state_saved(
        eval_runner: Any, tmp_path: Path) -> None:
    """``watch --format jsonl | head -n 1`` (an agent taking the first finding): once the
    reader has gone the watch stops with 141 (128 + SIGPIPE), no traceback, and its state
    saved, so the next run with that state does not report the line again."""
    ev = eval_runner("loops", tool_delay=1.5)
    ev.discovery()
    state = tmp_path / "state.json"
    watch = " ".join(shlex.quote(a) for a in [*_inspect_watch(), "watch", "--format", "jsonl",
                                               "--state", str(state), "--poll", "0.2"])
    res = subprocess.run(
        ["bash", "-c", f"{watch} 2>{shlex.quote(str(tmp_path / 'err'))} | head -n 1; "
         "echo ${PIPESTATUS[0]}"],
        capture_output=True, text=True, timeout=240, cwd=str(REPO),
        preexec_fn=default_sigint)
    line, code = res.stdout.splitlines()
    assert code == "141", (tmp_path / "err").read_text()
    err = (tmp_path / "err").read_text()
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    first = json.loads(line)
    saved = json.loads(state.read_text())
    if first.get("kind") == "finding":
        assert first["id"] in saved["reported"]
    assert saved["reported"], "the findings written before the reader left were not saved"
    assert ev.proc.poll() is None, "the eval ended first: the watch was not cut short"


# -- what a server (or a discovery file) says is untrusted --------------------------------


def test_ls_shows_server_fields_without_letting_a_control_through(
        fake: FakeControlServer) -> None:
    """``inspect-watch ls`` printed the server's task_id, status and counts raw: escape
    sequences reached the terminal. Every field is shown, each control made visible."""
    from click.testing import CliRunner

    from watcher.cli import main

    esc = "\x1b]0;pwned\x07\x1b[2J"
    fake.tasks_override = [{
        "eval_id": "e1", "task": f"t{esc}", "task_id": f"id{esc}", "model": f"m{esc}",
        "status": f"running{esc}", "log_location": f"/l{esc}",
        "samples": {"completed": f"1{esc}", "total": f"3{esc}", "in_flight": f"2{esc}",
                    "errored": f"0{esc}"}}]
    res = CliRunner().invoke(main, ["ls"])
    assert res.exit_code == 0, res.output
    assert "\x1b" not in res.output and "\x07" not in res.output
    shown = "␛]0;pwned␇␛[2J"
    for field in ("t", "id", "m", "running", "/l", "1", "3", "2", "0"):
        assert f"{field}{shown}" in res.output, (field, res.output)
    res = CliRunner().invoke(main, ["ls", "--json"])
    assert "\x1b" not in res.output and json.loads(res.output)["tasks"][0]["task_id"] == \
        f"id{esc}"


def test_discovery_trusts_only_the_users_own_files_and_sockets(
        fake: FakeControlServer, control_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Discovery files and sockets were trusted without a look at owner or mode: another
    user's file (or one anybody may write) could point the watcher at their socket. Only
    the current user's, writable by nobody else, are used; a skipped one is said."""
    from watcher.discovery import list_servers

    other = os.geteuid() + 4242
    assert [s.pid for s in list_servers()] == [fake.pid]
    cases: list[tuple[Path, Any, str]] = [
        (fake.discovery_path, lambda p: os.chmod(p, 0o666), "writable by others (mode 0666)"),
        (fake.discovery_path, lambda p: os.chown(p, other, -1), f"owned by uid {other}"),
        (fake.socket_path, lambda p: os.chmod(p, 0o777), f"its socket {fake.socket_path} is "
         "writable by others"),
        (fake.socket_path, lambda p: os.chown(p, other, -1), f"its socket {fake.socket_path} "
         f"is owned by uid {other}"),
    ]
    for path, spoil, why in cases:
        st = os.stat(path)
        try:
            spoil(path)
        except PermissionError:
            pytest.skip("changing a file's owner needs root")
        try:
            assert list_servers() == [], why
            assert why in capsys.readouterr().err
            list_servers()
            assert capsys.readouterr().err == ""  # said once, not every poll
            skipped: list[str] = []
            assert list_servers(skipped=skipped) == []
            assert len(skipped) == 1 and why in skipped[0], skipped
            assert str(fake.discovery_path) in skipped[0]
        finally:
            os.chown(path, st.st_uid, st.st_gid)
            os.chmod(path, stat.S_IMODE(st.st_mode))
    # a watch says it as a notice
    os.chmod(fake.discovery_path, 0o646)
    sink = ListSink()
    Watch(Engine(load_rules(builtin=True, user_dir=False)), WatchConfig(poll=0.05, once=True),
          WatchState(), [sink]).run()
    assert [n.kind for n in sink.notices] == ["discovery", "no_evals"]
    assert "writable by others" in sink.notices[0].message


# -- unreadable samples, unbounded responses (issue 23: items 1, 5 and 15) ---------------


def _watch_live(engine: Engine, sink: ListSink, **kw: Any
                ) -> tuple[threading.Thread, list[Any]]:
    """A live watch of the fake over http on a thread of its own: the thread, and the
    list its result is put in when it ends."""
    watch = Watch(engine, WatchConfig(poll=0.05, exit_grace=0.0, transport="http", **kw),
                  WatchState(), [sink])
    results: list[Any] = []
    thread = threading.Thread(target=lambda: results.append(watch.run()), daemon=True)
    thread.start()
    return thread, results


def _watch_once(engine: Engine, sink: ListSink, **kw: Any) -> Any:
    """Run a --once watch on a thread; fail (instead of hanging the suite) if it never
    ends: the defects under test are watches that never end."""
    kw.setdefault("poll", 0.05)
    watch = Watch(engine, WatchConfig(once=True, exit_grace=0.0, transport="http", **kw),
                  WatchState(), [sink])
    results: list[Any] = []
    thread = threading.Thread(target=lambda: results.append(watch.run()), daemon=True)
    thread.start()
    thread.join(120)
    if thread.is_alive():
        watch.request_stop()
        thread.join(10)
        pytest.fail("the --once watch did not end")
    return results[0]


@pytest.mark.slow  # retries spaced in time
def test_once_ends_when_a_live_sample_always_answers_500(
        fake: FakeControlServer, builtin_engine: Engine,
        thread_errors: list[BaseException]) -> None:
    fake.add_sample("good", _repeat_events(6), status="completed")
    fake.add_sample("bad", _repeat_events(6), status="completed")
    fake.task_status = "completed"
    fake.always("sample/events", "500", {"sample_id": "bad"})
    sink = ListSink()
    result = _watch_once(builtin_engine, sink)
    unreadable = [n for n in sink.notices if n.kind == "unreadable"]
    assert len(unreadable) == 1, [n.message for n in sink.notices]
    assert unreadable[0].sample is not None and unreadable[0].sample.sample_id == "bad"
    assert "HTTP 500" in unreadable[0].message
    assert any(n.kind == "incomplete" and "1 sample(s)" in n.message for n in sink.notices)
    assert {f.sample.sample_id for f in sink.findings} == {"good"}
    assert result.exit_code == 3  # the scan is not a clean one
    # tried a bounded number of times, not ~330 cycles a second
    assert fake.count("sample/events") < 40
    assert not thread_errors


@pytest.mark.slow  # retries spaced in time
def test_a_live_sample_that_fails_while_running_is_read_when_it_recovers(
        fake: FakeControlServer, builtin_engine: Engine,
        thread_errors: list[BaseException]) -> None:
    """Not --once: a running sample's failures are retried (spaced), said once, and
    the sample is read in full when the server answers again."""
    events = _repeat_events(6)
    sample = fake.add_sample("s1", events)
    fake.inject("sample/events", *["500"] * 8)
    engine = RecordingEngine(load_rules(builtin=True, user_dir=False))
    runner = Runner(engine, RunOptions(poll=0.05, exit_grace=0.0), WatchState())
    runner.add("fake", _source(fake, retries=0), "fake")
    out: list[Finding | Notice] = []
    for _ in range(600):
        out += list(runner.drain(timeout=0.05))
        if fake.count("sample/events") > 10 and sample.status == "running":
            sample.status = "completed"
            fake.task_status = "completed"
        if not runner.active():
            break
    runner.shutdown()
    out += list(runner.drain(timeout=0.0))
    notices = [x for x in out if isinstance(x, Notice)]
    assert [u for s, u in engine.fed if s == "s1"] == [e["uuid"] for e in events]
    assert not [n for n in notices if n.kind == "unreadable"]
    assert len([n for n in notices if n.kind == "source_error" and n.sample]) == 1
    assert not thread_errors


def test_a_finished_sample_the_eval_does_not_find_yet_is_looked_for_again(
        fake: FakeControlServer, builtin_engine: Engine) -> None:
    """Under load a finished sample can be neither in the eval's memory nor yet in its
    log (404): that is not "events could not be read" while it may still come."""
    events = _repeat_events(6)
    fake.add_sample("s1", events, status="completed")
    fake.task_status = "completed"
    fake.inject("sample/events", "404", "404")
    engine = RecordingEngine(load_rules(builtin=True, user_dir=False))
    runner = Runner(engine, RunOptions(poll=0.05, exit_grace=0.0), WatchState())
    runner.add("fake", _source(fake, retries=0), "fake")
    out = _run_runner(runner, lambda o: False)
    assert not [x for x in out if isinstance(x, Notice) and x.kind == "gap"]
    assert [u for s, u in engine.fed if s == "s1"] == [e["uuid"] for e in events]


def test_a_process_never_reached_is_not_said_to_be_read_to_its_end(
        fake: FakeControlServer, builtin_engine: Engine) -> None:
    fake.refuse()  # a discovery file whose socket nobody answers
    sink = ListSink()
    _watch_once(builtin_engine, sink)
    gone = [n for n in sink.notices if n.kind.startswith("process_")]
    assert gone and all("read to its end" not in n.message for n in gone)
    assert any("could not be reached" in n.message and "--log-dir" in n.message
               and n.details.get("reached") is False for n in gone)


def test_endless_response_is_cut_at_the_size_limit_and_not_retried(
        fake: FakeControlServer, monkeypatch: pytest.MonkeyPatch) -> None:
    from watcher.sources.base import LimitExceeded

    monkeypatch.setenv("INSPECT_WATCH_MAX_RESPONSE_MB", "2")
    fake.add_sample("s1", _repeat_events(2))
    fake.always("sample/events", "endless")
    src = _source(fake, retries=3, timeout=2.0)
    with pytest.raises(LimitExceeded, match="INSPECT_WATCH_MAX_RESPONSE_MB"):
        src.events(_task(src), "s1", 1, since=None, types=None, tier="content")
    assert fake.count("sample/events") == 1
    assert src.tasks()  # the connection was dropped; the next request works
    src.close()


def test_declared_length_over_the_limit_is_refused_before_reading(
        fake: FakeControlServer) -> None:
    from watcher.sources.uds import ResponseLimit, UdsClient

    client = UdsClient(str(fake.socket_path), timeout=2.0, max_bytes=10)
    with pytest.raises(ResponseLimit, match="over the 10-byte limit"):
        client.get("/tasks")
    assert not client._open
    client.close()


def test_trickled_response_is_cut_at_the_request_time_limit(
        fake: FakeControlServer, monkeypatch: pytest.MonkeyPatch) -> None:
    from watcher.sources.base import LimitExceeded

    monkeypatch.setenv("INSPECT_WATCH_REQUEST_TIMEOUT", "0.5")
    fake.add_sample("s1", _repeat_events(2))
    fake.always("sample/events", "trickle:0.1")  # every read well within the timeout
    src = _source(fake, retries=3, timeout=2.0)
    with pytest.raises(LimitExceeded, match="INSPECT_WATCH_REQUEST_TIMEOUT"):
        src.events(_task(src), "s1", 1, since=None, types=None, tier="content")
    assert fake.count("sample/events") == 1
    src.close()


def test_once_moves_on_from_an_endless_sample(
        fake: FakeControlServer, builtin_engine: Engine, monkeypatch: pytest.MonkeyPatch,
        thread_errors: list[BaseException]) -> None:
    monkeypatch.setenv("INSPECT_WATCH_MAX_RESPONSE_MB", "4")
    fake.add_sample("good", _repeat_events(6), status="completed")
    fake.add_sample("bad", _repeat_events(6), status="completed")
    fake.task_status = "completed"
    fake.always("sample/events", "endless", {"sample_id": "bad"})
    sink = ListSink()
    result = _watch_once(builtin_engine, sink)
    [unreadable] = [n for n in sink.notices if n.kind == "unreadable"]
    assert "INSPECT_WATCH_MAX_RESPONSE_MB" in unreadable.message
    assert {f.sample.sample_id for f in sink.findings} == {"good"}
    assert result.exit_code == 3
    assert not thread_errors


def test_a_bad_limit_override_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from watcher import limits

    monkeypatch.setenv("INSPECT_WATCH_REQUEST_TIMEOUT", "soon")
    with pytest.raises(limits.LimitError, match="INSPECT_WATCH_REQUEST_TIMEOUT='soon'"):
        limits.check()
    from click.testing import CliRunner

    from watcher.cli import main

    result = CliRunner().invoke(main, ["watch", "--once"])
    assert result.exit_code == 2 and "INSPECT_WATCH_REQUEST_TIMEOUT" in result.output


# -- an eval reached but never read (issue 34, item 3) -----------------------------------


@pytest.mark.parametrize("route,fault", [
    ("/tasks", "500"),  # its task list always fails
    ("/tasks", "delay:1.0"),  # slower than the whole request may take, every time
    ("/tasks", "endless"),  # a body that never ends (cut at the size limit)
    ("/samples", "malformed"),  # its samples listing is garbage
    ("/samples", "500"),  # or always fails
])
def test_once_on_an_eval_it_did_not_read_exits_3_even_with_fail_on(
        fake: FakeControlServer, builtin_engine: Engine, monkeypatch: pytest.MonkeyPatch,
        thread_errors: list[BaseException], route: str, fault: str) -> None:
    """A CI step ``watch --once --fail-on high`` must never pass for an eval it found but
    did not read: exit code 3 ("part of the input could not be read"), said by an
    ``unreadable`` notice, as post-hoc."""
    monkeypatch.setenv("INSPECT_WATCH_MAX_RESPONSE_MB", "2")
    monkeypatch.setenv("INSPECT_WATCH_REQUEST_TIMEOUT", "0.5")
    fake.add_sample("s1", _repeat_events(6))
    fake.always(route, fault)
    sink = ListSink()
    result = _watch_once(builtin_engine, sink, fail_on="high", read_timeout=0.2)
    unreadable = [n for n in sink.notices if n.kind == "unreadable"]
    assert unreadable, [(n.kind, n.message) for n in sink.notices]
    scope = "source" if route == "/tasks" else "task"
    assert unreadable[0].details["scope"] == scope
    assert any(n.kind == "incomplete" for n in sink.notices)
    assert not any("read to its end" in n.message for n in sink.notices)
    assert result.exit_code == 3
    assert not thread_errors


def test_an_eval_that_exits_before_it_was_listed_is_not_read_to_its_end(
        fake: FakeControlServer, builtin_engine: Engine,
        thread_errors: list[BaseException]) -> None:
    """Its task list answered, its samples listing never did, then it exited (no log to
    read): the watch used to say "every sample was read to its end" and exit 0."""
    fake.add_sample("s1", _repeat_events(6))
    fake.always("/samples", "500")
    sink = ListSink()
    thread, results = _watch_live(builtin_engine, sink, read_timeout=0.3)
    deadline = time.monotonic() + 600  # bounds a hung watch only
    while fake.count("/samples") < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    fake.stop()  # the eval exits
    thread.join(60)
    assert not thread.is_alive()
    said = [(n.kind, n.message) for n in sink.notices]
    assert not any("read to its end" in m for _, m in said), said
    assert any(k == "unreadable" and "could not be listed" in m for k, m in said), said
    assert results[0].exit_code == 3
    assert not thread_errors



# -- a busy eval whose task list is slow (issue 34, item 5) ---------------------------------


@pytest.mark.slow  # a server slow on purpose
def test_a_task_list_slower_than_the_read_timeout_is_waited_for_then_read_around(
        fake: FakeControlServer, builtin_engine: Engine,
        thread_errors: list[BaseException]) -> None:
    """Every /tasks answers after 1 s, past a 0.3 s read timeout (500 samples on 2
    cores: 5 s and more). The first one is waited for (nothing can be read before it);
    the later ones time out, and the tasks it gave are read on, said in a notice."""
    sample = fake.add_sample("s1", _repeat_events(6))
    fake.always("/tasks", "delay:1.0")
    sink = ListSink()
    thread, results = _watch_live(builtin_engine, sink, read_timeout=0.3)
    deadline = time.monotonic() + 600  # bounds a hung watch only
    while not sink.findings and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sink.findings, [n.message for n in sink.notices]  # read live
    # it goes on: events written now are read though every task list times out
    sample.events += [tool_event(100 + i, f"echo {i}") for i in range(3)]
    read = lambda: any(n.kind == "source_error" and "tasks as last listed" in n.message  # noqa: E731
                       for n in sink.notices)
    while not read() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert read()
    before = fake.count("sample/events")
    while fake.count("sample/events") == before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert fake.count("sample/events") > before  # still reading its samples
    fake.stop()  # the eval exits
    thread.join(60)
    assert not thread.is_alive() and not thread_errors
