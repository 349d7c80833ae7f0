"""Running samples' pages read from Inspect's sample buffer (``watcher.sources.buffer``).

End-to-end: a real eval's buffer, read beside its control channel, must give the
stream exactly the events the control channel gives (the same offsets, cursors and
completed forms). Unit: every case the buffer cannot answer for goes back to the
control channel.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.test_stream_live import _source, log_events, watch_all
from watcher.events import normalise
from watcher.sources.base import (
    EventPage,
    SampleListing,
    Source,
    SourceBusy,
    SourceError,
    TaskInfo,
    decode_cursor,
    encode_cursor,
)
from watcher.sources.buffer import BufferedSource, SampleBufferReader, find_buffer
from watcher.state import WatchState

RULE_FIELDS = ("type", "uuid", "function", "arguments", "result", "error", "completion",
               "stop_reason", "pending")


@pytest.mark.e2e
@pytest.mark.parametrize("log_buffer", ["1", "10"])
def test_buffer_pages_equal_the_control_channel_and_the_log(eval_runner: Any,
                                                            log_buffer: str) -> None:
    """``--log-buffer 1`` logs each sample as it finishes (its rows leave the buffer at
    once: its end is read over the control channel); with 10 a finished sample's rows
    stay until ten are pending or the task ends, and its end is read from the buffer."""
    proc = eval_runner("multi", "--max-samples", "3", "-T", "samples=4", "-T", "steps=4",
                       "--ctl-server", "keep", "--log-buffer", log_buffer, tool_delay=0.6)
    http = _source(proc)
    src = BufferedSource(http)
    got = watch_all(src, poll=0.2, types=frozenset({"model", "tool"}))
    assert not src.notices, src.notices  # the buffer agreed with the control channel
    assert src.buffer_reads > 10, "the buffer was never read: the comparison is vacuous"
    if log_buffer == "10":  # all but perhaps the last (the task may end first)
        assert src.buffer_ends >= 3, src.buffer_ends
    expected = _logged(proc.log_dir, set(got["events"]))
    assert set(got["events"]) == set(expected)
    # the same events, once each, completed, in the log's order ...
    for key, events in got["events"].items():
        want = [e["uuid"] for e in expected[key] if e["event"] in ("model", "tool")]
        assert [e["uuid"] for e in events] == want, key
        assert not any(e["pending"] for e in events)
    # ... and what the rules read of them is what the control channel serves
    task = got["task"]
    # the first pages of samples after the first came from the buffer, under the nonce
    # their summary rows give: real Inspect confirmed the derivation
    assert src._derive.get(task.eval_id) is True
    for key, events in got["events"].items():
        from watcher.stream import SampleStream

        stream = SampleStream(task, *key, types=frozenset({"model", "tool"}), tier="content")
        again: list[dict[str, Any]] = []
        while not stream.done:
            again.extend(stream.poll(http).events)
        assert [{f: e.get(f) for f in RULE_FIELDS} for e in events] == \
            [{f: e.get(f) for f in RULE_FIELDS} for e in again], key
    http.close()


def _logged(log_dir: Path, samples: set[tuple[str, int]],
            guard: float = 900.0) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """The log's events once it holds ``samples``: the control channel says a sample is
    done before the eval writes its log (with ``--log-buffer 10``, at the task's end),
    so a busy machine can read the log a moment too soon. ``guard`` only ends a hang."""
    deadline = time.monotonic() + guard
    while True:
        try:
            expected = log_events(log_dir)
        except Exception:  # noqa: BLE001 - not written yet, or being written
            expected = {}
        if set(expected) >= samples or time.monotonic() > deadline:
            return expected
        time.sleep(0.2)


# --------------------------------------------------------------------------- unit

SCHEMA = """
CREATE TABLE samples (id TEXT, epoch INTEGER, data TEXT, PRIMARY KEY (id, epoch));
CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT, sample_id TEXT,
                     sample_epoch INTEGER, data TEXT);
CREATE INDEX idx_events_sample_uuid ON events(sample_id, sample_epoch, event_id, id);
CREATE TABLE attachments (id INTEGER PRIMARY KEY AUTOINCREMENT, sample_id TEXT,
                          sample_epoch INTEGER, hash TEXT, content TEXT);
"""
NONCE = "UUID:0"


class FakeBuffer:
    """A sample buffer database with Inspect's tables, written as an eval would."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")  # as Inspect's buffer is
        self.db.executescript(SCHEMA)
        self.db.execute("INSERT INTO samples VALUES ('s1', 1, ?)",
                        (json.dumps({"id": "s1", "epoch": 1, "completed": False}),))

    def event(self, uuid: str, kind: str = "tool", pending: bool = False,
              **fields: Any) -> None:
        data = {"uuid": uuid, "event": kind, "timestamp": 1.0, "pending": pending or None,
                **fields}
        self.db.execute("INSERT INTO events (event_id, sample_id, sample_epoch, data) "
                        "VALUES (?, 's1', 1, ?)", (uuid, json.dumps(data, indent=2)))

    def complete(self) -> None:
        self.db.execute("UPDATE samples SET data = ?",
                        (json.dumps({"id": "s1", "epoch": 1, "completed": True}),))


class Inner(Source):
    """The control channel: serves pages of the transcript (the buffer's events in
    order of first appearance, as the real server does) and records every read."""

    name = "http"
    live = True
    parallel_reads = 8

    def __init__(self, buf: FakeBuffer | None = None) -> None:
        self.calls: list[str | None] = []
        self.buf = buf

    def tasks(self) -> list[TaskInfo]:
        return []

    def samples(self, task: TaskInfo, active_since: float | None = None,
                all_rows: bool = False) -> SampleListing:
        return SampleListing(as_of=0.0, samples=[])

    def events(self, task: TaskInfo, sample_id: str, epoch: int, *, since: str | None,
               types: frozenset[str] | None, tier: str, limit: int = 500) -> EventPage:
        self.calls.append(since)
        _, offset = decode_cursor(since)
        events: list[dict[str, Any]] = []
        if self.buf is not None:
            latest: dict[str, dict[str, Any]] = {}
            try:
                for uuid, data in self.buf.db.execute(
                        "SELECT event_id, data FROM events ORDER BY id"):
                    latest[uuid] = json.loads(data)
            except sqlite3.OperationalError:  # the test broke the table: serve nothing
                pass
            events = list(latest.values())[offset:offset + limit]
        return EventPage(events=[e for e in events if types is None or e["event"] in types],
                         next=encode_cursor(NONCE, offset + len(events)), done=False)

    def close(self) -> None:
        pass


