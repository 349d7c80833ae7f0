"""Reading sources: sources → streams → engine → findings, on one thread per source.

One :class:`SourceWatcher` per source (an eval process's control socket, the
CLI, a log directory, a replay) runs its own thread, so a busy eval that stalls
its reads never delays the others. Each task in it has a :class:`TaskWatcher`
that finds samples through the listing's ``active_since`` delta, polls only the
samples that changed (plus a periodic resync), and hands each read to the sample's
:class:`~watcher.run.tracked.TrackedSample`, which feeds completed events to the engine
and ticks its clock-driven rules. Everything it produces goes to one
queue that the caller drains on its own thread (:mod:`watcher.run.router` decides
what it means), so reporters and the state file are only ever touched from one
place; each output comes off the queue with the :class:`Origin` it was read from.
"""

from __future__ import annotations

import contextlib
import math
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from watcher.discovery import ControlServer
from watcher.engine import Engine, RunContext
from watcher.findings import Notice
from watcher.run.spend import SpendMeter
from watcher.run.tracked import READ_ATTEMPTS, RowJudge, TrackedSample, row_end, sample_ref
from watcher.run.values import KEEP_ALIVE_GRACE, Origin, Output, RunOptions, TaskView
from watcher.sources.base import (
    BadResponse,
    ProcessGone,
    SampleListing,
    SampleRow,
    Source,
    SourceBusy,
    SourceError,
    TaskInfo,
)
from watcher.state import WatchState
from watcher.stream import SampleStream, StreamItem

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

# seconds between checks of the clock rules of a sample with nothing new (the built-in
# idle thresholds are a minute and more; a sample that was read is checked at once)
TICK_EVERY = 5.0

# seconds between hand-offs of outputs to the consumer while a cycle's reads are applied
# (the cycle hands over the rest when it ends)
FLUSH_EVERY = 0.1

# seconds a finished task whose samples were all read waits for a listing that shows
# their rows final (with the sample buffer the eval is listed every few seconds)
FINAL_ROWS_WAIT = 10.0

# seconds between refreshes of a live task's open findings (their count and spend grow
# between the snapshots the engine emits as news: see TaskWatcher.refresh_open)
REFRESH_EVERY = 5.0

# with a source that reports which samples moved (the sample buffer), list samples
# (ask the eval) at least this often, for status changes and attempts
LISTING_EVERY_WITH_BUFFER = 3.0

# buffer reads of a cycle made before any of them is applied, and the most events they
# may hold between them (see TaskWatcher._fetched)
READ_AHEAD = 128
READ_AHEAD_EVENTS = 2000


def _moved(prev: SampleRow, row: SampleRow, recent: float) -> bool:
    """Whether a row of a full listing shows anything since the previous listing."""
    active = row.raw.get("last_activity_at")
    return (row.status != prev.status or row.attempt != prev.attempt
            or row.raw.get("events") != prev.raw.get("events")
            or not isinstance(active, int | float) or active >= recent)


