"""What is judged over a whole task (outliers against its median) is judged once every
sample has finished, live as post-hoc: a median over the samples seen so far would make
a live finding depend on when the watch looked."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from watcher.app import WatchOptions, load_engine
from watcher.engine import Engine, RunContext
from watcher.engine.runtime import SampleWatch
from watcher.findings import Finding, SampleRef
from watcher.run.runner import TaskWatcher
from watcher.run.tracked import RowJudge, TrackedSample
from watcher.run.values import RunOptions
from watcher.sources.base import (
    EventPage,
    SampleListing,
    SampleRow,
    Source,
    TaskInfo,
    encode_cursor,
)
from watcher.state import WatchState
from watcher.stream import StreamItem

TOKENS = {"s1": 100, "s2": 120, "s3": 110, "s4": 90, "s5": 105, "s6": 2000}


class Rows(Source):
    """A listing whose rows finish one by one (``done``); every sample has no events."""

    name = "fake"
    live = True

    def __init__(self) -> None:
        self.done: set[str] = set()
        self.quiet = False  # nothing changes: a listing of what moved since is empty

    def tasks(self) -> list[TaskInfo]:
        return []

    def samples(self, task: TaskInfo, active_since: float | None = None,
                all_rows: bool = False) -> SampleListing:
        rows = []
        if self.quiet and active_since is not None:
            return SampleListing(as_of=2.0, samples=rows)
        for sid, tokens in TOKENS.items():
            status = "completed" if sid in self.done else "running"
            rows.append(SampleRow(sample_id=sid, epoch=1, status=status, raw={
                "sample_id": sid, "epoch": 1, "status": status, "total_tokens": tokens}))
        return SampleListing(as_of=1.0, samples=rows)

    def events(self, task: TaskInfo, sample_id: str, epoch: int, *, since: str | None,
               types: frozenset[str] | None, tier: str, limit: int = 500) -> EventPage:
        return EventPage(events=[], next=encode_cursor("n", 0),
                         done=sample_id in self.done)

    def close(self) -> None:
        pass


def _outliers(out: list[Any]) -> list[tuple[str, str]]:
    return [(f.sample.sample_id, f.status) for f in out
            if isinstance(f, Finding) and f.rule == "token-outlier"]


def test_outliers_wait_for_the_whole_task_and_are_judged_once() -> None:
    src = Rows()
    task = TaskInfo(eval_id="e", task="t", task_id="t", model="m")
    out: list[Any] = []
    with ThreadPoolExecutor(2) as pool:
        tw = TaskWatcher(src, task, load_engine(WatchOptions()), RunOptions(),
                         WatchState(), out.append, pool)
        # s6 finishes first, huge; live, its siblings' totals are not known yet
        src.done = {"s6"}
        tw.cycle(100.0)
        src.done = set(TOKENS)  # all finished, the task not yet
        tw.cycle(101.0)
        assert _outliers(out) == []
        assert tw.samples[("s6", 1)].watch is None, "s6 was read to its end and closed"
        tw.retarget(TaskInfo(eval_id="e", task="t", task_id="t", model="m",
                             status="success"))
        tw.cycle(102.0)
        tw.cycle(103.0)
    assert [sid for sid, _ in _outliers(out)] == ["s6", "s6"]  # open, then ended
    (f,) = [f for f in out if isinstance(f, Finding) and f.rule == "token-outlier"
            and f.status == "open"]
    assert f.evidence.facts["compared_with"] == 6 and f.evidence.facts["median"] == 107.5


def test_quiet_samples_clock_rules_are_checked_every_few_seconds() -> None:
    """A fleet of quiet samples is not re-checked every cycle (28 rule states each): a
    sample that was read is checked at once, the others every TICK_EVERY seconds."""
    from watcher.run.runner import TICK_EVERY

    src = Rows()
    task = TaskInfo(eval_id="e", task="t", task_id="t", model="m")
    ticks: list[tuple[str, float]] = []
    with ThreadPoolExecutor(2) as pool:
        tw = TaskWatcher(src, task, load_engine(WatchOptions()), RunOptions(),
                         WatchState(), lambda out: None, pool)
        tw.cycle(100.0)  # lists and reads every sample: each is checked
        src.quiet = True
        for tracked in tw.samples.values():
            def tick(now: float, tracked: Any = tracked, real: Any = tracked.tick) -> None:
                ticks.append((tracked.sample_id, now))
                real(now)

            tracked.tick = tick  # type: ignore[method-assign]
        for step in range(1, int(TICK_EVERY) + 1):
            tw.cycle(100.0 + step)
    assert {now for _, now in ticks} == {100.0 + TICK_EVERY}
    assert sorted(sid for sid, _ in ticks) == sorted(TOKENS)


class CountingEngine(Engine):
    """The built-in rules, counting the sample watches opened."""

    opened = 0

    def open_sample(self, ref: SampleRef) -> SampleWatch:
        self.opened += 1
        return super().open_sample(ref)


def _counting_engine() -> CountingEngine:
    return CountingEngine(load_engine(WatchOptions()).rules)


def _row(sid: str, **raw: Any) -> SampleRow:
    raw = {"sample_id": sid, "epoch": 1, "status": "completed", "total_tokens": 100,
           "completed_at": 1000.0, **raw}
    return SampleRow(sample_id=sid, epoch=1, status="completed", raw=raw)


def _tracked(engine: Engine, row: SampleRow, out: list[Any],
             judge: RowJudge | None = None) -> TrackedSample:
    task = TaskInfo(eval_id="e", task="t", task_id="t", model="m")
    tracked = TrackedSample(row, task, engine, RunContext(task="t"), RunOptions(once=True),
                            out.append, True, judge)
    tracked.on_row(row, 1000.0)
    return tracked


def _found(out: list[Any]) -> list[tuple[str, str]]:
    return [(f.rule, f.status) for f in out if isinstance(f, Finding)]


def test_a_listed_sample_holds_no_rule_state_until_its_events_are_read() -> None:
    """5,000 listed samples held 5,000 watches until each was read: a sample's watch is
    opened by its first events and dropped when it is done; its row, judged at listing
    with the task's spare watch, says the same."""
    engine = _counting_engine()
    out: list[Any] = []
    judge = RowJudge(engine)
    quiet = [_tracked(engine, _row(f"s{i}"), out, judge) for i in range(5)]
    assert [t.watch for t in quiet] == [None] * 5
    assert engine.opened == 1  # the task's spare, lent to every row in turn
    assert out == []
    quiet[0].apply(StreamItem(events=[{"type": "info", "timestamp": 1.0, "data": "x"}],
                              done=True), 1001.0)
    assert quiet[0].closed and quiet[0].watch is None, "read to its end: dropped"
    assert engine.opened == 2