@pytest.fixture()
def setup(tmp_path: Path) -> tuple[FakeBuffer, Inner, BufferedSource, TaskInfo]:
    root = tmp_path / "samplebuffer"
    (root / "abc").mkdir(parents=True)
    buf = FakeBuffer(root / "abc" / "run_x.eval.4242.db")
    task = TaskInfo(eval_id="e", task="t", task_id="t", model="m",
                    log_location="file:///logs/run_x.eval", pid=4242)
    inner = Inner(buf)
    return buf, inner, BufferedSource(inner, base=root), task


def _read(src: BufferedSource, task: TaskInfo, since: str | None, limit: int = 500,
          tier: str = "content") -> EventPage:
    return src.events(task, "s1", 1, since=since, types=None, tier=tier,  # type: ignore[arg-type]
                      limit=limit)


def test_finds_the_buffer_of_the_task_by_log_name_and_pid(setup: Any, tmp_path: Path) -> None:
    buf, _, _, task = setup
    assert find_buffer(task, tmp_path / "samplebuffer") == buf.path
    other = TaskInfo(eval_id="e", task="t", task_id="t", model="m",
                     log_location="file:///logs/run_x.eval", pid=1)
    assert find_buffer(other, tmp_path / "samplebuffer") is None


def test_first_page_is_the_control_channels_then_the_buffer_continues(setup: Any) -> None:
    buf, inner, src, task = setup
    buf.event("a")
    page = _read(src, task, None)  # names the attempt's nonce
    assert inner.calls == [None]
    buf.event("b", pending=True)
    buf.event("c")
    page = _read(src, task, page.next)
    assert len(inner.calls) == 1, "the buffer should have served this read"
    assert [e["uuid"] for e in page.events] == ["b", "c"]
    assert page.events[0]["pending"] is True
    assert decode_cursor(page.next) == (NONCE, 3)
    # the pending event completes: a new row of the same event; re-reading its offset
    # gives the completed version (as the control channel does)
    buf.event("b", result="done")
    time.sleep(0.25)  # past the tail interval
    again = _read(src, task, encode_cursor(NONCE, 1))
    assert [e["uuid"] for e in again.events] == ["b", "c"]
    assert again.events[0].get("pending") is None and again.events[0]["result"] == "done"
    assert len(inner.calls) == 1


def _next_page(src: BufferedSource, task: TaskInfo, since: str | None) -> EventPage:
    """The next page with events (the buffer's tail runs every 0.2 s): read until then."""
    deadline = time.monotonic() + 30
    while True:
        got = _read(src, task, since)
        if got.events or time.monotonic() > deadline:
            return got


def _prompt(event: dict[str, Any]) -> tuple[Any, Any]:
    """What a served model event says prompted it (role, text)."""
    return event.get("prompt_role"), event.get("prompt")


def test_attachments_are_resolved(setup: Any) -> None:
    """And those a read fetched serve the sample's next read too (a tool's output, then
    the prompt quoting it): an attachment is named by its content's hash, so the kept
    text is the text, and it is not asked for again."""
    buf, _, src, task = setup
    buf.event("a")
    page = _read(src, task, None)
    key = "0123456789abcdef0123456789abcdef"
    buf.db.execute("INSERT INTO attachments (sample_id, sample_epoch, hash, content) "
                   "VALUES ('s1', 1, ?, 'the whole output')", (key,))
    buf.event("b", result=f"attachment://{key}")
    page = _next_page(src, task, page.next)
    assert page.events[0]["result"] == "the whole output"
    buf.db.execute("DELETE FROM attachments")  # no query could find it now
    buf.event("c", arguments={"cmd": f"echo attachment://{key}"})
    page = _next_page(src, task, page.next)
    assert page.events[0]["args"] == {"cmd": "echo the whole output"}


def test_prompts_and_attachments_come_with_the_tail(setup: Any) -> None:
    """A tracked sample's new message-pool rows and attachments come with the tail's
    one query per table, not in statements of each read (two per read were 130 ms of a
    125-run replay); a read serves what the queries would have found."""
    buf, _, src, task = setup
    buf.db.execute("CREATE TABLE message_pool (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                   "sample_id TEXT, sample_epoch INTEGER, msg_id TEXT, data TEXT)")

    def pool(msg_id: str, role: str, content: str) -> None:
        buf.db.execute("INSERT INTO message_pool (sample_id, sample_epoch, msg_id, data) "
                       "VALUES ('s1', 1, ?, ?)",
                       (msg_id, json.dumps({"id": msg_id, "role": role, "content": content})))

    buf.event("a")
    page = _read(src, task, None)  # the control channel's: names the nonce, opens the reader
    pool("p1", "user", "fix the bug")
    buf.event("m1", "model", input=[], input_refs=[[0, 1]],
              output={"completion": "ok", "choices": []})
    page = _next_page(src, task, page.next)  # the pool list is read once, from its start
    assert _prompt(page.events[0]) == ("user", "fix the bug")

    reader = src._readers[task.eval_id]
    asked: list[str] = []
    reader._conn.set_trace_callback(asked.append)
    key = "0123456789abcdef0123456789abcdef"
    buf.db.execute("INSERT INTO attachments (sample_id, sample_epoch, hash, content) "
                   "VALUES ('s1', 1, ?, 'FAILED test_x')", (key,))
    pool("p2", "assistant", "running the tests")
    pool("p3", "tool", f"attachment://{key}")
    buf.event("t", result=f"attachment://{key}")
    buf.event("m2", "model", input=[], input_refs=[[0, 3]],
              output={"completion": "again", "choices": []})
    page = _next_page(src, task, page.next)
    assert [e["uuid"] for e in page.events] == ["t", "m2"]
    assert page.events[0]["result"] == "FAILED test_x"
    assert _prompt(page.events[1]) == ("tool", "FAILED test_x")
    tailed = [q for q in asked if "WHERE id >" in q]
    assert any("FROM message_pool" in q for q in tailed), asked  # the tail ran ...
    per_read = [q for q in asked if ("FROM attachments" in q or "FROM message_pool" in q)
                and q not in tailed]
    assert per_read == [], per_read  # ... and the read asked for nothing of its own

    # what the tail did not bring (the reader's rows dropped here) is still asked for
    reader._views[("s1", 1)].pool_rows.clear()
    reader._views[("s1", 1)].attached.clear()
    buf.event("m3", "model", input=[], input_refs=[[0, 3]],
              output={"completion": "and again", "choices": []})
    page = _next_page(src, task, page.next)
    assert _prompt(page.events[0]) == ("tool", "FAILED test_x")


