"""`watch --log-dir DIR --follow`: a running eval read through the sample buffer Inspect
shares beside its log (`inspect eval --log-shared N`), from a local directory and through
an fsspec filesystem (memory://).

One real eval (the `shared` scenario: a repeated call, a submit loop, a sample retried
after an error, a clean one) runs with `--log-shared 2` into a local directory. Its files
are mirrored into fsspec's memory filesystem as they appear, change and vanish: the
eval runs in another process, and memory:// lives in this one, so Inspect cannot write
there itself; a mirror that copies whole files is what an object store fed by Inspect
looks like (each object replaced whole, the buffer removed when the eval ends). While it
runs, streams are driven by hand over both directories, and two watches (the library's
`start`, as `inspect-watch watch --log-dir DIR --follow` runs it) read them too. The
mirror's copies of every version of every file are then the real input that the
hostile-input tests damage.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fsspec
import pytest

from tests.evalproc import default_sigint, start_eval
from watcher.app import WatchHandle, WatchOptions, run, start
from watcher.findings import Finding, Notice
from watcher.reporters.jsonl import merge_findings, read_jsonl
from watcher.sources.base import SourceError, TaskInfo
from watcher.sources.filestore import loads
from watcher.sources.logfiles import LogSource
from watcher.sources.shared import SharedLogSource, from_buffer
from watcher.stream import SampleStream
from watcher.summary import StatusSnapshot

# the module's eval runs once for all its tests: on a busy machine its fixture alone
# takes minutes, waiting for what it needs (never for a time)
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

# Inspect's CLI reads `--log-shared 1` as "on", which is every 10 s: 2 is the shortest
# interval it takes (the Python API takes 1)
SYNC = "2"
MEMORY = f"memory://shared-e2e-{os.getpid()}"


class Mirror(threading.Thread):
    """Copies a local directory into fsspec's memory filesystem as its files appear,
    change and vanish; keeps every version it copied (``versions``: time, path, bytes, or
    ``None`` where a file was removed)."""

    def __init__(self, src: Path, url: str) -> None:
        super().__init__(daemon=True)
        self.src, self.url = src, url
        self.fs = fsspec.filesystem("memory")
        self.root = url.removeprefix("memory://")
        self.stop = threading.Event()
        self.versions: list[tuple[float, str, bytes | None]] = []
        self._stamps: dict[str, tuple[int, int]] = {}

    def run(self) -> None:
        while not self.stop.is_set():
            self.sync()
            time.sleep(0.05)
        self.sync()

    def sync(self) -> None:
        found: set[str] = set()
        for root, _dirs, files in os.walk(self.src):
            for name in files:
                path = Path(root) / name
                rel = path.relative_to(self.src).as_posix()
                try:
                    st = path.stat()
                    stamp = (st.st_size, st.st_mtime_ns)
                    if self._stamps.get(rel) == stamp:
                        found.add(rel)
                        continue
                    data = path.read_bytes()
                except OSError:
                    continue
                found.add(rel)
                self._stamps[rel] = stamp
                self.fs.pipe_file(f"{self.root}/{rel}", data)  # whole, at once
                self.versions.append((time.time(), rel, data))
        for rel in sorted(set(self._stamps) - found):
            del self._stamps[rel]
            self.fs.rm_file(f"{self.root}/{rel}")
            self.versions.append((time.time(), rel, None))


@dataclass
class Driven:
    """What streams driven by hand over a source saw, per sample."""

    events: dict[tuple[str, int], list[dict[str, Any]]] = field(default_factory=dict)
    pending: dict[tuple[str, int], set[str]] = field(default_factory=dict)
    from_buffer_at: dict[tuple[str, int], float] = field(default_factory=dict)
    attempts: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    ended_from: dict[tuple[str, int], str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    notices: list[Any] = field(default_factory=list)
    task: TaskInfo | None = None


class Driver:
    """Streams over a source, driven as the runner drives them (rows first; a retried
    sample's new attempt restarts it), one pass per :meth:`step`."""

    def __init__(self, source: SharedLogSource) -> None:
        self.source = source
        self.out = Driven()
        self.streams: dict[tuple[str, int], SampleStream] = {}

    @property
    def done(self) -> bool:
        task = self.out.task
        return bool(task and task.finished and self.streams
                    and all(s.done for s in self.streams.values()))

    def step(self) -> None:
        out, source = self.out, self.source
        try:
            tasks = source.tasks()
        except SourceError as e:
            out.errors.append(str(e))
            return
        out.notices += source.pop_notices()
        if not tasks:
            return
        task = out.task = tasks[0]
        for row in source.samples(task).samples:
            key = (row.sample_id, row.epoch)
            stream = self.streams.get(key)
            if stream is None:
                stream = self.streams[key] = SampleStream(task, *key, types=None,
                                                          tier="content")
                out.events[key], out.pending[key], out.attempts[key] = [], set(), []
                stream.attempt = row.attempt
            elif row.attempt > stream.attempt and row.raw.get("attempt_nonce") != stream.nonce:
                stream.start_attempt(row.attempt)  # what the runner does (a retry)
                out.attempts[key].append(row.attempt)
                out.events[key] = []
        for key, stream in self.streams.items():
            stream.task = task
            if stream.done:
                continue
            try:
                item = stream.poll(source)
            except SourceError as e:
                out.errors.append(str(e))
                continue
            events = item.events
            if item.new_attempt is not None:  # what the retried attempt had is over
                out.attempts[key].append(item.new_attempt)
                out.events[key], events = [], events[item.attempt_boundary:]
            out.events[key].extend(events)
            out.pending[key].update(stream.in_flight)
            if item.events and from_buffer(stream.cursor):
                out.from_buffer_at.setdefault(key, time.time())
            if stream.done:
                out.ended_from[key] = "buffer" if from_buffer(stream.cursor) else "log"
        out.notices += source.pop_notices()


def drive(source: SharedLogSource, stop: threading.Event, out: Driven,
          poll: float = 0.2) -> None:
    """A :class:`Driver` every ``poll`` seconds until everything is read."""
    driver = Driver(source)
    driver.out = out
    while not stop.is_set() and not driver.done:
        driver.step()
        time.sleep(poll)


class Collect:
    def __init__(self) -> None:
        self.findings: list[Finding] = []
        self.notices: list[Notice] = []
        self.snapshots: list[StatusSnapshot] = []

    def start(self, context: Any) -> None:
        return None

    def finding(self, f: Finding) -> None:
        self.findings.append(f)

    def notice(self, n: Notice) -> None:
        self.notices.append(n)

    def status(self, s: StatusSnapshot) -> None:
        self.snapshots.append(s)

    def stop(self, summary: Any = None) -> None:
        return None


@dataclass
class Run:
    log_dir: Path
    log: Path
    ended_at: float
    driven: dict[str, Driven]
    watched: dict[str, Collect]
    codes: dict[str, Any]
    posthoc: Collect
    versions: list[tuple[float, str, bytes | None]]
    cli_out: Path
    cli_code: int | None
    cli_err: str


def _settled(handle: WatchHandle) -> bool:
    snap = handle.status()
    return bool(snap and snap.tasks and all(t.finished for t in snap.tasks)
                and snap.samples and all(s.done for s in snap.samples))


def _wait(cond: Callable[[], bool], guard: float = 600.0) -> None:
    """Until ``cond`` holds; ``guard`` only bounds a watch that hangs (a busy machine
    takes as long as it takes: the condition is what is waited for, never a time)."""
    deadline = time.monotonic() + guard
    while not cond():
        assert time.monotonic() < deadline, f"{cond} never held"
        time.sleep(0.2)


def _holds_every_end(out: Path, posthoc: Collect) -> Callable[[], bool]:
    """The command's JSONL holds the end of every finding the finished log gives (it has
    read the eval to its end)."""
    want = {f.id for f in posthoc.findings if f.status == "ended"}

    def held() -> bool:
        if not out.exists():
            return False
        records, _ = read_jsonl([out])
        return want <= {f.id for f in records if f.status == "ended"}
    return held


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    tmp = tmp_path_factory.mktemp("shared")
    # every watcher is up before the eval starts: one that met the flaky sample in the
    # middle of its retry (a busy machine starts a process slowly) would report its
    # findings under the attempt it met (documented), not the log's
    log_dir = tmp / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    mirror = Mirror(log_dir, f"{MEMORY}/logs")
    mirror.start()
    where = {"local": str(log_dir), "memory": f"{MEMORY}/logs"}
    stop = threading.Event()
    driven = {k: Driven() for k in where}
    drivers = [threading.Thread(target=drive, args=(SharedLogSource(url), stop, driven[k]),
                                daemon=True) for k, url in where.items()]
    watched = {k: Collect() for k in where}
    handles = {k: start(WatchOptions(log_dir=url, follow=True, poll=0.25, format=None,
                                     sample_detail=True), sinks=[watched[k]])
               for k, url in where.items()}
    # the command itself, as a user runs it on the watching machine
    cli_out = tmp / "cli.jsonl"
    cli = subprocess.Popen(
        [sys.executable, "-m", "watcher", "watch", "--log-dir", str(log_dir), "--follow",
         "--poll", "0.25", "--format", "jsonl", "--output", str(cli_out)],
        stdout=subprocess.DEVNULL, stderr=(tmp / "cli.err").open("wb"),
        stdin=subprocess.DEVNULL, preexec_fn=default_sigint)
    for t in drivers:
        t.start()
    _wait(lambda: cli_out.exists() or cli.poll() is not None)  # it opened its output
    _wait(lambda: all(h.status() is not None for h in handles.values()))
    # --log-buffer 2: a completed sample waits in the buffer for another before both are
    # flushed to the log (so a manifest lists it completed, read to its end from there)
    proc = start_eval(tmp, "shared", "--log-shared", SYNC, "--retry-on-error", "1",
                      "--log-buffer", "2", tool_delay=1.0)
    assert proc.log_dir == log_dir
    try:
        assert proc.wait(600) == 0, proc.output.read_text()[-3000:]
        ended_at = time.time()
        [log] = proc.logs()
        posthoc = Collect()
        assert run(WatchOptions(log_dir=str(log), once=True, format=None),
                   sinks=[posthoc]) == 0
        for t in drivers:
            _wait(lambda t=t: not t.is_alive())  # type: ignore[misc]
        for h in handles.values():
            _wait(lambda h=h: _settled(h))  # type: ignore[misc]
        _wait(_holds_every_end(cli_out, posthoc))  # the command's last polls
    finally:
        cli.send_signal(signal.SIGINT)
        try:
            cli_code: int | None = cli.wait(30)
        except subprocess.TimeoutExpired:
            cli.kill()
            cli_code = None
        stop.set()
        for h in handles.values():
            h.stop()
        codes = {k: h.wait(30) for k, h in handles.items()}
        mirror.stop.set()
        mirror.join(10)
        proc.stop()
    return Run(proc.log_dir, log, ended_at, driven, watched, codes, posthoc, mirror.versions,
               cli_out, cli_code, (tmp / "cli.err").read_text(errors="replace"))


_LOG_EVENTS: dict[str, dict[tuple[str, int], list[dict[str, Any]]]] = {}


def _log_events(log: Path) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """The final log's events as a post-hoc stream delivers them (read once: some tests
    set limits a log would not be read within)."""
    if str(log) not in _LOG_EVENTS:
        _LOG_EVENTS[str(log)] = _read_log_events(log)
    return _LOG_EVENTS[str(log)]


def _read_log_events(log: Path) -> dict[tuple[str, int], list[dict[str, Any]]]:
    source = LogSource(str(log))
    [task] = source.tasks()
    out = {}
    for row in source.samples(task).samples:
        stream = SampleStream(task, row.sample_id, row.epoch, types=None, tier="content")
        stream.attempt = row.attempt
        events: list[dict[str, Any]] = []
        while not stream.done:
            events += stream.poll(source).events
        out[(row.sample_id, row.epoch)] = events
    return out


def _as_is(value: Any) -> Any:
    return value


def _set(value: Any) -> Any:
    """A value without its null fields (at any depth)."""
    if isinstance(value, dict):
        return {k: _set(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_set(v) for v in value]
    return value


@pytest.mark.parametrize("where", ["local", "memory"])
def test_live_events_are_the_logs_once_in_order(shared_run: Run, where: str) -> None:
    got = shared_run.driven[where]
    expected = _log_events(shared_run.log)
    assert set(got.events) == set(expected) == {
        ("repeat", 1), ("submit-loop", 1), ("flaky", 1), ("clean", 1)}
    for key, events in got.events.items():
        uuids = [e["uuid"] for e in events]
        assert len(uuids) == len(set(uuids)), key  # each event once ...
        assert uuids == [e["uuid"] for e in expected[key]], key  # ... in the log's order
        # normalised alike: whole values, prompts (Inspect's reader, which reads logs at a
        # URL, dumps absent fields as null where the stored JSON leaves them out)
        same = _set if where == "memory" else _as_is
        assert list(map(same, events)) == list(map(same, expected[key])), key
        assert not any(e["pending"] for e in events)
    # the prompt of a model event came from the buffer's message pool (below the full tier
    # a model event holds no input of its own)
    prompts = [e.get("prompt") for e in got.events[("repeat", 1)] if e["type"] == "model"]
    assert len(prompts) == 8 and all(prompts[1:]), prompts
    assert not got.errors, got.errors[:3]


@pytest.mark.parametrize("where", ["local", "memory"])
def test_running_samples_are_seen_before_the_eval_ends(shared_run: Run, where: str) -> None:
    got = shared_run.driven[where]
    early = {k for k, at in got.from_buffer_at.items() if at < shared_run.ended_at}
    assert len(early) >= 3, got.from_buffer_at  # every sample that ran a while, from its buffer
    # tool events seen pending (a segment held them pending, a later one completed them)
    # and delivered once, completed
    assert got.pending[("repeat", 1)] & {e["uuid"] for e in got.events[("repeat", 1)]}
    # the finished log took over samples read from the buffer, at the same place (the
    # events test above: none twice, none missed)
    assert {k for k, v in got.ended_from.items() if v == "log"} & set(got.from_buffer_at)
    # the sample retried after an error: a new attempt, the log's attempt 2
    assert got.attempts[("flaky", 1)] == [2]
    assert [e["attempt"] for e in got.events[("flaky", 1)]] == [2] * len(
        got.events[("flaky", 1)])


def test_a_segment_held_an_event_pending_that_a_later_one_completed(shared_run: Run) -> None:
    """The input had what the stream must handle: an event pending in one segment and
    completed in a later one (so the stream above read past a sync boundary)."""
    pending_in: dict[str, int] = {}
    completed_in: dict[str, int] = {}
    for _at, rel, data in shared_run.versions:
        if "/segment." not in rel or data is None:
            continue
        n = int(rel.rsplit("segment.", 1)[1].split(".")[0])
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            for member in z.namelist():
                for row in loads(z.read(member))["events"]:
                    target = pending_in if row["event"].get("pending") else completed_in
                    target.setdefault(row["event_id"], n)
    across = [u for u, n in pending_in.items() if completed_in.get(u, n) > n]
    assert across


def _key(f: Finding) -> tuple[str, str, str, int]:
    return (f.id, f.status, f.confidence, f.count)


@pytest.mark.parametrize("where", ["local", "memory"])
def test_live_findings_are_the_post_hoc_findings(shared_run: Run, where: str) -> None:
    live = shared_run.watched[where]
    posthoc = [f for f in shared_run.posthoc.findings]
    assert {f.rule for f in posthoc} >= {"repeated-tool-call", "submit-loop"}
    # what the log of the retried sample holds is its last attempt; live, the watch also
    # read the attempt that errored (what it found there only a live watch can find)
    final = [f for f in live.findings if not (f.sample.sample_id == "flaky"
                                              and f.sample.attempt == 1)]
    assert sorted(map(_key, final)) == sorted(map(_key, posthoc))
    assert not [n for n in live.notices if n.kind in ("unreadable", "source_error", "gap")], \
        [n.message for n in live.notices]
    # seen while the eval ran: a snapshot before its end shows running samples read
    before = [s for s in live.snapshots if s.now < shared_run.ended_at]
    assert any(p.status == "running" and p.events > 0 for s in before for p in s.samples)
    # the findings of a running remote eval say where its samples can be stopped
    early = [f for f in live.findings if f.status == "open" and f.rule == "repeated-tool-call"]
    assert early and all("on the machine running the eval" in f.handoff and
                         "no control channel" in f.handoff or
                         "finished run's log" in f.handoff for f in early)
    assert any("on the machine running the eval" in f.handoff for f in early)
    assert shared_run.codes[where] is not None


def test_the_command_finds_what_the_log_holds(shared_run: Run) -> None:
    """`inspect-watch watch --log-dir DIR --follow` (a process of its own) reports, while
    the eval runs, the findings the finished log gives post hoc."""
    # stopped with Ctrl+C (a followed log directory has no end): outputs flushed
    assert shared_run.cli_code == 130, shared_run.cli_err[-2000:]
    records, notices = read_jsonl([shared_run.cli_out])  # every snapshot written
    final = [f for f in records if not (f.sample.sample_id == "flaky"
                                        and f.sample.attempt == 1)]
    # the news is the same (new, escalated, ended at the same levels), and so is each
    # finding's last word; live also writes an open finding again as it grows
    def news(fs: list[Finding]) -> set[tuple[str, str, str]]:
        return {(f.id, f.status, f.confidence) for f in fs}

    assert news(final) == news(shared_run.posthoc.findings)
    last = {f.id: f for f in final}
    assert sorted(map(_key, last.values())) == sorted(
        map(_key, {f.id: f for f in shared_run.posthoc.findings}.values()))
    assert {f.rule for f in merge_findings([shared_run.cli_out])} >= {
        "repeated-tool-call", "submit-loop"}
    # reported while the eval ran (from its buffer, or its log as it was flushed): where
    # to act; after it ended: the finished log
    remote = [f for f in records if "on the machine running the eval" in f.handoff]
    assert remote and all(f in remote or "finished run's log" in f.handoff for f in records)
    assert not [n for n in notices if n.kind in ("unreadable", "source_error", "gap")], \
        [n.message for n in notices]


# -- the same input, replayed: a watch that joins late, and damaged buffers -------------

Change = Callable[[str, bytes], bytes | None]
_replays = 0


def _replay(run_: Run, *, start_at: int = 0, change: Change | None = None,
            steps_after: int = 30, shard: tuple[int, int] | None = None) -> Driver:
    """The eval's files as they were written, version by version, into a memory
    directory of their own, ``change`` applied to each (``None``: not written); a
    :class:`Driver` pass after each version from ``start_at`` on (a watch that started
    then), and until everything is read."""
    global _replays
    _replays += 1
    root = f"/replay-{os.getpid()}-{_replays}/logs"
    fs = fsspec.filesystem("memory")
    driver = Driver(SharedLogSource(f"memory://{root}", shard=shard))
    for i, (_at, rel, data) in enumerate(run_.versions):
        if data is None:
            if fs.exists(f"{root}/{rel}"):
                fs.rm_file(f"{root}/{rel}")
        else:
            changed = change(rel, data) if change is not None else data
            if changed is not None:
                fs.pipe_file(f"{root}/{rel}", changed)
        if i >= start_at:
            driver.step()
    for _ in range(steps_after):
        if driver.done:
            break
        driver.step()
    return driver


def test_an_s3_bucket_gives_the_logs_events(shared_run: Run,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`--log-dir s3://bucket/logs --follow` through s3fs against a local S3 server
    (moto), the real run's files put there version by version as Inspect puts them:
    the logs listed, the buffers read while the eval runs, every event once."""
    pytest.importorskip("s3fs")
    server_mod = pytest.importorskip("moto.server")
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1", "AWS_SESSION_TOKEN": "testing",
                        "AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{port}"}.items():
        monkeypatch.setenv(name, value)
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    try:
        fs = s3fs.S3FileSystem(skip_instance_cache=True)
        fs.mkdir("watch-e2e")
        driver = Driver(SharedLogSource("s3://watch-e2e/logs"))
        for _at, rel, data in shared_run.versions:
            if data is None:
                if fs.exists(f"watch-e2e/logs/{rel}"):
                    fs.rm_file(f"watch-e2e/logs/{rel}")
            else:
                fs.pipe_file(f"watch-e2e/logs/{rel}", data)
            driver.step()
        for _ in range(30):
            if driver.done:
                break
            driver.step()
        driver.source.close()
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
        server.stop()
    assert driver.done and not driver.out.errors, driver.out.errors[:3]
    _assert_the_logs_events(shared_run, driver.out)
    assert set(driver.out.from_buffer_at) >= {("repeat", 1), ("flaky", 1)}
    assert driver.out.attempts[("flaky", 1)] == [2]
    assert not [n for n in driver.out.notices if n.kind in ("unreadable", "gap")]


def _assert_the_logs_events(run_: Run, got: Driven, attempts: bool = True) -> None:
    """Every event of the log once, in order, normalised alike (``attempts=False``: but
    for the attempt number, which a watch that joined during a retry cannot know)."""
    expected = _log_events(run_.log)
    assert set(got.events) == set(expected)
    for key, events in got.events.items():
        assert [e["uuid"] for e in events] == [e["uuid"] for e in expected[key]], key
        if not attempts:
            events = [{**e, "attempt": None} for e in events]
            expected = {**expected, key: [{**e, "attempt": None} for e in expected[key]]}
        assert list(map(_set, events)) == list(map(_set, expected[key])), key


def test_replayed_input_gives_the_logs_events(shared_run: Run) -> None:
    """Read a step after each file version: a sample the buffer says completed is read to
    its end from there, the others are taken over by the log, none read twice."""
    driver = _replay(shared_run)
    assert driver.done
    _assert_the_logs_events(shared_run, driver.out)
    assert set(driver.out.from_buffer_at) >= {("repeat", 1), ("flaky", 1)}
    assert not [n for n in driver.out.notices if n.kind in ("unreadable", "gap")]
    completed = {(s["summary"]["id"], s["summary"]["epoch"]) for _i, m in _manifests(shared_run)
                 for s in m["samples"] if s["summary"].get("completed")}
    ended = driver.out.ended_from
    # only a sample a manifest listed completed ends from the buffer (which ones it
    # listed so, and whether the log took one over first, is when the syncs fell)
    assert {k for k, v in ended.items() if v == "buffer"} <= completed
    assert {k for k, v in ended.items() if v == "log"} & set(driver.out.from_buffer_at)


def test_a_followed_shard_reads_only_its_share_of_running_evals(shared_run: Run) -> None:
    """`--follow --shard K/N`: the running eval (its log and its buffer) is read by the
    one shard its log's name hashes to, in full; the other shard reads nothing of it."""
    from watcher.shard import shard_of

    mine = shard_of(shared_run.log.name, 2)
    drivers = {k: _replay(shared_run, shard=(k, 2), steps_after=0 if k != mine else 30)
               for k in (0, 1)}
    owner, other = drivers[mine], drivers[1 - mine]
    assert owner.done
    _assert_the_logs_events(shared_run, owner.out)
    assert owner.out.from_buffer_at
    assert other.out.task is None and not other.out.events and not other.out.errors


def _manifests(run_: Run) -> list[tuple[int, dict[str, Any]]]:
    return [(i, loads(data)) for i, (_at, rel, data) in enumerate(run_.versions)
            if rel.endswith("/manifest.json") and data is not None]


def _first_segment(manifest: dict[str, Any], sample_id: str) -> int | None:
    for s in manifest["samples"]:
        if s["summary"]["id"] == sample_id and s["segments"]:
            first = s["segments"][0]
            return int(first["id"] if isinstance(first, dict) else first)
    return None


def test_a_watch_that_joins_during_a_retry_reads_it_once(shared_run: Run) -> None:
    """Started while the retried sample runs its second attempt: the buffer does not say
    it is a retry (its summary has no retry count), the finished log does. Its events
    are read once, as the attempt the log holds, not read again as a new attempt."""
    firsts = [(i, _first_segment(m, "flaky")) for i, m in _manifests(shared_run)]
    first = next(f for _i, f in firsts if f is not None)
    joined = next(i for i, f in firsts if f is not None and f != first)
    driver = _replay(shared_run, start_at=joined)
    assert driver.done
    _assert_the_logs_events(shared_run, driver.out, attempts=False)
    assert driver.out.attempts[("flaky", 1)] == []  # no restart: read once
    assert ("flaky", 1) in driver.out.from_buffer_at


def test_a_watch_that_joins_during_a_retry_finds_what_the_log_holds(
        shared_run: Run, tmp_path: Path) -> None:
    """The same through the runner (a watch): the findings of the log, said in a notice;
    the retried sample's end under its true attempt once the log has said it. One poll
    (a listing) per snapshot, one file version per snapshot: a faster poll listed a
    manifest copied before its segment three times, and said the segment was missing."""
    firsts = [(i, _first_segment(m, "flaky")) for i, m in _manifests(shared_run)]
    first = next(f for _i, f in firsts if f is not None)
    joined = next(i for i, f in firsts if f is not None and f != first)
    root = f"/joined-{os.getpid()}/logs"
    fs = fsspec.filesystem("memory")
    for _at, rel, data in shared_run.versions[:joined + 1]:
        if data is None:
            fs.rm_file(f"{root}/{rel}")
        else:
            fs.pipe_file(f"{root}/{rel}", data)
    sink = Collect()
    handle = start(WatchOptions(log_dir=f"memory://{root}", follow=True, poll=0.25,
                                format=None, sample_detail=True), sinks=[sink])
    try:
        for _at, rel, data in shared_run.versions[joined + 1:]:
            polls = len(sink.snapshots)
            _wait(lambda p=polls: len(sink.snapshots) > p)  # type: ignore[misc]
            if data is None:
                fs.rm_file(f"{root}/{rel}")
            else:
                fs.pipe_file(f"{root}/{rel}", data)
        _wait(lambda: _settled(handle))
    finally:
        handle.stop()
        handle.wait(30)

    def same(f: Finding) -> tuple[Any, ...]:
        return (f.rule, f.sample.sample_id, f.status, f.count, f.confidence)

    assert sorted(map(same, sink.findings)) == sorted(map(same, shared_run.posthoc.findings))
    flaky = [f for f in sink.findings if f.sample.sample_id == "flaky"]
    # what it reported before the log said which attempt this is keeps the attempt it
    # named; its end (the row's finding) names the true one, with the log's finding id
    retried = [f for f in flaky if f.rule == "passed-on-retry"]
    assert retried and {f.sample.attempt for f in retried} == {2}
    assert {f.id for f in retried} == {f.id for f in shared_run.posthoc.findings
                                       if f.rule == "passed-on-retry"}
    [said] = [n for n in sink.notices if n.kind == "attempt"]
    assert said.message == ("sample flaky epoch 1 is on attempt 2: earlier attempts errored "
                            "before this watch saw them")
    assert not [n for n in sink.notices if n.kind in ("unreadable", "gap", "source_error")]


def _damage_segment(how: str) -> Change:
    """The second segment damaged as ``how`` says; the other files as written."""
    def change(rel: str, data: bytes) -> bytes | None:
        if not rel.endswith("/segment.2.zip"):
            return data
        if how == "not a zip":
            return b"PK\x03\x04 this is not a zip" * 10
        if how == "truncated":
            return data[:len(data) // 2]  # a copy cut short: no central directory
        out = io.BytesIO()
        with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
            for name in src.namelist():
                body = src.read(name)
                if how == "no member":
                    continue
                if how == "not JSON":
                    body = b"{\"events\": [" + body[:20]
                elif how == "nested too deep":
                    body = b"[" * 200_000 + b"]" * 200_000
                elif how == "rows of the wrong shape":
                    body = b'{"events": [{"id": "one", "event_id": 7, "event": []}]}'
                dst.writestr(name, body)
        return out.getvalue()
    return change


@pytest.mark.parametrize("how", ["not a zip", "truncated", "no member", "not JSON",
                                 "nested too deep", "rows of the wrong shape"])
def test_a_damaged_segment_is_a_notice(shared_run: Run, how: str) -> None:
    """What a damaged segment held is read from the log once Inspect writes the sample
    there: the rules see every event once, and the watch says what it could not read."""
    driver = _replay(shared_run, change=_damage_segment(how))
    assert driver.done and not driver.out.errors
    _assert_the_logs_events(shared_run, driver.out)
    said = [n for n in driver.out.notices if n.kind == "unreadable"]
    assert said and all(n.details["scope"] == "buffer" and "segment.2.zip" in n.message
                        for n in said)
    assert len({n.message for n in said}) == len(said)  # each said once


def test_a_watch_over_a_damaged_buffer_finds_what_the_log_holds(shared_run: Run) -> None:
    """Through the runner (a watch, as the command runs it): a segment that is no zip
    and a manifest cut short for a while are said, the watch goes on, its findings are
    the post-hoc ones, and no closing `incomplete` notice claims input was lost (the log
    served what the buffer could not)."""
    damaged = _damage_segment("truncated")
    manifests = [i for i, (_t, rel, d) in enumerate(shared_run.versions)
                 if rel.endswith("/manifest.json") and d is not None]
    cut = set(manifests[2:6])  # four syncs in a row: longer than a rewrite lasts

    def change(i: int, rel: str, data: bytes) -> bytes | None:
        return data[:len(data) // 3] if i in cut else damaged(rel, data)

    root = f"/damaged-{os.getpid()}/logs"
    fs = fsspec.filesystem("memory")
    sink = Collect()
    handle = start(WatchOptions(log_dir=f"memory://{root}", follow=True, poll=0.05,
                                format=None, sample_detail=True), sinks=[sink])
    try:
        for i, (_at, rel, data) in enumerate(shared_run.versions):
            polls = len(sink.snapshots)
            _wait(lambda p=polls: len(sink.snapshots) > p)  # type: ignore[misc]
            changed = change(i, rel, data) if data is not None else None
            if data is None:
                if fs.exists(f"{root}/{rel}"):
                    fs.rm_file(f"{root}/{rel}")
            elif changed is not None:
                fs.pipe_file(f"{root}/{rel}", changed)
        _wait(lambda: _settled(handle))
    finally:
        handle.stop()
        code = handle.wait(30)
    assert code is not None
    final = [f for f in sink.findings if not (f.sample.sample_id == "flaky"
                                              and f.sample.attempt == 1)]
    assert sorted(map(_key, final)) == sorted(map(_key, shared_run.posthoc.findings))
    said = [n for n in sink.notices if n.kind == "unreadable"]
    assert {n.details["scope"] for n in said} == {"buffer"}
    assert any("segment.2.zip" in n.message for n in said)
    assert any("manifest.json: not JSON" in n.message for n in said)
    assert not [n for n in sink.notices if n.kind in ("incomplete", "gap", "source_error")]


@pytest.mark.parametrize("how", ["never written", "vanishes mid-read"])
def test_a_segment_that_vanishes_is_a_notice(shared_run: Run, how: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A segment the manifest names is not there (never copied, or removed while it was
    read): the events read before it stand, the rest come from the log, said once."""
    from fsspec.implementations.memory import MemoryFileSystem

    if how == "vanishes mid-read":
        real_open = MemoryFileSystem.open

        class Vanishing(io.BytesIO):
            def __init__(self, fs: Any, path: str) -> None:
                super().__init__(fs.cat_file(path))
                self.fs, self.path = fs, path

            def read(self, size: int | None = -1) -> bytes:
                super().read(100)
                self.fs.rm_file(self.path)  # gone, part way through
                raise FileNotFoundError(self.path)

        def open_(fs: Any, path: str, mode: str = "rb", **kw: Any) -> Any:
            if path.endswith("/segment.2.zip") and "r" in mode and fs.exists(path):
                return Vanishing(fs, path)
            return real_open(fs, path, mode, **kw)

        monkeypatch.setattr(MemoryFileSystem, "open", open_)
        driver = _replay(shared_run)
    else:
        driver = _replay(shared_run, change=lambda rel, data: None if rel.endswith(
            "/segment.2.zip") else data)
    assert driver.done and not driver.out.errors
    _assert_the_logs_events(shared_run, driver.out)
    said = [n for n in driver.out.notices if n.kind == "unreadable"]
    assert said and all("segment.2.zip: named by the manifest but not there" in n.message
                        and n.details["scope"] == "buffer" for n in said), said
    assert len({n.message for n in said}) == len(said)
    assert driver.out.from_buffer_at  # what came before it was read from the buffer


def test_a_manifest_that_cannot_be_read_is_a_notice(shared_run: Run) -> None:
    """Every manifest garbled: nothing can be read from the buffer, the samples are read
    from the log as Inspect flushes them, and the watch says why once."""
    def change(rel: str, data: bytes) -> bytes:
        return b'{"samples": [{"summary": ' if rel.endswith("/manifest.json") else data

    driver = _replay(shared_run, change=change)
    assert driver.done and not driver.out.errors
    _assert_the_logs_events(shared_run, driver.out)
    [said] = [n for n in driver.out.notices if n.kind == "unreadable"]
    assert said.details["scope"] == "buffer" and "manifest.json: not JSON" in said.message
    assert not driver.out.from_buffer_at


def test_a_manifest_entry_that_is_no_sample_is_left_out(shared_run: Run) -> None:
    def change(rel: str, data: bytes) -> bytes:
        if not rel.endswith("/manifest.json"):
            return data
        manifest = loads(data)
        for s in manifest["samples"]:
            if s["summary"]["id"] == "repeat":
                s["segments"] = "all of them"
        import json
        return json.dumps(manifest).encode()

    driver = _replay(shared_run, change=change)
    assert driver.done and not driver.out.errors
    _assert_the_logs_events(shared_run, driver.out)
    said = [n for n in driver.out.notices if n.kind == "unreadable"]
    assert len(said) == 1 and "not a sample entry" in said[0].message
    assert ("repeat", 1) not in driver.out.from_buffer_at  # from the log only
    assert ("clean", 1) in driver.out.from_buffer_at  # the others from the buffer


@pytest.mark.parametrize("when", ["always", "once listed"])
def test_a_summary_of_the_wrong_shape_is_a_notice(shared_run: Run, when: str) -> None:
    """A manifest entry whose summary has fields of the wrong types (usage a list, scores
    a string), from the start or only after the sample was listed and read from: the
    sample is read from the log, the source goes on, and the watch says so once."""
    seen: list[int] = []

    def change(rel: str, data: bytes) -> bytes:
        if not rel.endswith("/manifest.json"):
            return data
        manifest = loads(data)
        listed = any(s["summary"]["id"] == "repeat" and s["segments"]
                     for s in manifest["samples"])
        seen.append(listed)
        if when == "always" or sum(seen) > 2:
            for s in manifest["samples"]:
                if s["summary"]["id"] == "repeat":
                    s["summary"].update(model_usage=["lots"], scores="all",
                                        error={"message": 7})
        import json
        return json.dumps(manifest).encode()

    driver = _replay(shared_run, change=change)
    assert driver.done and not driver.out.errors, driver.out.errors[:3]
    _assert_the_logs_events(shared_run, driver.out)
    said = [n for n in driver.out.notices if n.kind == "unreadable"]
    assert len(said) == 1 and "summary not readable" in said[0].message, said
    assert said[0].details["scope"] == "buffer"


@pytest.mark.parametrize("env, what", [
    ("INSPECT_WATCH_MAX_BUFFER_FILE_MB", "MB limit (INSPECT_WATCH_MAX_BUFFER_FILE_MB raises it)"),
    ("INSPECT_WATCH_MAX_LOG_ENTRY_MB", "MB limit (INSPECT_WATCH_MAX_LOG_ENTRY_MB raises it)")])
def test_reads_are_bounded(shared_run: Run, monkeypatch: pytest.MonkeyPatch, env: str,
                           what: str) -> None:
    """A buffer file past the limit is not read (a notice says which limit), and a
    segment member that inflates past it is not inflated; the log serves the rest."""
    _log_events(shared_run.log)  # read before the limit is set
    sizes = [len(d) for _t, r, d in shared_run.versions if d is not None and "segment." in r]
    monkeypatch.setenv(env, str(min(sizes) / 2 / 1024 / 1024))  # every segment is larger
    if env == "INSPECT_WATCH_MAX_LOG_ENTRY_MB":
        monkeypatch.setenv(env, str(1 / 1024 / 1024))  # members inflate to KBs
    driver = _replay(shared_run)
    assert driver.done and not driver.out.errors
    _assert_the_logs_events(shared_run, driver.out)
    said = [n for n in driver.out.notices if n.kind == "unreadable"]
    assert said and all(what in n.message for n in said)


def test_a_model_event_copied_between_its_two_completion_writes_is_held() -> None:
    """Inspect clears a model event's ``pending`` and only then writes its start time and
    ``completed``; a sync between the two copied the first (seen under load: the live
    event's timestamp and ``completed`` differed from the log's). It is served pending (the
    stream reads it again) until a later segment has its final form, for at most
    UNTIMED_SEGMENTS segments more; an Inspect that never writes ``completed`` is then
    served as it is."""
    from watcher.sources import shared

    src = SharedLogSource("memory:///untimed-nowhere")
    task = TaskInfo(eval_id="e", task="t", task_id="t", model="m")
    untimed = {"event": "model", "uuid": "m1", "pending": None, "timestamp": 2.0}
    final = {**untimed, "timestamp": 1.0, "completed": 3.0}
    tool = {"event": "tool", "uuid": "t1", "pending": None}
    [held, kept] = src._untimed_pending(task, [untimed, tool], 1)
    assert held["pending"] is True and kept is tool
    assert src._untimed_pending(task, [untimed], 1)[0]["pending"] is True  # read again
    assert src._untimed_pending(task, [final, tool], 2) == [final, tool]
    # one that no later segment completes: held for UNTIMED_SEGMENTS segments, then as is
    other = {**untimed, "uuid": "m2"}
    for more in range(shared.UNTIMED_SEGMENTS):
        assert src._untimed_pending(task, [other], 3 + more)[0]["pending"] is True
    assert src._untimed_pending(task, [other], 3 + shared.UNTIMED_SEGMENTS) == [other]
    third = {**untimed, "uuid": "m3"}
    assert src._untimed_pending(task, [third], 9) == [third]  # and so for the whole eval