def test_a_row_that_opens_an_episode_keeps_its_watch_to_the_end() -> None:
    """A row finding is an open episode: the watch that judged it becomes the sample's,
    and ends it when the sample is done, as a watch opened at listing did."""
    engine = _counting_engine()
    out: list[Any] = []
    judge = RowJudge(engine)
    limited = _tracked(engine, _row("s1", limit="token"), out, judge)
    assert limited.watch is not None
    assert _found(out) == [("limit-row", "open")]
    after = _tracked(engine, _row("s2"), out, judge)  # a new spare, not s1's watch
    assert after.watch is None and engine.opened == 2
    limited.apply(StreamItem(events=[], done=True), 1001.0)
    assert _found(out) == [("limit-row", "open"), ("limit-row", "ended")]
    assert limited.watch is None


def test_the_whole_task_pass_opens_no_watch_per_sample() -> None:
    """The outlier pass over a finished task judged each closed sample with a watch of
    its own; the task's spare judges those that say nothing."""
    src = Rows()
    src.done = set(TOKENS)
    engine = _counting_engine()
    out: list[Any] = []
    task = TaskInfo(eval_id="e", task="t", task_id="t", model="m", status="success")
    tw = TaskWatcher(src, task, engine, RunOptions(once=True), WatchState(), out.append)
    tw.cycle(100.0)
    assert all(t.closed for t in tw.samples.values())
    # each sample's own watch (read, then closed) and the spare, which s6's finding (the
    # last row) kept; a watch a sample was 12
    assert engine.opened == len(TOKENS) + 1
    assert _outliers(out) == [("s6", "open"), ("s6", "ended")]


class TimedRows(Rows):
    """Each sample has one event, at ``EVENT_AT``; rows say when they ended only with
    ``completed``."""

    EVENT_AT = 1_700_000_000.0

    def __init__(self, completed: float | None) -> None:
        super().__init__()
        self.completed = completed

    def samples(self, task: TaskInfo, active_since: float | None = None,
                all_rows: bool = False) -> SampleListing:
        listing = super().samples(task, active_since, all_rows)
        if self.completed is not None:
            for row in listing.samples:
                row.raw["completed_at"] = self.completed
        return listing

    def events(self, task: TaskInfo, sample_id: str, epoch: int, *, since: str | None,
               types: frozenset[str] | None, tier: str, limit: int = 500) -> EventPage:
        if since is not None:
            return EventPage(events=[], next=since, done=True)
        ev = {"type": "model", "event": "model", "uuid": f"m-{sample_id}", "pending": False,
              "timestamp": self.EVENT_AT, "model": "m", "output": {"completion": "hi"}}
        return EventPage(events=[ev], next=encode_cursor("n", 1), done=True)


def test_a_finished_samples_outlier_is_dated_at_its_end_not_at_the_scan() -> None:
    """A post-hoc scan dated an outlier (open and ended) at the scan's wall clock: by the
    row's end when it says, else by the sample's last event (older logs' rows say none)."""
    for completed, want in ((None, TimedRows.EVENT_AT), (1_700_000_500.0, 1_700_000_500.0)):
        src = TimedRows(completed)
        src.done = set(TOKENS)
        out: list[Any] = []
        task = TaskInfo(eval_id="e", task="t", task_id="t", model="m", status="success")
        tw = TaskWatcher(src, task, load_engine(WatchOptions()), RunOptions(once=True),
                         WatchState(), out.append)
        tw.cycle(100.0)
        found = [f for f in out if isinstance(f, Finding) and f.rule == "token-outlier"]
        assert [f.status for f in found] == ["open", "ended"]
        assert {(f.first_seen, f.last_seen) for f in found} == {(want, want)}