def test_a_model_event_is_served_as_the_log_source_projects_it(setup: Any) -> None:
    """The buffer serves the content tier's event (sources/logfiles/project.py), as a log
    scan does: what a rule reads resolved, whatever the attachment's text holds, and no
    raw API call or tool list (they are never read below the full tier)."""
    buf, _, src, task = setup
    buf.event("a")
    page = _read(src, task, None)
    key = "fedcba9876543210fedcba9876543210"
    text = 'She said "done"\\n\ttab, naïve ✓ \u2028 end'
    buf.db.execute("INSERT INTO attachments (sample_id, sample_epoch, hash, content) "
                   "VALUES ('s1', 1, ?, ?)", (key, text))
    ref = f"attachment://{key}"
    buf.event("m", "model", model="m", input=[{"role": "user", "content": ref}],
              call={"request": {"messages": [{"content": ref}]}}, tools=[{"name": "bash"}],
              output={"completion": ref, "choices": [
                  {"message": {"role": "assistant", "content": f"see {ref}!"},
                   "stop_reason": "stop"}]})
    (event,) = _next_page(src, task, page.next).events
    assert event["completion"] == text  # (the output's completion, before its message)
    assert _prompt(event) == ("user", text)
    assert "call" not in event and "tools" not in event and "input" not in event
    assert normalise(event, "content") is event  # made once, in the source


@pytest.mark.parametrize("change", ["logged", "rows replaced", "second sample_init",
                                    "unvouched nonce", "full tier", "newer attempt rows",
                                    "order differs"])
def test_what_the_buffer_cannot_vouch_for_goes_to_the_control_channel(
        setup: Any, change: str) -> None:
    buf, inner, src, task = setup
    buf.event("i1", kind="sample_init")
    buf.event("a")
    page = _read(src, task, None)
    buf.event("b")
    page = _read(src, task, page.next)
    assert len(inner.calls) == 1 and [e["uuid"] for e in page.events] == ["b"]
    cursor = page.next
    tier = "content"
    if change == "logged":  # the sample's rows are gone from the buffer
        buf.db.execute("DELETE FROM samples")
    elif change == "rows replaced":  # a retry deletes the failed attempt's rows
        buf.db.execute("DELETE FROM events")
        buf.event("x")
        buf.event("y")
        buf.event("z")
    elif change == "second sample_init":  # rows of a new attempt under the same key
        buf.event("i2", kind="sample_init")
    elif change == "unvouched nonce":
        cursor = encode_cursor("OTHER:1", 3)
    elif change == "order differs":  # the buffer disagrees with the page served
        src._vouched[("e", "s1", 1)].uuids = ("i1", "zz")
        src._readers["e"]._views.clear()  # type: ignore[union-attr]
        src._vouched[("e", "s1", 1)].checked = False
    elif change == "full tier":
        tier = "full"
    elif change == "newer attempt rows":  # a new view must start before the vouched row
        src._readers["e"]._views.clear()  # type: ignore[union-attr]
        buf.db.execute("DELETE FROM events")
        buf.event("x")
        buf.event("y")
        buf.event("z")
        buf.event("w")
    time.sleep(0.25)
    _read(src, task, cursor, tier=tier)
    assert len(inner.calls) == 2, f"{change}: the buffer answered a read it cannot vouch for"


def test_a_broken_database_turns_the_buffer_off_with_a_notice(setup: Any) -> None:
    buf, inner, src, task = setup
    buf.event("a")
    page = _read(src, task, None)
    buf.db.execute("DROP TABLE events")
    time.sleep(0.25)
    _read(src, task, page.next)
    _read(src, task, page.next)
    assert len(inner.calls) == 3
    notices = [(n.kind, n.message) for n in src.pop_notices()]
    assert len(notices) == 1 and notices[0][0] == "transport"
    assert "control channel" in notices[0][1]
    assert src.pop_notices() == []


def test_a_task_without_a_buffer_reads_the_control_channel(tmp_path: Path) -> None:
    inner = Inner()
    src = BufferedSource(inner, base=tmp_path)
    task = TaskInfo(eval_id="e", task="t", task_id="t", model="m", log_location="x.eval",
                    pid=1)
    page = _read(src, task, None)
    _read(src, task, page.next)
    assert len(inner.calls) == 2


def test_reader_opens_read_only(setup: Any) -> None:
    buf, _, _, _ = setup
    reader = SampleBufferReader(buf.path)
    with pytest.raises(sqlite3.OperationalError):
        reader._conn.execute("DELETE FROM events")
    reader.close()


class MovedSource(Inner):
    """A control channel plus a buffer that reports which samples grew."""

    def __init__(self) -> None:
        super().__init__()
        self.listings = 0
        self.moved: set[tuple[str, int]] = set()
        self.read: list[str] = []
        self.rows = ["s1", "s2"]

    def samples(self, task: TaskInfo, active_since: float | None = None,
                all_rows: bool = False) -> SampleListing:
        from watcher.sources.base import SampleRow

        self.listings += 1
        return SampleListing(as_of=float(self.listings), samples=[
            SampleRow(sample_id=s, epoch=1, status="running", raw={"events": 1})
            for s in self.rows])

    def events(self, task: TaskInfo, sample_id: str, epoch: int, *, since: str | None,
               types: frozenset[str] | None, tier: str, limit: int = 500) -> EventPage:
        self.read.append(sample_id)
        return EventPage(events=[], next=encode_cursor(NONCE, 0), done=False)

    def moved_samples(self, task: TaskInfo) -> set[tuple[str, int]]:
        moved, self.moved = self.moved, set()
        return moved


def test_moved_samples_are_read_without_waiting_for_the_listing() -> None:
    """With a buffer, the eval is asked for the listing only every few seconds (or for
    a sample the watch does not know yet), and it never holds up the reads."""
    from concurrent.futures import ThreadPoolExecutor

    from watcher.app import WatchOptions, load_engine
    from watcher.run.runner import LISTING_EVERY_WITH_BUFFER, TaskWatcher
    from watcher.run.values import RunOptions

    src = MovedSource()
    task = TaskInfo(eval_id="e", task="t", task_id="t", model="m")
    with ThreadPoolExecutor(2) as pool:
        tw = TaskWatcher(src, task, load_engine(WatchOptions()), RunOptions(),  # type: ignore[arg-type]
                         WatchState(), lambda out: None, pool)
        tw.cycle(100.0)  # the first cycle lists before anything else
        assert src.listings == 1 and set(tw.samples) == {("s1", 1), ("s2", 1)}
        src.read.clear()
        src.moved = {("s2", 1)}
        tw.cycle(100.5)
        assert src.listings == 1, "a listing was requested although the buffer said enough"
        assert src.read == ["s2"]
        src.moved = {("s3", 1)}  # a sample the watch has not listed yet
        src.rows.append("s3")
        tw.cycle(101.0)
        if tw._listing is not None:
            tw._listing.result()
        assert src.listings == 2
        tw.cycle(101.5)  # the listing that returned is taken in
        assert ("s3", 1) in tw.samples
        src.read.clear()
        tw.cycle(101.5 + LISTING_EVERY_WITH_BUFFER)
        if tw._listing is not None:
            tw._listing.result()
        assert src.listings == 3  # still listed every few seconds, for status changes