class TaskWatcher:
    """One task of one source: its listing, which of its samples are due, and the
    :class:`~watcher.run.tracked.TrackedSample` of each sample it reads."""

    def __init__(self, source: Source, task: TaskInfo, engine: Engine, opts: RunOptions,
                 state: WatchState, emit: Callable[[Output], None],
                 pool: ThreadPoolExecutor | None = None,
                 flush: Callable[[], None] = lambda: None) -> None:
        self.source = source
        self.pool = pool
        self.flush = flush  # hands what emit gathered to the consumer (Runner.add)
        self.task = task
        self.engine = engine
        self.opts = opts
        self.state = state
        self.emit = emit
        # the samples being read (each owns its stream, rule state, spend and clocks)
        self.samples: dict[tuple[str, int], TrackedSample] = {}
        # the listing: every row of the task seen, as last listed
        self.rows: dict[tuple[str, int], SampleRow] = {}
        # list everything on start: the state skips finished samples, running ones are
        # re-read so rule windows spanning a restart are rebuilt
        self.as_of: float | None = None
        # other samples of this task, so sample rules can tell task-wide from local errors
        self.context = RunContext(task=task.task)
        self._in_context: set[tuple[str, int]] = set()
        # judges the rows of samples without rule state of their own (RowJudge)
        self.judge = RowJudge(engine)
        self.full_listing_at = 0.0
        self.listed_at = 0.0
        self._listing: Future[tuple[SampleListing, float | None]] | None = None
        # its running samples' transcripts are read without asking the eval (the sample
        # buffer): then the source's requests to the eval need not hold up a cycle
        self.buffered = False
        self.task_failures = 0  # cycles in a row whose listing failed
        self.last_error: str | None = None  # why its last listing failed
        self.failed = False  # the task's log could not be read: given up
        self._final_wait: float | None = None  # since when rows_final has waited
        # what each sample attempt spent (its findings carry it: watcher/run/spend.py);
        # from its model events when the rules read them, else from the listing
        types = self.judge.event_types
        self.spend_from_events = types is None or "model" in types
        self.refreshed_at = 0.0  # open findings last refreshed (refresh_open)

    def recent_events(self, sample_id: str, epoch: int) -> list[dict[str, Any]]:
        """The sample's last events, oldest first (see
        :data:`~watcher.run.tracked.RECENT_FIELDS`)."""
        tracked = self.samples.get((sample_id, epoch))
        return tracked.recent_events() if tracked is not None else []

    def view(self) -> TaskView:
        """The task as a front end sees it, copied (callable from another thread: the
        reading thread only ever adds rows and samples)."""
        rows = dict(self.rows)
        return TaskView(task=self.task, finished=self.finished, rows=tuple(rows.values()),
                        samples=tuple(t.view(rows.get(k))
                                      for k, t in list(self.samples.items())))

    @property
    def read_to_end(self) -> bool:
        """Every sample it read has been read to its end (or given up)."""
        return all(t.stream.done for t in list(self.samples.values()))

    @property
    def retrying(self) -> bool:
        """Some sample's read failed and is still to be tried again."""
        return any(t.retrying for t in self.samples.values())

    @property
    def finished(self) -> bool:
        """The task is complete and every sample stream has drained (or it was given up)."""
        if self.failed:
            return True
        if not self.task.finished or self.as_of is None:
            return False
        if not self.read_to_end:
            return False
        return self.rows_final

    @property
    def rows_final(self) -> bool:
        """Every row of the finished task is terminal, or has had time to become so: a
        sample read to its end can still be listed as running until the next listing,
        and what is judged over the whole task (outliers) needs the final rows."""
        if all(r.terminal for r in self.rows.values()):
            return True
        if self._final_wait is None:
            self._final_wait = time.monotonic()
        return time.monotonic() - self._final_wait > FINAL_ROWS_WAIT

    def retarget(self, task: TaskInfo) -> None:
        """The task as listed anew (its counts, its status; or its log, once the process
        that ran it went away): what its samples read from and their findings name."""
        self.task = task
        for tracked in self.samples.values():
            tracked.task = task

    def notice(self, kind: str, message: str, **details: Any) -> None:
        """A notice about the whole task."""
        self.emit(Notice(kind=kind, message=message, sample=None, at=time.time(),
                         details=details))

    # -- one cycle -------------------------------------------------------------

    def cycle(self, now: float) -> None:
        """List what changed, poll what needs it, tick the clock rules."""
        # a source that sees transcripts grow without asking the eval (the sample
        # buffer) says which samples moved; the listing (a request the eval's busy
        # event loop must answer) is then needed only for new samples, and every few
        # seconds for status changes
        moved = self.source.moved_samples(self.task)
        self.buffered = moved is not None
        if moved is not None:
            match = self.opts.selector.sample_matches
            moved = {k for k in moved if match(*k) and self.opts.owns(*k)}
        if moved is None or self.as_of is None or self.pool is None:
            changed = self._list(now)
        else:
            # the listing runs beside the reads and applies when it has returned: a
            # busy eval answers it late, and buffer reads need not wait for it
            changed = set()
            listing = self._listing
            if listing is not None and listing.done():
                self._listing = None
                changed = self._apply_listing(*listing.result(), now)
            if self._listing is None and (not moved <= self.samples.keys()
                                          or now - self.listed_at >= LISTING_EVERY_WITH_BUFFER):
                self.listed_at = now
                since = self._since(now)
                self._listing = self.pool.submit(self._fetch_listing, since)
        if moved is not None:
            changed |= {k for k in moved if k in self.samples}
        due: list[TrackedSample] = []
        for key, tracked in list(self.samples.items()):
            stream = tracked.stream
            if stream.done:
                continue
            row = self.rows.get(key)
            if tracked.retry_at > now:
                continue  # its last read failed: wait before the next attempt
            if (key in changed or (row is not None and row.terminal) or self.opts.once
                    or stream.behind
                    or (now - tracked.last_polled >= self.opts.resync_every
                        and not self._unchanged_since_read(tracked, row))):
                due.append(tracked)
                if row is not None:
                    tracked.read_at_count = row.raw.get("events")
            else:
                stream.polls_without_change += 1
        # reads in parallel (each stream touched by one thread; the source caps requests
        # in flight); each result is evaluated on this thread as soon as it arrives: under
        # a busy eval a poll's reads can take many seconds, and a finding must not wait
        # for the slowest of them. A read that failed is that sample's alone: the others
        # are applied, and it is tried again later or given up (see READ_ATTEMPTS)
        gone: ProcessGone | None = None
        flushed = time.monotonic()
        live = self.source.live
        for tracked, result in self._fetched(due, now):
            if isinstance(result, ProcessGone):
                # the eval exited under this read (its stream is unchanged): not this
                # sample's failure; the process's exit hands the task over to its log
                gone = result
                continue
            if isinstance(result, SourceError):
                tracked.read_failed(result, now, live=live)
                continue
            tracked.apply(result, now)
            # this sample's findings now, not after the slowest read; but at most every
            # FLUSH_EVERY: each hand-off wakes the consumer thread, and one per sample
            # read was a tenth of the live watcher's CPU on real transcripts
            if time.monotonic() - flushed >= FLUSH_EVERY:
                self.flush()
                flushed = time.monotonic()
        if gone is not None:
            raise gone
        # clock rules (idle, windows that close without events) of a sample that was not
        # read this cycle are checked every TICK_EVERY seconds, not every cycle: 28 rule
        # states of 1,125 quiet samples each second were most of a fleet watch's CPU
        for tracked in self.samples.values():
            if not tracked.stream.done and (tracked.last_polled == now
                                            or now - tracked.ticked_at >= TICK_EVERY):
                tracked.tick(now)
        self.judge_whole_task()
        self.refresh_open(now)

    def judge_whole_task(self) -> None:
        """Once every sample of a finished task is known, judge what needs them all
        (outliers against the task's median), once; a log read after its run knows them
        all at its first listing, a live watch when the task ends (see RunContext)."""
        if self.context.complete or not self.task.finished or not self.rows or (
                not self.rows_final):
            return
        self.context.complete = True
        self.context.outliers_only = True
        try:
            for key, row in self.rows.items():
                if not self.opts.owns(*key):
                    continue
                tracked = self.samples.get(key)
                if tracked is not None and (tracked.unreadable or tracked.judge_row(row)):
                    continue
                # closed (or never tracked): judged with the task's spare watch (only
                # outlier rules answer), not a watch opened for each of 5,000 samples
                end = tracked.ended_at(row) if tracked is not None else row_end(row)
                found, late = self.judge.judge(
                    sample_ref(self.task, key[0], key[1], row.attempt), row.raw,
                    self.context, end)
                if not found or late is None:
                    continue
                # the sample is over: its finding ends when it did, not when judged
                found += late.finalize(end if end is not None else time.time())
                if tracked is not None:
                    tracked.findings(found)
                    continue
                meter = SpendMeter(self.spend_from_events)
                for f in found:
                    self.emit(meter.annotate(f))
                for err in self.engine.take_errors():
                    self.emit(err.notice(at=time.time()))
        finally:
            self.context.outliers_only = False

    def refresh_open(self, now: float, force: bool = False) -> None:
        """Open findings of a live task again, as they stand: how many times a loop went
        round by now (the engine's snapshots are only its news) and what its sample spent
        since. Every REFRESH_EVERY seconds, at the end of a ``--once`` pass, and when the
        watch stops (``force``); a log read to its end ends its findings instead."""
        if not self.source.live or not (force or self.opts.once
                                        or now - self.refreshed_at >= REFRESH_EVERY):
            return
        self.refreshed_at = now
        for tracked in list(self.samples.values()):
            tracked.refresh()

    def _list(self, now: float) -> set[tuple[str, int]]:
        """Read the samples listing; the keys of rows that changed."""
        since = self._since(now)
        self.listed_at = now
        return self._apply_listing(*self._fetch_listing(since), now)

    def _fetch_listing(self, since: float | None) -> tuple[SampleListing, float | None]:
        listing = self.source.samples(self.task, active_since=since)
        if listing.truncated:
            listing = self.source.samples(self.task, active_since=since, all_rows=True)
        return listing, since

    def _apply_listing(self, listing: SampleListing, since: float | None,
                       now: float) -> set[tuple[str, int]]:
        """Take in a listing's rows; the keys of rows that changed."""
        # a periodic full listing refreshes every row, but only rows that moved since the
        # last listing count as changed (else each resync would read every sample)
        recent = None if since is not None or self.as_of is None else self.as_of - 1.0
        changed: set[tuple[str, int]] = set()
        # every finished sample counts in the task context before any row is judged, so a
        # sample rule compares with the same siblings whatever the listing's order
        for row in listing.samples:
            if row.terminal and self.opts.selector.sample_matches(row.sample_id, row.epoch):
                self._count_in_context((row.sample_id, row.epoch), row)
        for row in listing.samples:
            key = (row.sample_id, row.epoch)
            if not self.opts.selector.sample_matches(*key):
                continue
            if row.status in ("pending", "queued") and key not in self.samples:
                continue
            prev = self.rows.get(key)
            self._keep_row(key, row)
            if recent is not None and prev is not None and not _moved(prev, row, recent):
                continue
            changed.add(key)
            self._on_row(key, row, now)
        self.as_of = listing.as_of
        return changed

    def _keep_row(self, key: tuple[str, int], row: SampleRow) -> None:
        self.rows[key] = row
        tracked = self.samples.get(key)
        if tracked is not None:
            tracked.row = row

    def _fetched(self, due: list[TrackedSample], now: float,
                 ) -> Iterator[tuple[TrackedSample, StreamItem | SourceError]]:
        """Each due sample with its read, in the order the reads complete."""
        def fetch(stream: SampleStream) -> StreamItem | SourceError:
            return _read(stream, self.source, now)

        if len(due) <= 1 or self.pool is None:
            for tracked in due:
                yield tracked, fetch(tracked.stream)
            return
        # what the source serves without waiting (the sample buffer) is read on this
        # thread, while the reads that wait on the eval run on the pool: handing each
        # read to a thread and back cost a fifth of the live watcher's CPU
        here: list[TrackedSample] = []
        there: list[TrackedSample] = []
        for tracked in due:
            row = self.rows.get(tracked.key)
            local = row is not None and not row.terminal and self.source.reads_in_process(
                self.task, tracked.sample_id, tracked.epoch, tracked.stream.resume_at)
            (here if local else there).append(tracked)
        futures = {self.pool.submit(fetch, tracked.stream): tracked for tracked in there}
        if here:
            # read a run of them, then handed over to be applied: the rules' working set
            # (their code, RE2's automata) stays warm through the applies instead of
            # being evicted by the reads between each (tool events cost the rules twice
            # as much live as post hoc, read one by one). A run ends at READ_AHEAD pages
            # or READ_AHEAD_EVENTS events, whichever comes first: what is held is bounded
            with self.source.read_batch(self.task):
                got: list[tuple[TrackedSample, StreamItem | SourceError]] = []
                held = 0
                for tracked in here:
                    result = fetch(tracked.stream)
                    got.append((tracked, result))
                    if isinstance(result, StreamItem):
                        held += len(result.events)
                    if len(got) >= READ_AHEAD or held >= READ_AHEAD_EVENTS:
                        yield from got
                        got, held = [], 0
                yield from got
        from concurrent.futures import as_completed

        for future in as_completed(futures):
            yield futures[future], future.result()

    def _since(self, now: float) -> float | None:
        # a small overlap: rows are state, not a stream, so seeing one twice is harmless.
        # Every resync period the whole listing is read (one request), so the event
        # counts of quiet samples are fresh when _unchanged_since_read consults them.
        if self.as_of is None or now - self.full_listing_at >= self.opts.resync_every:
            self.full_listing_at = now
            return None
        return self.as_of - 1.0

    @staticmethod
    def _unchanged_since_read(tracked: TrackedSample, row: SampleRow | None) -> bool:
        """The listing says the transcript has as many events as at our last read.

        A periodic resync exists for what the ``active_since`` delta could miss; the
        row's live event count answers that without a page read, which costs the
        eval's own event loop (300 samples resynced every 15 s were 20 reads/s).
        """
        if row is None or row.status != "running":
            return False
        count = row.raw.get("events")
        return count is not None and count == tracked.read_at_count

    def _count_in_context(self, key: tuple[str, int], row: SampleRow) -> None:
        """A finished sample counts once in the task context sample rules compare with."""
        if row.terminal and key not in self._in_context:
            self._in_context.add(key)
            self.context.add(row.raw)

    def _on_row(self, key: tuple[str, int], row: SampleRow, now: float) -> None:
        """A row that changed: counted in the task context, and its sample tracked (from
        its first row) unless another shard or an earlier run owns it."""
        if not self.opts.owns(*key):
            self._count_in_context(key, row)
            return
        tracked = self.samples.get(key)
        if tracked is None:
            if WatchState.sample_key(self.task.eval_id, *key) in self.state.finished:
                return
            tracked = self.samples[key] = TrackedSample(
                row, self.task, self.engine, self.context, self.opts, self.emit,
                self.spend_from_events, self.judge)
        # (a sample closed before this row was counted when it was: see TrackedSample)
        self._count_in_context(key, row)
        tracked.on_row(row, now)

    def read_rest_from_log(self, source: Source, task: TaskInfo) -> None:
        """The eval process went away: read what it had not served from the log it wrote.

        ``source`` reads that log and ``task`` is this task in it: from now on the task
        is read from there. Cursors are valid against the log (same nonce and offsets),
        so each open sample resumes where it was; a read that fails now is given up (the
        log is the last word), and the whole task is judged once its final rows are in.
        """
        self.source = source
        self.retarget(task)
        try:
            listing = source.samples(task)
        except SourceError:
            return
        if self.as_of is None:  # never listed live: every sample of the log, from the start
            self._apply_listing(listing, None, time.time())
        for row in listing.samples:
            key = (row.sample_id, row.epoch)
            if key in self.rows and row.terminal:  # the sample's last word
                self._keep_row(key, row)
            if key in self.samples and row.terminal:
                self._keep_row(key, row)
                self._on_row(key, row, time.time())
        for key, tracked in self.samples.items():
            stream = tracked.stream
            last = self.rows.get(key)
            if stream.done or last is None or not last.terminal:
                continue
            for _ in range(10_000):
                now = time.time()
                result = _read(stream, source, now)
                if isinstance(result, SourceError):
                    tracked.read_failed(result, now, live=source.live, final=True)
                else:
                    tracked.apply(result, now)
                if stream.done:
                    break
        self.judge_whole_task()

    def give_up_task(self, error: SourceError) -> None:
        """The task's log cannot be read (any more): say so once, end its samples."""
        self.failed = True
        where = self.task.log_location or self.task.task
        text = str(error) if where in str(error) else f"{where}: {error}"
        self.notice("unreadable", f"log could not be read: {text}", scope="log",
                    log=self.task.log_location, reason=str(error))
        self.finalize_all("its log could not be read")

    def finalize_all(self, reason: str) -> None:
        """The source is gone: end every open sample with a notice."""
        now = time.time()
        for tracked in self.samples.values():
            tracked.abandon(reason, now)