class InProcessSource(MovedSource):
    """A buffer that serves every read in process and says when its batches open."""

    def __init__(self, log: list[tuple[str, str]]) -> None:
        super().__init__()
        self.log = log
        self.rows = ["s1", "s2", "s3", "s4", "s5"]
        self.with_events = False  # each sample's second read brings one tool event

    def reads_in_process(self, task: TaskInfo, sample_id: str, epoch: int,
                         since: str | None) -> bool:
        return True

    @contextlib.contextmanager
    def read_batch(self, task: TaskInfo) -> Iterator[None]:
        self.log.append(("batch", ""))
        yield

    def events(self, task: TaskInfo, sample_id: str, epoch: int, *, since: str | None,
               types: frozenset[str] | None, tier: str, limit: int = 500) -> EventPage:
        self.log.append(("read", sample_id))
        page = super().events(task, sample_id, epoch, since=since, types=types, tier=tier,
                              limit=limit)
        if self.with_events and since is not None and decode_cursor(since)[1] == 0:
            page = EventPage(events=[{
                "uuid": f"{sample_id}-t1", "event": "tool", "type": "function", "id": "c1",
                "function": "bash", "arguments": {"cmd": "ls"}, "result": "a b",
                "timestamp": "2026-01-01T00:00:00+00:00",
                "completed": "2026-01-01T00:00:01+00:00"}],
                next=encode_cursor(NONCE, 1), done=False)
        return page


@pytest.mark.parametrize("pages, events, with_events", [(2, 1000, False), (10, 2, True)])
def test_a_cycles_buffer_reads_are_made_a_few_at_a_time_before_they_are_applied(
        monkeypatch: pytest.MonkeyPatch, pages: int, events: int, with_events: bool) -> None:
    """Reads the buffer serves in process are made a run at a time, in one batch for
    the cycle, and only then applied: the rules' working set stays warm through the
    applies (read and applied one by one, the same tool events cost the rules twice as
    much live as post hoc). A run ends at READ_AHEAD pages or READ_AHEAD_EVENTS events
    (here 2 pages; then 2 events, a page holding one), bounding what is held."""
    from concurrent.futures import ThreadPoolExecutor

    import watcher.run.runner as runner
    from watcher.app import WatchOptions, load_engine
    from watcher.run.tracked import TrackedSample
    from watcher.run.values import RunOptions

    log: list[tuple[str, str]] = []
    real_apply = TrackedSample.apply

    def apply(self: TrackedSample, item: Any, now: float) -> None:
        log.append(("apply", self.sample_id))
        real_apply(self, item, now)

    monkeypatch.setattr(TrackedSample, "apply", apply)
    monkeypatch.setattr(runner, "READ_AHEAD", pages)
    monkeypatch.setattr(runner, "READ_AHEAD_EVENTS", events)
    src = InProcessSource(log)
    task = TaskInfo(eval_id="e", task="t", task_id="t", model="m")
    with ThreadPoolExecutor(2) as pool:
        tw = runner.TaskWatcher(src, task, load_engine(WatchOptions()), RunOptions(),  # type: ignore[arg-type]
                                WatchState(), lambda out: None, pool)
        tw.cycle(100.0)  # lists, and reads every sample it lists
        log.clear()
        src.with_events = with_events
        src.moved = {(s, 1) for s in src.rows}
        tw.cycle(100.5)
    if with_events:  # the events were read, and applied
        assert all(t.stream.resume_at is not None and decode_cursor(
            t.stream.resume_at)[1] == 1 for t in tw.samples.values())
    reads = [x for x in log if x[0] != "apply"]
    assert reads[0] == ("batch", "") and ("batch", "") not in reads[1:], log
    kinds = [k for k, _ in log[1:]]
    assert kinds == ["read", "read", "apply", "apply", "read", "read", "apply", "apply",
                     "read", "apply"], log
    # each chunk applied in the order it was read
    assert [s for k, s in log if k == "read"] == [s for k, s in log if k == "apply"]


def _second_sample(buf: FakeBuffer, uuid: str) -> None:
    buf.db.execute("INSERT INTO samples VALUES ('s2', 1, ?)",
                   (json.dumps({"id": "s2", "epoch": 1, "uuid": uuid, "retries": 0,
                                "completed": False}),))
    for n in ("x", "y"):
        buf.db.execute("INSERT INTO events (event_id, sample_id, sample_epoch, data) "
                       "VALUES (?, 's2', 1, ?)",
                       (n, json.dumps({"uuid": n, "event": "tool", "timestamp": 1.0})))


@pytest.mark.parametrize("first_uuid", ["UUID", "OTHER"])
def test_first_pages_come_from_the_buffer_once_the_nonce_is_confirmed(
        setup: Any, first_uuid: str) -> None:
    """Inspect's cursor nonce is the sample's uuid and retry count: once a control-channel
    page confirms that for a task, a running sample's first page is read from the buffer
    (an eval whose loop is busy answered each first page late). A nonce the control
    channel contradicts turns the derivation off for the task."""
    buf, inner, src, task = setup
    buf.db.execute("UPDATE samples SET data = ?", (json.dumps(
        {"id": "s1", "epoch": 1, "uuid": first_uuid, "retries": 0, "completed": False}),))
    buf.event("a")
    _read(src, task, None)  # s1's first page: the control channel's (nonce UUID:0)
    _second_sample(buf, "U2")
    page = src.events(task, "s2", 1, since=None, types=None, tier="content")  # type: ignore[arg-type]
    if first_uuid == "UUID":
        assert len(inner.calls) == 1, "s2's first page should have come from the buffer"
        assert [e["uuid"] for e in page.events] == ["x", "y"]
        assert decode_cursor(page.next) == ("U2:0", 2)
    else:
        assert len(inner.calls) == 2  # derivation contradicted: the control channel


def test_a_vouched_tracked_attempt_is_read_in_process(setup: Any) -> None:
    buf, inner, src, task = setup
    buf.event("a")
    assert not src.reads_in_process(task, "s1", 1, None)  # the first page: the eval's
    page = _read(src, task, None)
    assert not src.reads_in_process(task, "s1", 1, page.next)  # vouched, not yet loaded
    buf.event("b")
    page = _read(src, task, page.next)
    assert len(inner.calls) == 1  # the buffer served it
    assert src.reads_in_process(task, "s1", 1, page.next)
    assert not src.reads_in_process(task, "s1", 1, encode_cursor("other-attempt", 2))
    assert not src.reads_in_process(task, "s2", 1, page.next)
    buf.complete()  # finished, not yet logged: its end is still the buffer's
    time.sleep(0.25)  # the summary's status is read again after the tail interval
    assert src.reads_in_process(task, "s1", 1, page.next)
    buf.event("c", pending=True)  # (a finished sample with a pending event: the eval's)
    assert not src.reads_in_process(task, "s1", 1, page.next)
    buf.db.execute("DELETE FROM samples")  # logged: its end comes from the eval, which
    buf.db.execute("DELETE FROM events WHERE event_id = 'c'")  # may make the read wait
    src._readers["e"]._status_at.clear()  # type: ignore[union-attr]
    assert not src.reads_in_process(task, "s1", 1, page.next)


class ThreadedSource(MovedSource):
    """Serves s1 in process (as the buffer does), s2 from the eval; notes the thread."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: dict[str, int] = {}

    def reads_in_process(self, task: TaskInfo, sample_id: str, epoch: int,
                         since: str | None) -> bool:
        return sample_id == "s1"

    def events(self, task: TaskInfo, sample_id: str, epoch: int, *, since: str | None,
               types: frozenset[str] | None, tier: str, limit: int = 500) -> EventPage:
        self.threads[sample_id] = threading.get_ident()
        return super().events(task, sample_id, epoch, since=since, types=types, tier=tier,
                              limit=limit)


def test_reads_served_in_process_stay_on_the_cycle_thread() -> None:
    """A hand-off to a reader thread costs more than a buffer read: only the reads that
    wait on the eval go to the pool."""
    from concurrent.futures import ThreadPoolExecutor

    from watcher.app import WatchOptions, load_engine
    from watcher.run.runner import TaskWatcher
    from watcher.run.values import RunOptions

    src = ThreadedSource()
    task = TaskInfo(eval_id="e", task="t", task_id="t", model="m")
    with ThreadPoolExecutor(2) as pool:
        tw = TaskWatcher(src, task, load_engine(WatchOptions()), RunOptions(),  # type: ignore[arg-type]
                         WatchState(), lambda out: None, pool)
        tw.cycle(100.0)
        src.moved = {("s1", 1), ("s2", 1)}
        src.threads.clear()
        tw.cycle(100.5)
    assert set(src.threads) == {"s1", "s2"}
    assert src.threads["s1"] == threading.get_ident()
    assert src.threads["s2"] != threading.get_ident()


def test_a_finished_sample_releases_its_view(setup: Any) -> None:
    buf, inner, src, task = setup
    buf.event("a")
    page = _read(src, task, None)
    buf.event("b")
    page = _read(src, task, page.next)
    reader = src._readers["e"]
    assert reader is not None and ("s1", 1) in reader._views
    buf.db.execute("DELETE FROM samples")  # logged: Inspect removed its rows
    time.sleep(0.25)  # the summary's status is read again after the tail interval
    done = EventPage(events=[], next=encode_cursor(NONCE, 2), done=True)
    inner.events = lambda *a, **k: done  # type: ignore[method-assign]
    assert _read(src, task, page.next).done
    assert len(inner.calls) == 1, "the end of a logged sample is the control channel's"
    assert ("s1", 1) not in reader._views


def test_a_finished_sample_still_in_the_buffer_ends_there(setup: Any) -> None:
    """Inspect marks a sample completed after its last event and keeps its rows until
    it is logged: its last events (whole, not cut to 256 characters) and its end are
    read from the buffer, without a request the busy eval would answer late."""
    buf, inner, src, task = setup
    buf.event("a")
    page = _read(src, task, None)
    buf.event("b", pending=True)
    page = _read(src, task, page.next)
    assert [e["uuid"] for e in page.events] == ["b"]
    buf.event("b", result="x" * 5000)
    buf.event("c", result="y" * 3000)
    buf.complete()
    time.sleep(0.25)
    reader = src._readers["e"]
    assert reader is not None
    end = _read(src, task, encode_cursor(NONCE, 1), limit=1)  # a page, not yet the end
    assert [e["uuid"] for e in end.events] == ["b"] and not end.done
    end = _read(src, task, end.next)
    assert [e["uuid"] for e in end.events] == ["c"] and end.done
    assert end.events[0]["result"] == "y" * 3000
    assert decode_cursor(end.next) == (NONCE, 3)
    assert len(inner.calls) == 1, "the control channel was asked for the end"
    assert src.buffer_ends == 1 and ("s1", 1) not in reader._views


def test_a_finished_sample_with_an_event_left_pending_ends_over_the_control_channel(
        setup: Any) -> None:
    buf, inner, src, task = setup
    buf.event("a")
    page = _read(src, task, None)
    buf.event("b", pending=True)
    buf.complete()
    time.sleep(0.25)
    _read(src, task, page.next)
    assert len(inner.calls) == 2 and src.buffer_ends == 0


class SlowTasksSource(MovedSource):
    """A buffered source whose eval answers the task list only when ``gate`` opens (a
    saturated event loop), and then perhaps with an error."""

    def __init__(self, task: TaskInfo) -> None:
        super().__init__()
        self.task = task
        self.gate = threading.Event()
        self.gate.set()
        self.asked = 0
        self.fail: Exception | None = None

    def tasks(self) -> list[TaskInfo]:
        self.asked += 1
        assert self.gate.wait(10)
        if self.fail is not None:
            raise self.fail
        return [self.task]


def test_a_slow_task_list_does_not_hold_up_buffered_reads() -> None:
    """Once every task reads from the buffer, the request for the task list runs beside
    the cycle (its answer serves the next one): moved samples are read while the eval
    has not answered, and an error it answers with surfaces one cycle later."""
    from watcher.app import WatchOptions, load_engine
    from watcher.run.runner import SourceWatcher
    from watcher.run.values import RunOptions
    from watcher.sources.base import ProcessGone

    task = TaskInfo(eval_id="e", task="t", task_id="t", model="m")
    src = SlowTasksSource(task)
    sw = SourceWatcher(src, load_engine(WatchOptions()), RunOptions(),  # type: ignore[arg-type]
                       WatchState(), lambda out: None, "src")
    try:
        sw.cycle()  # the first cycle asks, and waits: nothing is known yet
        assert src.asked == 1 and sw.tasks["e"].buffered
        src.gate.clear()  # the eval's loop is saturated from here on
        src.read.clear()
        src.moved = {("s2", 1)}
        started = time.monotonic()
        sw.cycle()
        assert time.monotonic() - started < 5, "the cycle waited for the task list"
        assert src.read == ["s2"], "the moved sample was not read"
        deadline = time.monotonic() + 10
        while src.asked < 2 and time.monotonic() < deadline:  # asked in the background
            time.sleep(0.01)
        assert src.asked == 2 and not sw.gone
        src.fail = ProcessGone("connection refused")
        src.gate.set()
        assert sw._infos_next is not None
        with pytest.raises(ProcessGone):
            sw._infos_next.result(timeout=10)
        sw.cycle()  # takes in the answer: the process is gone
        assert sw.gone
    finally:
        src.gate.set()
        if sw.pool is not None:
            sw.pool.shutdown(wait=True)


def test_a_tracked_sample_that_finishes_or_is_logged_is_moved_once(
        setup: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Finishing adds no event row: the reader looks at the summary rows (once a
    second) so the watch reads the end without waiting for the eval's listing."""
    import watcher.sources.buffer as buffer

    monkeypatch.setattr(buffer, "STATUS_EVERY", 0.0)
    buf, _, src, task = setup
    buf.event("a")
    page = _read(src, task, None)
    buf.event("b")
    _read(src, task, page.next)  # tracked now
    src.moved_samples(task)
    assert src.moved_samples(task) == set()  # nothing new
    buf.complete()
    assert src.moved_samples(task) == {("s1", 1)}
    assert src.moved_samples(task) == set(), "said once, not every cycle"
    buf.db.execute("DELETE FROM samples")  # logged: gone from the buffer
    assert src.moved_samples(task) == set(), "already said finished"
    src._readers["e"]._ended.clear()  # type: ignore[union-attr]
    assert src.moved_samples(task) == {("s1", 1)}  # gone without being seen finished