def _read(stream: SampleStream, source: Source, now: float) -> StreamItem | SourceError:
    """One poll of a stream; a failure as a value.

    Anything the source or the event normalisation raises on hostile input (a
    ``RecursionError`` from arguments nested 900 deep, a ``ValueError`` from a
    5,000-digit integer) is that sample's read failing, not the watch's: it must not
    end the reader thread, which would lose every other sample and log.
    """
    try:
        return stream.poll(source, now)
    except SourceError as e:
        return e
    except Exception as e:  # noqa: BLE001 - hostile input, see above
        stream.behind = False
        return BadResponse(f"{type(e).__name__}: {e}")


class SourceWatcher:
    """All tasks of one source, polled on one thread."""

    def __init__(self, source: Source, engine: Engine, opts: RunOptions, state: WatchState,
                 emit: Callable[[Output], None], label: str,
                 flush: Callable[[], None] = lambda: None) -> None:
        self.source = source
        self.engine = engine
        self.opts = opts
        self.state = state
        self.emit = emit
        self.flush = flush  # hands what emit gathered to the consumer
        self.label = label
        self.tasks: dict[str, TaskWatcher] = {}
        # page reads in flight per source (HttpSource caps them again per process); a
        # source whose reads are CPU work in this process (local logs) says 1: threads
        # would only take turns at the GIL
        reads = source.parallel_reads
        if reads > 1:
            # (imported here: with logging, 3 ms of starting a watch of local logs)
            from concurrent.futures import ThreadPoolExecutor
        self.pool = (ThreadPoolExecutor(max_workers=reads, thread_name_prefix=f"read-{label}")
                     if reads > 1 else None)
        self.gone = False
        self.finished = False
        self.failed: str | None = None  # the reader stopped on an internal error
        self.cycles = 0
        self.behind = False
        self._all_done_since: float | None = None
        self.last_poll_at: float | None = None
        self._failures = 0
        self.reached = False  # the source answered at least once
        self.last_error: str | None = None  # the last failure of a whole cycle
        self._infos: list[TaskInfo] | None = None
        self._infos_next: Future[list[TaskInfo]] | None = None
        self._busy = 0  # task lists in a row that got no answer in time

    def _task_infos(self) -> list[TaskInfo]:
        """The source's tasks, as of this cycle or the one before.

        Asking for them is a request the eval's event loop answers, late when hundreds
        of agents keep it busy (a second and more). Once every task's running samples
        are read from the sample buffer, the cycle's reads of them do not wait for the
        eval, so neither does the task list: the request runs beside the cycle and its
        answer is used by the next one (a finding must not wait a second for a list
        that rarely changes). The source's errors (the process gone, a refused
        connection) surface one cycle later, the same way.
        """
        if self._infos is None:
            # the first answer: nothing of the eval can be read before it, so a busy eval
            # is given the whole request time for it, not one read timeout then another
            # request at the back of its queue (500 samples on 2 cores: never answered)
            first = getattr(self.source, "tasks_patiently", self.source.tasks)
            self._infos = first()
            return self._infos
        if (self.pool is None or not self.tasks
                or not all(t.buffered for t in self.tasks.values() if not t.finished)):
            self._infos_next = None
            try:
                self._infos = self.source.tasks()
            except SourceBusy as e:
                # slow, not gone: the tasks it had go on being read (they rarely change),
                # and the notice says the list is not current
                self._busy_tasks(e)
            return self._infos
        pending = self._infos_next
        if pending is not None and pending.done():
            self._infos_next = None
            try:
                self._infos = pending.result()  # re-raises the source's error
            except SourceBusy as e:
                self._busy_tasks(e)  # slow, not gone: the known tasks are read on
        if self._infos_next is None:
            self._infos_next = self.pool.submit(self.source.tasks)
        return self._infos

    def _busy_tasks(self, e: SourceBusy) -> None:
        self._busy += 1
        if self._busy in (1, 5) or self._busy % 30 == 0:
            self.emit(Notice(kind="source_error", at=time.time(),
                             message=f"{self.label}: {e} (attempt {self._busy}); its tasks "
                                     "as last listed are read on, but a task it started "
                                     "since is not read until it answers",
                             details={"transient": True}))

    def cycle(self) -> None:
        """One pass over the source; never raises for source faults."""
        now = time.time()
        try:
            infos = self._task_infos()
            self.reached = True
            failure: SourceError | None = None
            for info in infos:
                if not self.opts.selector.task_matches(info):
                    continue
                tw = self.tasks.get(info.eval_id)
                if tw is None:
                    tw = TaskWatcher(self.source, info, self.engine, self.opts, self.state,
                                     self.emit, self.pool, flush=self.flush)
                    self.tasks[info.eval_id] = tw
                else:
                    tw.retarget(info)
                if tw.finished:
                    tw.judge_whole_task()  # its last cycle may have had all it needs
                if not tw.finished:
                    try:
                        tw.cycle(now)
                        tw.task_failures = 0
                    except ProcessGone:
                        raise
                    except SourceError as e:  # this task's alone: the others go on
                        tw.task_failures += 1
                        tw.last_error = str(e)
                        if not self.source.live and not e.transient and (
                                self.opts.once or tw.task_failures >= READ_ATTEMPTS):
                            tw.give_up_task(e)  # a file that cannot be read: said, counted
                        else:
                            failure = failure or e
            self._pop_notices(now)
            if failure is not None:
                raise failure
            self._failures = 0
        except ProcessGone as e:
            self._gone(str(e))
            return
        except SourceError as e:
            self._failures += 1
            self.last_error = str(e)
            if self._failures in (1, 5) or self._failures % 30 == 0:
                unread = ""
                if self.source.live and not self.reached:
                    unread = "; nothing of this eval is read until it answers its task list"
                elif self.source.live:
                    unread = ("; the samples it has not listed yet are not read until it "
                              "answers (those already read go on)")
                self.emit(Notice(kind="source_error", at=now,
                                 message=f"{self.label}: {e} (attempt {self._failures})"
                                         f"{unread}",
                                 details={"transient": e.transient}))
        self.cycles += 1
        self.last_poll_at = now
        behind = self.behind = any(
            s.stream.behind for t in self.tasks.values() for s in t.samples.values())
        all_done = bool(self.tasks) and all(t.finished for t in self.tasks.values())
        retrying = any(t.retrying for t in self.tasks.values())
        if (self.opts.once and not behind and not retrying) or (
                all_done and self._quiet_for(now)):
            self.finished = True
        if not all_done:
            self._all_done_since = None

    def _pop_notices(self, now: float) -> None:
        """What a source noticed about its own input: a log it could not read, a log's
        unresolvable attachment references (rules read those events without their
        text), a sample buffer turned off."""
        for n in self.source.pop_notices():
            self.emit(Notice(kind=n.kind, message=n.message, at=now, details=dict(n.details)))

    def _quiet_for(self, now: float) -> bool:
        """Every task is done: is this source finished, or may more tasks come?

        A live eval process can start another task after the last one ended (an eval
        set running tasks in turn, a retry); it exits when its work is over, which
        reads as "process gone". Only a process kept alive (``--ctl-server keep``)
        idles; it counts as finished after ``KEEP_ALIVE_GRACE`` seconds without new
        work. Logs and replays hold no more tasks than they show.
        """
        if not self.source.live:
            return True
        if self._all_done_since is None:
            self._all_done_since = now
        keep_alive = any(t.task.raw.get("keep_alive") for t in self.tasks.values())
        grace = min(KEEP_ALIVE_GRACE, self.opts.exit_grace) if keep_alive else self.opts.exit_grace
        return now - self._all_done_since >= grace

    def _gone(self, reason: str) -> None:
        """The process went away: finish its samples from the log it wrote, if it did.

        An eval process exits as soon as its eval ends, often before our last
        poll; a killed one may leave a partial log. Cursors are valid against the
        log (same nonce and offsets), so each open stream resumes there; what the
        log does not have is reported, never silently dropped.
        """
        self.gone = True
        if not self.reached:  # not one answer: nothing was read, and nothing lost here
            self.emit(Notice(kind="process_gone", at=time.time(),
                             message=f"{self.label}: eval process could not be reached "
                                     f"({reason}); nothing was read from it (its log, if "
                                     "it wrote one: watch --log-dir DIR --once)",
                             details={"reached": False}))
            return
        abandoned = 0
        for tw in self.tasks.values():
            # also when every stream is done: the last listing may be seconds old (a
            # sample buffer's reader lists every few seconds), and the log holds each
            # sample's last state, which the final status shows; a task whose samples
            # were never listed is read from its log whole
            stale = any(not r.terminal for r in tw.rows.values()) or tw.as_of is None
            if tw.task.log_location and (stale or not tw.read_to_end):
                self._drain_from_log(tw)
            abandoned += sum(not s.stream.done for s in tw.samples.values())
            tw.finalize_all("the eval process went away before the sample finished "
                            "and its log does not hold the rest")
        unread = self._say_unread()
        if abandoned:
            self.emit(Notice(kind="process_gone", at=time.time(),
                             message=f"{self.label}: eval process is gone ({reason}); "
                                     f"{abandoned} sample(s) could not be read to the end",
                             details={"abandoned": abandoned}))
        elif not unread:
            self.emit(Notice(kind="process_exited", at=time.time(),
                             message=f"{self.label}: eval process exited; every sample was "
                                     "read to its end"))

    def _drain_from_log(self, tw: TaskWatcher) -> None:
        from watcher.sources.logfiles import LogSource

        location = str(tw.task.log_location)
        try:
            source = LogSource(location)
            tasks = [t for t in source.tasks() if t.eval_id == tw.task.eval_id]
        except SourceError:
            return
        if not tasks:
            return
        # the log as the control channel named it (the reader's listing names it as a
        # file:// URL): the findings of one sample name one log
        tw.read_rest_from_log(source, replace(tasks[0], log_location=tw.task.log_location))

    def _say_unread(self) -> bool:
        """What of a reached source was never read, as ``unreadable`` notices (they make
        the exit code 3): a source whose task list never answered, a task whose samples
        could never be listed. Without them a watch that read nothing of an eval it
        found ended as a clean one (and ``--once --fail-on high`` passed). Whether it
        said anything."""
        now = time.time()
        if not self.source.live:
            return False  # logs and replays: said as they are listed and read
        if not self.reached:
            if self.gone or self.last_error is None:
                return False  # gone before one answer: process_gone says it
            self.emit(Notice(kind="unreadable", at=now,
                             message=f"{self.label}: its task list could not be read "
                                     f"({self.last_error}); nothing was read from it",
                             details={"scope": "source", "reason": self.last_error}))
            return True
        said = False
        for tw in self.tasks.values():
            # (a task met in a watch stopped before its first listing returned was not
            # failed to be read; one whose process went away first, and whose log could
            # not be read instead, was)
            reason = tw.last_error or ("the eval process went away first" if self.gone
                                       else None)
            if tw.as_of is not None or tw.failed or reason is None:
                continue
            said = True
            tw.notice("unreadable", f"{self.label}: task {tw.task.task} (eval "
                      f"{tw.task.eval_id}): its samples could not be listed "
                      f"({reason}); none of them was read", scope="task",
                      reason=reason, log=tw.task.log_location)
        return said

    def run(self, stop: threading.Event) -> None:
        """Poll until finished, gone or stopped."""
        try:
            while not stop.is_set() and not self.gone and not self.finished:
                started = time.monotonic()
                self.cycle()
                self.flush()
                if self.finished or self.gone:
                    break
                if not self.behind:  # a backlog is read at once, not one budget per poll
                    stop.wait(max(0.0, self.opts.poll - (time.monotonic() - started)))
            if not self.gone:  # (a process that went away said it already)
                self._say_unread()
        except Exception as e:  # noqa: BLE001 - a bug must not end the watch as a clean one
            self.failed = f"{type(e).__name__}: {e}"
            self.emit(Notice(kind="unreadable", at=time.time(),
                             message=f"{self.label}: reading stopped on an internal error "
                                     f"({self.failed}); what it had not read is missing",
                             details={"scope": "source", "reason": self.failed}))
            for tw in self.tasks.values():
                with contextlib.suppress(Exception):  # already reported above
                    tw.finalize_all("reading stopped on an internal error")
        finally:
            if stop.is_set() and not self.failed:  # stopped: open findings as they stand
                now = time.time()
                for tw in list(self.tasks.values()):
                    with contextlib.suppress(Exception):  # the stop must not fail on it
                        tw.refresh_open(now, force=True)
            self.flush()
            if self.pool is not None:
                self.pool.shutdown(wait=False)
            self.source.close()