class ListingStops:
    """A real eval's buffered source whose samples listing stops answering (times
    out, as a saturated eval's did for minutes) once ``stop`` is set; the rest is the
    buffered source's own (not a Source subclass, whose defaults would shadow it)."""

    def __init__(self, inner: BufferedSource) -> None:
        self.inner = inner
        self.stop = False
        self.name, self.live, self.parallel_reads = inner.name, True, inner.parallel_reads

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def tasks(self) -> list[TaskInfo]:
        return self.inner.tasks()

    def samples(self, task: TaskInfo, active_since: float | None = None,
                all_rows: bool = False) -> SampleListing:
        if self.stop:
            raise SourceBusy("samples listing timed out")
        return self.inner.samples(task, active_since=active_since, all_rows=all_rows)

    def events(self, *a: Any, **k: Any) -> EventPage:
        return self.inner.events(*a, **k)

    def close(self) -> None:
        self.inner.close()


@pytest.mark.e2e
def test_finished_samples_end_while_the_listing_does_not_answer(
        eval_runner: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A real eval whose samples listing stops answering once every sample is known:
    each sample is still read to its end, from the buffer, with the log's events (a
    finished sample left unread looked idle and drew a false stall finding).

    A sample's summary row is marked finished a moment after its last event row. Under
    a saturated eval that moment was seconds; here the reader's status cache is made to
    last 3 s, so its last rows are read as a running sample's and only the summary rows
    can say it ended."""
    from concurrent.futures import ThreadPoolExecutor

    import watcher.sources.buffer as buffer

    monkeypatch.setattr(buffer, "TAIL_INTERVAL", 3.0)

    from watcher.app import WatchOptions, load_engine
    from watcher.run.runner import TaskWatcher
    from watcher.run.values import RunOptions
    from watcher.stream import SampleStream

    # every tool call waits while this file is there: the samples run on only once the
    # watch knows all four and reads the buffer (a busy machine's eval outran the watch,
    # and its samples ended before the listing stopped)
    hold = tmp_path / "hold"
    hold.touch()
    proc = eval_runner("multi", "--max-samples", "4", "-T", "samples=4", "-T", "steps=4",
                       "--ctl-server", "keep", "--log-buffer", "10", tool_delay=0.6,
                       env={"SCENARIO_HOLD_FILE": str(hold)})
    http = _source(proc)
    src = ListingStops(BufferedSource(http))
    deadline = time.time() + 900  # bounds a hang only: a busy machine reads slowly
    while not (tasks := src.tasks()) and time.time() < deadline:
        time.sleep(0.1)
    task = tasks[0]
    seen: dict[tuple[str, int], list[str]] = {}
    real_poll = SampleStream.poll

    def poll(stream: SampleStream, source: Any, now: float | None = None) -> Any:
        item = real_poll(stream, source, now)
        seen.setdefault((stream.sample_id, stream.epoch), []).extend(
            e["uuid"] for e in item.events if e.get("type") in ("model", "tool"))
        return item

    with ThreadPoolExecutor(4) as pool:
        tw = TaskWatcher(src, task, load_engine(WatchOptions()), RunOptions(),  # type: ignore[arg-type]
                         WatchState(), lambda out: None, pool)
        SampleStream.poll = poll  # type: ignore[method-assign]
        try:
            while time.time() < deadline:
                try:
                    tw.cycle(time.time())
                except SourceBusy:
                    pass  # the listing's failure: the source watcher goes on the same way
                if len(tw.samples) == 4 and tw.buffered:
                    src.stop = True
                    hold.unlink(missing_ok=True)
                if src.stop and tw.read_to_end:
                    break
                time.sleep(0.2)
        finally:
            SampleStream.poll = real_poll  # type: ignore[method-assign]
            hold.unlink(missing_ok=True)
    assert src.stop, "the listing never stopped: the test is vacuous"
    assert all(t.stream.done for t in tw.samples.values()), {
        k: t.stream.done for k, t in tw.samples.items()}
    assert src.inner.buffer_ends >= 1
    expected = _logged(proc.log_dir, set(seen))
    for key, uuids in seen.items():
        assert uuids == [e["uuid"] for e in expected[key] if e["event"] in ("model", "tool")]
    http.close()


def test_events_of_types_no_rule_reads_are_counted_not_decoded(
        setup: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import watcher.sources.buffer as buffer

    buf, inner, src, task = setup
    buf.event("a")
    tools = frozenset({"tool"})
    page = src.events(task, "s1", 1, since=None, types=tools, tier="content")
    for n in range(3):
        buf.event(f"span{n}", kind="span_begin", name="x" * 1000)
        buf.event(f"t{n}")
    decoded: list[str] = []
    real = buffer._loads
    monkeypatch.setattr(buffer, "_loads", lambda text: decoded.append(text) or real(text))
    time.sleep(0.25)
    page = src.events(task, "s1", 1, since=page.next, types=tools, tier="content")
    assert len(inner.calls) == 1, "the buffer should have served this read"
    assert [e["uuid"] for e in page.events] == ["t0", "t1", "t2"]
    assert decode_cursor(page.next) == (NONCE, 7)  # past the spans too
    assert len(decoded) == 3 and not any("span" in d for d in decoded)


def test_a_batch_keeps_other_threads_out_of_its_older_snapshot(setup: Any) -> None:
    """A cycle's in-process reads share one transaction; a page the control channel
    served meanwhile (on a reader thread) is completed from the buffer as of after the
    batch, not from the batch's older snapshot, where its newest events are missing
    (their text then stayed cut: a live watch counted 3 matches where the log had 6)."""
    buf, _, src, task = setup
    buf.event("a")
    page = _read(src, task, None)
    reader = src._readers["e"]
    assert reader is not None
    got: list[list[dict[str, Any]]] = []
    with src.read_batch(task):
        _read(src, task, page.next)  # the batch's snapshot starts here
        buf.event("new", result="x" * 5000)  # written by the eval after it
        cut = [{"uuid": "new", "event": "tool", "result": "x" * 256, "has_error": False}]
        thread = threading.Thread(target=lambda: got.append(reader.whole("s1", 1, cut)))
        thread.start()
        thread.join(0.3)
        assert thread.is_alive(), "another thread ran a statement inside the batch"
    thread.join(5)
    assert got and got[0][0]["result"] == "x" * 5000


def test_a_finished_sample_logged_at_once_ends_from_what_was_read(
        setup: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inspect may log a finished sample and drop its rows within the second (ten
    finished at once): once the summary rows said it finished, its rows were all read,
    and its end is served from them, without asking a busy eval (whose terminal read
    answered 'not found' until its listing caught up: 54 false stalls)."""
    import watcher.sources.buffer as buffer

    monkeypatch.setattr(buffer, "STATUS_EVERY", 0.0)
    buf, inner, src, task = setup
    buf.event("a")
    page = _read(src, task, None)
    buf.event("b")
    page = _read(src, task, page.next)
    buf.event("c", result="z" * 4000)  # written, not yet read ...
    buf.complete()  # ... and the sample finished
    assert src.moved_samples(task) == {("s1", 1)}
    buf.db.execute("DELETE FROM events")  # logged: its rows are gone
    buf.db.execute("DELETE FROM samples")
    end = _read(src, task, page.next)
    assert [e["uuid"] for e in end.events] == ["c"] and end.done
    assert end.events[0]["result"] == "z" * 4000
    assert len(inner.calls) == 1, "the control channel was asked for the end"


def test_a_sample_read_over_the_control_channel_is_told_finished_too(
        setup: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import watcher.sources.buffer as buffer

    monkeypatch.setattr(buffer, "STATUS_EVERY", 0.0)
    buf, inner, src, task = setup
    buf.event("a")
    _read(src, task, None)  # the control channel's page: vouched, no view here
    reader = src._readers["e"]
    assert reader is not None and ("s1", 1) not in reader._views
    src.moved_samples(task)
    buf.complete()
    assert src.moved_samples(task) == {("s1", 1)}


class EndingSource(Inner):
    """The control channel of a sample that ended between a content read and the full
    read of its end: the full tier serves nothing until Inspect has logged the sample
    (the buffer's rows left), then the whole events."""

    def __init__(self) -> None:
        super().__init__(None)
        self.logged = False
        self.whole = [{"uuid": "a", "event": "tool", "function": "bash",
                       "arguments": {"cmd": "x" * 400}, "result": "r" * 400}]

    def events(self, task: TaskInfo, sample_id: str, epoch: int, *, since: str | None,
               types: frozenset[str] | None, tier: str, limit: int = 500) -> EventPage:
        self.calls.append(tier)
        if tier == "full":
            return EventPage(events=list(self.whole) if self.logged else [],
                             next=encode_cursor(NONCE, 1 if self.logged else 0), done=True)
        cut = [{"uuid": "a", "event": "tool", "function": "bash", "has_error": False,
                "arguments": {"cmd": "x" * 256}, "result": "r" * 256}]
        return EventPage(events=cut, next=encode_cursor(NONCE, 1), done=True)


def test_an_end_read_cut_is_read_again_until_whole() -> None:
    """A sample that ends between two reads: the full read of its cut end finds nothing
    (the buffer's rows are gone, the logged copy not yet served). The page is read again
    at the next poll instead of its cut values being judged (post hoc they are whole);
    after a few polls it is served as it is, never lost."""
    inner = EndingSource()
    src = BufferedSource(inner, base=None)
    task = TaskInfo(eval_id="e", task="t", task_id="t", model="m", log_location=None, pid=1)
    first = _read(src, task, None)
    assert first.events == [] and first.next is None and not first.done
    inner.logged = True
    again = _read(src, task, None)
    assert again.done and again.events == inner.whole
    # a full tier that never answers: held at most MAX_HOLDS times, then served cut
    import watcher.sources.buffer as buffer

    inner2 = EndingSource()
    src2 = BufferedSource(inner2, base=None)
    pages = [_read(src2, task, None) for _ in range(buffer.MAX_HOLDS + 1)]
    assert [p.done for p in pages] == [False] * buffer.MAX_HOLDS + [True]
    assert pages[-1].events[0]["result"] == "r" * 256


class CondensedSource(EndingSource):
    """The control channel of a sample already logged: its full-tier events condensed
    (strings over 100 characters are references), its messages with their text, or
    (``messages`` None) an error for them."""

    def __init__(self, messages: list[dict[str, Any]] | None) -> None:
        super().__init__()
        from inspect_ai._util.hash import mm3_hash

        self.logged = True
        self.code, self.output = "x" * 400, "r" * 400
        self.whole = [{"uuid": "a", "event": "tool", "function": "bash", "id": "c1",
                       "arguments": {"cmd": f"attachment://{mm3_hash(self.code)}"},
                       "result": f"attachment://{mm3_hash(self.output)}"}]
        self.messages_served = messages

    def messages(self, task: TaskInfo, sample_id: str, epoch: int) -> list[dict[str, Any]]:
        if self.messages_served is None:
            raise SourceError("no messages")
        return self.messages_served


def test_a_logged_samples_references_are_resolved_from_its_messages() -> None:
    task = TaskInfo(eval_id="e", task="t", task_id="t", model="m", log_location=None, pid=1)
    inner = CondensedSource(None)
    inner.messages_served = [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "function": "bash", "arguments": {"cmd": inner.code}}]},
        {"role": "tool", "tool_call_id": "c1", "content": inner.output}]
    src = BufferedSource(inner, base=None)
    (event,) = _read(src, task, None).events
    assert event["arguments"] == {"cmd": inner.code} and event["result"] == inner.output
    assert src.pop_notices() == []