class Runner:
    """Starts source watchers, gathers their output on one queue."""

    def __init__(self, engine: Engine, opts: RunOptions, state: WatchState) -> None:
        self.engine = engine
        self.opts = opts
        self.state = state
        self.queue: queue.Queue[tuple[str, list[Output]]] = queue.Queue()
        self.stop = threading.Event()
        self.watchers: dict[str, SourceWatcher] = {}
        self.threads: dict[str, threading.Thread] = {}
        self.origins: dict[str, Origin] = {}
        # keys whose watcher has returned: the consumer learns it from the queue (an
        # empty batch after the last), not by polling ``is_alive`` on a timeout, which
        # kept every ``--once`` scan waiting 0.2 s after its last sample
        self.done: set[str] = set()

    def add(self, key: str, source: Source, label: str, *, once: bool = False,
            server: ControlServer | None = None, forever: bool = False) -> SourceWatcher:
        """Watch ``source`` on its own thread (``once``: read what it holds, then stop,
        whatever the watch's own options; ``forever``: a live source whose tasks are all
        done is still read, for tasks to come: a log directory followed)."""
        opts = replace(self.opts, once=True) if once else self.opts
        if forever:
            opts = replace(opts, exit_grace=math.inf)

        # a source watcher's outputs are handed over in batches (one per sample read, and
        # at the end of each cycle): a queue put per output woke the consumer thread for
        # each, and that hand-off was a sixth of the live watcher's CPU on real transcripts
        pending: list[Output] = []

        def flush() -> None:
            if pending:
                batch = pending.copy()
                pending.clear()
                self.queue.put((key, batch))

        sw = SourceWatcher(source, self.engine, opts, self.state, pending.append, label,
                           flush=flush)
        self.watchers[key] = sw
        self.done.discard(key)
        self.origins[key] = Origin(key, label, source, server)

        def run() -> None:
            try:
                sw.run(self.stop)
            finally:
                if self.watchers.get(key) is sw:  # (not a watcher since put in its place)
                    self.done.add(key)
                self.queue.put((key, []))  # wakes the consumer: nothing more comes from key

        thread = threading.Thread(target=run, name=f"watch-{key}", daemon=True)
        self.threads[key] = thread
        thread.start()
        return sw

    def views(self) -> list[TaskView]:
        """Every watched task as a front end sees it (callable from any thread)."""
        return [tw.view() for sw in list(self.watchers.values())
                for tw in list(sw.tasks.values())]

    def active(self) -> bool:
        """Whether a source watcher is still reading (one whose ``run`` has returned is
        not, whether or not its thread has quite ended)."""
        return any(key not in self.done for key in self.threads)

    def drain(self, timeout: float = 0.2) -> Iterator[Output]:
        """Outputs produced so far (waits up to ``timeout`` for the first)."""
        for _, item in self.drain_from(timeout):
            yield item

    def drain_from(self, timeout: float = 0.2) -> Iterator[tuple[Origin, Output]]:
        """:meth:`drain`, each output with where it was read."""
        try:
            key, batch = self.queue.get(timeout=timeout)
        except queue.Empty:
            return
        while True:
            origin = self.origins[key]
            for item in batch:
                yield origin, item
            try:
                key, batch = self.queue.get_nowait()
            except queue.Empty:
                return

    def shutdown(self, timeout: float = 10.0) -> None:
        self.stop.set()
        for thread in self.threads.values():
            thread.join(timeout)