def test_references_its_messages_cannot_resolve_are_said() -> None:
    task = TaskInfo(eval_id="e", task="t", task_id="t", model="m", log_location=None, pid=1)
    inner = CondensedSource(None)  # the messages route fails
    src = BufferedSource(inner, base=None)
    (event,) = _read(src, task, None).events
    assert event["result"].startswith("attachment://")  # left as it is, not made up
    (gap,) = src.pop_notices()
    assert gap.kind == "gap" and "2 attachment reference(s)" in gap.message


class ModelPageSource(Inner):
    """The control channel without a buffer: a content page of one completed model
    event (no prompt at this tier), and its full form on asking."""

    def __init__(self, done: bool = False) -> None:
        super().__init__(None)
        self.done = done

    def events(self, task: TaskInfo, sample_id: str, epoch: int, *, since: str | None,
               types: frozenset[str] | None, tier: str, limit: int = 500) -> EventPage:
        self.calls.append(tier)
        event: dict[str, Any] = {"uuid": "m", "event": "model", "has_error": False,
                                 "completion": "ok"}
        if tier == "full":
            event = {"uuid": "m", "event": "model", "input": [
                {"role": "user", "content": "which card?"}], "output": {"choices": [
                    {"message": {"role": "assistant", "content": "ok"}}]}}
        return EventPage(events=[event], next=encode_cursor(NONCE, 1), done=self.done)


@pytest.mark.parametrize(("status", "done", "young", "whole"), [
    ("running", False, True, True),  # its buffer is expected within seconds
    ("running", False, False, False),  # an eval buffering nothing: turns stay cheap
    ("running", True, False, True),  # a sample's last page
    ("success", False, False, True),  # a finished task (a late watch of a kept eval)
])
def test_model_events_without_a_buffer_are_read_whole_where_it_is_cheap(
        monkeypatch: pytest.MonkeyPatch, status: str, done: bool, young: bool,
        whole: bool) -> None:
    import watcher.sources.buffer as buffer

    if not young:
        monkeypatch.setattr(buffer, "YOUNG", 0.0)
    inner = ModelPageSource(done)
    src = BufferedSource(inner, base=None)
    task = TaskInfo(eval_id="e", task="t", task_id="t", model="m", log_location=None,
                    pid=1, status=status)
    (event,) = _read(src, task, None).events
    assert ("full" in inner.calls) == whole
    assert ("input" in event) == whole  # its prompt, where it was read whole


def test_cursor_tokens_are_the_servers_own() -> None:
    """Our cursor tokens are byte for byte Inspect's (its control server's encoder), for
    nonces that JSON must escape too, and read back to what they hold."""
    from inspect_ai._control.events import encode_cursor as server_encode

    for nonce, offset in [("U2:0", 0), ("a\"b\\c", 7), ("é\u2028", 12345678901), ("", 3)]:
        assert encode_cursor(nonce, offset) == server_encode(nonce, offset)
        assert decode_cursor(encode_cursor(nonce, offset)) == (nonce, offset)


@pytest.mark.parametrize("raw", [b"[1,2]", b'{"n":"a","i":-5}', b'{"n":"a","i":"7"}', b'{"n":"a"}',
                                 b'{"n":"a","i":NaN}', b"\xff\xfe", b'{"n":5,"i":2}', b"{"])
def test_garbled_cursors_read_as_the_server_reads_them(raw: bytes) -> None:
    """What a cursor decodes to, garbage included, is what Inspect's control server makes
    of it (a negative offset read as 0, as the server then uses it)."""
    import base64

    from inspect_ai._control.events import decode_cursor as server_decode

    token = base64.urlsafe_b64encode(raw).decode("ascii")
    nonce, offset = server_decode(token)
    assert decode_cursor(token) == (nonce, max(0, offset))
    for junk in ("", "x", "!!!!", "é"):
        assert decode_cursor(junk) == server_decode(junk) == (None, 0)


def test_a_batch_asks_once_whether_its_samples_rows_were_replaced(setup: Any) -> None:
    """A cycle's reads check that each attempt's rows are still there (a retry replaces
    them) with one statement for every tracked sample, not one per read; a sample whose
    rows were replaced since still goes back to the control channel."""
    buf, inner, src, task = setup
    buf.db.execute("UPDATE samples SET data = ?", (json.dumps(
        {"id": "s1", "epoch": 1, "uuid": "UUID", "retries": 0, "completed": False}),))
    buf.event("a")
    p1 = _read(src, task, None)  # the control channel's: confirms the nonce derivation
    _second_sample(buf, "U2")
    p2 = src.events(task, "s2", 1, since=None, types=None, tier="content")  # type: ignore[arg-type]
    assert len(inner.calls) == 1
    reader = src._readers["e"]
    assert reader is not None
    buf.event("b")
    buf.db.execute("INSERT INTO events (event_id, sample_id, sample_epoch, data) VALUES "
                   "('z', 's2', 1, ?)", (json.dumps({"uuid": "z", "event": "tool",
                                                     "timestamp": 1.0}),))
    statements: list[str] = []
    reader._conn.set_trace_callback(statements.append)
    with src.read_batch(task):
        reader._tailed_at = float("-inf")  # (the tail is due)
        g1 = _read(src, task, p1.next)
        g2 = src.events(task, "s2", 1, since=p2.next, types=None, tier="content")  # type: ignore[arg-type]
    assert [e["uuid"] for e in g1.events] == ["b"]
    assert [e["uuid"] for e in g2.events] == ["z"]
    assert len(inner.calls) == 1, "the buffer should have served both reads"
    assert sum("EXISTS" in s for s in statements) == 1, statements
    assert not [s for s in statements if s.startswith("SELECT 1 FROM events")]
    # s2 retried: its rows replaced by the new attempt's
    buf.db.execute("DELETE FROM events WHERE sample_id = 's2'")
    for n in ("x2", "y2", "z2", "w2"):
        buf.db.execute("INSERT INTO events (event_id, sample_id, sample_epoch, data) "
                       "VALUES (?, 's2', 1, ?)",
                       (n, json.dumps({"uuid": n, "event": "tool", "timestamp": 1.0})))
    with src.read_batch(task):
        reader._tailed_at = float("-inf")
        src.events(task, "s2", 1, since=g2.next, types=None, tier="content")  # type: ignore[arg-type]
    assert len(inner.calls) == 2, "a replaced attempt was served from the buffer"
