"""Reading sources: sources → streams → engine → findings, on one thread per source.

One :class:`SourceWatcher` per source (an eval process's control socket, the
CLI, a log directory, a replay) runs its own thread, so a busy eval that stalls
its reads never delays the others. Each task in it has a :class:`TaskWatcher`
that finds samples through the listing's ``active_since`` delta, polls only the
samples that changed (plus a periodic resync), feeds completed events to the
engine and ticks the clock-driven rules. Everything it produces goes to one
queue that the caller drains on its own thread (:mod:`watcher.run.router` decides
what it means), so reporters and the state file are only ever touched from one
place; each output comes off the queue with the :class:`Origin` it was read from.
"""

from __future__ import annotations

import contextlib
import math
import os
import queue
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from typing import Any

from watcher.discovery import ControlServer
from watcher.engine import Engine, RunContext, SampleStatus
from watcher.findings import Finding, Notice, SampleRef
from watcher.run.spend import SpendMeter
from watcher.sources.base import (
    BadResponse,
    LimitExceeded,
    NotFound,
    ProcessGone,
    SampleListing,
    SampleRow,
    Source,
    SourceBusy,
    SourceError,
    TaskInfo,
)
from watcher.state import SampleDone, WatchState
from watcher.stream import SampleStream, StreamItem

Output = Finding | Notice | SampleDone

# How long a live source whose tasks are all done is kept: a kept-alive process idles
# (it may be given more work, but a watch without --follow should end); a normal one
# exits by itself shortly after its last task, and may start another task before that.
KEEP_ALIVE_GRACE = 5.0
PROCESS_EXIT_GRACE = 60.0


@dataclass
class Selector:
    """Which tasks and samples to watch (``watch [TASK [SAMPLE_ID [EPOCH]]]``), and, with
    ``log_root`` (``--evals-from DIR``), only evals whose log is written under it."""

    task: str | None = None
    sample_id: str | None = None
    epoch: int | None = None
    log_root: str | None = None

    def task_matches(self, t: TaskInfo) -> bool:
        """Task id (or eval id) prefix, or exact task name, as ``inspect ctl`` matches;
        and its log under ``log_root``, if one is given."""
        if self.log_root is not None and not under(t.log_location, self.log_root):
            return False
        if not self.task:
            return True
        return (t.task == self.task or t.task_id.startswith(self.task)
                or t.eval_id.startswith(self.task))

    @property
    def scoped(self) -> bool:
        """Narrowed to some evals (a task, or a log directory), not every one found."""
        return bool(self.task) or self.log_root is not None

    def sample_matches(self, sample_id: str, epoch: int) -> bool:
        if self.sample_id is not None and sample_id != self.sample_id:
            return False
        return self.epoch is None or epoch == self.epoch


def under(location: str | None, root: str) -> bool:
    """Whether the log ``location`` is in the directory ``root`` (below it, any depth):
    local paths compared resolved (symlinks, ``..``), URLs by their text."""
    if not location:
        return False
    local = location.removeprefix("file://")
    base = root.removeprefix("file://")
    if "://" in local or "://" in base:
        return "://" in local and "://" in base and local.startswith(base.rstrip("/") + "/")
    real, top = os.path.realpath(local), os.path.realpath(os.path.expanduser(base))
    return real.startswith(top.rstrip(os.sep) + os.sep)


@dataclass
class RunOptions:
    poll: float = 1.0
    once: bool = False
    page_limit: int = 500
    resync_every: float = 15.0
    selector: Selector = field(default_factory=Selector)
    # seconds a live process whose tasks are all done is still watched for new tasks
    exit_grace: float = PROCESS_EXIT_GRACE
    # (k, n): read only the samples of shard k of n (a parallel post-hoc worker); the
    # others still count in the task context, so sample rules judge them all alike
    shard: tuple[int, int] | None = None
    # the last this many events of each sample are kept, shortened (RECENT_FIELDS), for a
    # front end to show (:meth:`TaskWatcher.recent_events`); 0: none
    recent_events: int = 0

    def owns(self, sample_id: str, epoch: int) -> bool:
        if self.shard is None:
            return True
        k, n = self.shard
        return zlib.crc32(f"{sample_id}:{epoch}".encode()) % n == k


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

# A sample whose events cannot be read is tried again after a pause that doubles (up to
# RETRY_CAP seconds), and given up (an ``unreadable`` notice; the watch goes on) after
# READ_ATTEMPTS failed polls once nothing more can come: its row is final, the source is
# a file, or the watch is a --once. A running live sample is tried for as long as it runs.
# Logs and recordings do not change between two polls of one --once: one failure is final.
READ_ATTEMPTS = 3
RETRY_CAP = 30.0
# a finished sample that the eval does not find (404) is usually between the eval's
# memory and its log (flushed in batches under load): it is looked for this many times
NOT_FOUND_ATTEMPTS = 5


# what a kept recent event holds (text cut to RECENT_TEXT characters): enough for a person
# to see what a sample did last, not a copy of its transcript
RECENT_FIELDS = ("type", "timestamp", "attempt", "function", "model", "tokens", "has_error",
                 "stop_reason", "completion", "arguments", "result", "error", "data")
RECENT_TEXT = 300


def recent_copy(event: dict[str, Any]) -> dict[str, Any]:
    """An event shortened for :attr:`TaskWatcher.recent` (text fields stay agent text:
    the front end sanitises them)."""
    out: dict[str, Any] = {}
    for k in RECENT_FIELDS:
        v = event.get(k)
        if v is None:
            continue
        out[k] = v[:RECENT_TEXT] if isinstance(v, str) else v
    return out


def row_end(row: SampleRow) -> float | None:
    """When a finished sample ended, from its row (``completed_at``, else ``started_at``
    plus ``total_time``); ``None`` for a running one or a row that does not say."""
    if not row.terminal:
        return None
    raw = row.raw
    end = raw.get("completed_at")
    if isinstance(end, int | float) and not isinstance(end, bool) and end > 0:
        return float(end)
    start, took = raw.get("started_at"), raw.get("total_time")
    if (isinstance(start, int | float) and isinstance(took, int | float)
            and not isinstance(start, bool) and not isinstance(took, bool) and start > 0):
        return float(start) + float(took)
    return None


def _moved(prev: SampleRow, row: SampleRow, recent: float) -> bool:
    """Whether a row of a full listing shows anything since the previous listing."""
    active = row.raw.get("last_activity_at")
    return (row.status != prev.status or row.attempt != prev.attempt
            or row.raw.get("events") != prev.raw.get("events")
            or not isinstance(active, int | float) or active >= recent)


class TaskWatcher:
    """One task of one source: its samples' streams and rule state."""

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
        self.streams: dict[tuple[str, int], SampleStream] = {}
        self.watches: dict[tuple[str, int], Any] = {}
        self.rows: dict[tuple[str, int], SampleRow] = {}
        self.last_polled: dict[tuple[str, int], float] = {}
        self.ticked_at: dict[tuple[str, int], float] = {}  # clock rules last checked
        # list everything on start: the state skips finished samples, running ones are
        # re-read so rule windows spanning a restart are rebuilt
        self.as_of: float | None = None
        # other samples of this task, so sample rules can tell task-wide from local errors
        self.context = RunContext(task=task.task)
        self._in_context: set[tuple[str, int]] = set()
        # the listing's live event count when each sample was last read
        self.read_at_count: dict[tuple[str, int], Any] = {}
        self.full_listing_at = 0.0
        self.listed_at = 0.0
        self._listing: Future[tuple[SampleListing, float | None]] | None = None
        # its running samples' transcripts are read without asking the eval (the sample
        # buffer): then the source's requests to the eval need not hold up a cycle
        self.buffered = False
        # samples whose last reads failed: how many in a row, and when to try again
        self.read_failures: dict[tuple[str, int], int] = {}
        self.retry_at: dict[tuple[str, int], float] = {}
        self.unreadable: set[tuple[str, int]] = set()  # given up on: reported, counted
        self.task_failures = 0  # cycles in a row whose listing failed
        self.last_error: str | None = None  # why its last listing failed
        self.failed = False  # the task's log could not be read: given up
        self._final_wait: float | None = None  # since when rows_final has waited
        # each sample's last events, shortened (opts.recent_events; read by front ends
        # from another thread: a deque's copy is atomic)
        self.recent: dict[tuple[str, int], deque[dict[str, Any]]] = {}
        # what each sample attempt spent (its findings carry it: watcher/run/spend.py);
        # from its model events when the rules read them, else from the listing
        types = engine.event_types
        self.spend_from_events = types is None or "model" in types
        self.meters: dict[tuple[str, int], SpendMeter] = {}
        # finished rows that do not say when their sample ended: judged at its end
        self.deferred_rows: dict[tuple[str, int], SampleRow] = {}
        self.refreshed_at = 0.0  # open findings last refreshed (refresh_open)

    def recent_events(self, sample_id: str, epoch: int) -> list[dict[str, Any]]:
        """The sample's last events, oldest first (see :data:`RECENT_FIELDS`)."""
        kept = self.recent.get((sample_id, epoch))
        return list(kept) if kept is not None else []

    @property
    def retrying(self) -> bool:
        """Some sample's read failed and is still to be tried again."""
        return any(not self.streams[k].done for k in self.read_failures if k in self.streams)

    @property
    def finished(self) -> bool:
        """The task is complete and every sample stream has drained (or it was given up)."""
        if self.failed:
            return True
        if not self.task.finished or self.as_of is None:
            return False
        if not all(s.done for s in self.streams.values()):
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

    def ref(self, sample_id: str, epoch: int, attempt: int) -> SampleRef:
        t = self.task
        return SampleRef(task=t.task, task_id=t.task_id, eval_id=t.eval_id, model=t.model,
                         sample_id=sample_id, epoch=epoch, attempt=attempt,
                         log_location=t.log_location, pid=t.pid)

    def notice(self, kind: str, message: str, key: tuple[str, int] | None = None,
               **details: Any) -> None:
        ref = None
        if key is not None:
            stream = self.streams.get(key)
            ref = self.ref(key[0], key[1], stream.attempt if stream else 1)
        self.emit(Notice(kind=kind, message=message, sample=ref, at=time.time(),
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
            if self._listing is None and (not moved <= self.streams.keys()
                                          or now - self.listed_at >= LISTING_EVERY_WITH_BUFFER):
                self.listed_at = now
                since = self._since(now)
                self._listing = self.pool.submit(self._fetch_listing, since)
        if moved is not None:
            changed |= {k for k in moved if k in self.streams}
        due: list[tuple[tuple[str, int], SampleStream]] = []
        for key, stream in list(self.streams.items()):
            if stream.done:
                continue
            row = self.rows.get(key)
            if self.retry_at.get(key, 0.0) > now:
                continue  # its last read failed: wait before the next attempt
            if (key in changed or (row is not None and row.terminal) or self.opts.once
                    or stream.behind
                    or (now - self.last_polled.get(key, 0.0) >= self.opts.resync_every
                        and not self._unchanged_since_read(key, row))):
                due.append((key, stream))
                if row is not None:
                    self.read_at_count[key] = row.raw.get("events")
            else:
                stream.polls_without_change += 1
        # reads in parallel (each stream touched by one thread; the source caps requests
        # in flight); each result is evaluated on this thread as soon as it arrives: under
        # a busy eval a poll's reads can take many seconds, and a finding must not wait
        # for the slowest of them. A read that failed is that sample's alone: the others
        # are applied, and it is tried again later or given up (see READ_ATTEMPTS)
        gone: ProcessGone | None = None
        flushed = time.monotonic()
        for (key, stream), result in self._fetched(due, now):
            if isinstance(result, ProcessGone):
                # the eval exited under this read (its stream is unchanged): not this
                # sample's failure; the process's exit hands the task over to its log
                gone = result
                continue
            if isinstance(result, SourceError) and not isinstance(result, NotFound):
                self._read_failed(key, stream, result, now)
                continue
            self._poll(key, stream, now, result)
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
        for key, stream in self.streams.items():
            if not stream.done and (self.last_polled.get(key) == now or now - self.ticked_at.get(
                    key, 0.0) >= TICK_EVERY):
                self.ticked_at[key] = now
                self._tick(key, stream, now)
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
                if not self.opts.owns(*key) or key in self.unreadable:
                    continue
                watch = self.watches.get(key)
                if watch is not None:
                    self._findings(watch.sample_row(row.raw, self.context, row_end(row)))
                    continue
                # closed: a watch of its own for this pass (only outlier rules answer)
                late = self.engine.open_sample(self.ref(key[0], key[1], row.attempt))
                found = late.sample_row(row.raw, self.context, row_end(row))
                if found:
                    self._findings(found + late.finalize(time.time()))
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
        for key, watch in list(self.watches.items()):
            grown = watch.grown_snapshots()
            meter = self.meters.get(key)
            if meter is None and not grown:
                continue
            meter = self.meter(key)
            for f in grown:
                self.emit(meter.annotate(f))
            for f in meter.refreshed(skip={f.id for f in grown}):
                self.emit(f)

    def meter(self, key: tuple[str, int]) -> SpendMeter:
        meter = self.meters.get(key)
        if meter is None:
            meter = self.meters[key] = SpendMeter(self.spend_from_events)
        return meter

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
            if row.status in ("pending", "queued") and key not in self.streams:
                continue
            prev = self.rows.get(key)
            self.rows[key] = row
            if recent is not None and prev is not None and not _moved(prev, row, recent):
                continue
            changed.add(key)
            self._on_row(key, row, now)
        self.as_of = listing.as_of
        return changed

    def _fetched(self, due: list[tuple[tuple[str, int], SampleStream]], now: float,
                 ) -> Iterator[tuple[tuple[tuple[str, int], SampleStream],
                                     StreamItem | SourceError]]:
        """Each due stream with its read, in the order the reads complete."""
        def fetch(stream: SampleStream) -> StreamItem | SourceError:
            return _read(stream, self.source, now)

        if len(due) <= 1 or self.pool is None:
            for item in due:
                yield item, fetch(item[1])
            return
        # what the source serves without waiting (the sample buffer) is read on this
        # thread, while the reads that wait on the eval run on the pool: handing each
        # read to a thread and back cost a fifth of the live watcher's CPU
        here: list[tuple[tuple[str, int], SampleStream]] = []
        there: list[tuple[tuple[str, int], SampleStream]] = []
        for item in due:
            (sid, epoch), stream = item
            row = self.rows.get(item[0])
            local = row is not None and not row.terminal and self.source.reads_in_process(
                self.task, sid, epoch, stream.resume_at)
            (here if local else there).append(item)
        futures = {self.pool.submit(fetch, item[1]): item for item in there}
        if here:
            with self.source.read_batch(self.task):
                for item in here:
                    yield item, fetch(item[1])
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

    def _unchanged_since_read(self, key: tuple[str, int], row: SampleRow | None) -> bool:
        """The listing says the transcript has as many events as at our last read.

        A periodic resync exists for what the ``active_since`` delta could miss; the
        row's live event count answers that without a page read, which costs the
        eval's own event loop (300 samples resynced every 15 s were 20 reads/s).
        """
        if row is None or row.status != "running":
            return False
        count = row.raw.get("events")
        return count is not None and count == self.read_at_count.get(key)

    def _count_in_context(self, key: tuple[str, int], row: SampleRow) -> None:
        """A finished sample counts once in the task context sample rules compare with."""
        if row.terminal and key not in self._in_context:
            self._in_context.add(key)
            self.context.add(row.raw)

    def _on_row(self, key: tuple[str, int], row: SampleRow, now: float) -> None:
        if not self.opts.owns(*key):
            self._count_in_context(key, row)
            return
        skey = WatchState.sample_key(self.task.eval_id, *key)
        if skey in self.state.finished and key not in self.streams:
            return
        stream = self.streams.get(key)
        if stream is None:
            stream = SampleStream(self.task, key[0], key[1], types=self.engine.event_types,
                                  tier=self.engine.tier, page_limit=self.opts.page_limit)
            stream.attempt = row.attempt
            self.streams[key] = stream
            self.watches[key] = self.engine.open_sample(self.ref(key[0], key[1], row.attempt))
            if row.attempt > 1:
                self.notice("attempt", f"sample {key[0]} epoch {key[1]} is on attempt "
                            f"{row.attempt} (earlier attempts errored)", key,
                            attempt=row.attempt)
        elif row.attempt > stream.attempt and stream.nonce is not None and (
                row.raw.get("attempt_nonce") == stream.nonce):
            # the attempt being read, under its true number: a source that met it in the
            # middle (a shared sample buffer does not say how many attempts came before)
            # learns it from the log. Its events are not read again; findings keep the
            # attempt they were reported with
            self.notice("attempt", f"sample {key[0]} epoch {key[1]} is on attempt "
                        f"{row.attempt}: earlier attempts errored before this watch saw them",
                        key, attempt=row.attempt)
            stream.attempt = row.attempt
            if stream.done and key not in self.watches:
                return  # read to its end and closed before the log said so
        elif row.attempt > stream.attempt:
            # a retry; the failed attempt may already have read as done (its terminal
            # source), so a finished stream re-opens for the new attempt
            if stream.done:
                self.emit(SampleDone(skey, reopened=True))
            self._new_attempt(key, stream, row.attempt)
        elif stream.done and key not in self.watches:
            return  # finished and closed: its rows have nothing more to say
        self._count_in_context(key, row)
        self.meter(key).row(row.raw)
        # a finding about a finished sample's row (a limit it hit) is dated at the sample's
        # end, not at the time the row was read (a post-hoc scan, months later): from the
        # row, or (a log that does not say) its last event, once its events are read
        end = row_end(row)
        if row.terminal and end is None and not stream.done:
            self.deferred_rows[key] = row
        else:
            self.deferred_rows.pop(key, None)
            self._findings(self.watches[key].sample_row(row.raw, self.context, end))
        if stream.done and row.terminal:
            self._close(key)

    def _close(self, key: tuple[str, int]) -> None:
        """Drop a finished sample's rule state: a long run must not keep every sample's."""
        watch = self.watches.pop(key, None)
        if watch is not None:
            self._findings(watch.finalize(time.time()))
        self.meters.pop(key, None)

    def _new_attempt(self, key: tuple[str, int], stream: SampleStream, attempt: int) -> None:
        watch = self.watches.get(key)
        if watch is None:  # the failed attempt was finished and closed
            self.watches[key] = self.engine.open_sample(self.ref(key[0], key[1], attempt))
        else:
            self._findings(watch.finalize(time.time()))
            watch.reset_attempt(self.ref(key[0], key[1], attempt))
        self.meters.pop(key, None)  # a new attempt spends from nothing
        stream.start_attempt(attempt)
        self.notice("attempt", f"sample {key[0]} epoch {key[1]} started attempt {attempt}", key,
                    attempt=attempt)

    def _read_failed(self, key: tuple[str, int], stream: SampleStream, error: SourceError,
                     now: float, final: bool = False) -> None:
        """A read of one sample failed: try it again later, or give it up with a notice.

        Never raises: one sample that cannot be read (invalid JSON in a log, a server
        that answers 500 for it) must neither stop the others nor keep a --once going.
        """
        stream.behind = False  # nothing was read: not a backlog to read at once
        self.last_polled[key] = now
        failures = self.read_failures[key] = self.read_failures.get(key, 0) + 1
        row = self.rows.get(key)
        terminal = row is not None and row.terminal
        static = not self.source.live
        if isinstance(error, NotFound):
            if not terminal:
                self.read_failures.pop(key, None)  # not started, or not yet listed
                return
            give_up = final or static or failures >= (
                READ_ATTEMPTS if self.opts.once else NOT_FOUND_ATTEMPTS)
            if give_up:
                self.notice("gap", f"sample {key[0]} epoch {key[1]} finished but its events "
                            "could not be read", key, reason=str(error))
                self._forget_failures(key)
                self._finish(key, stream, now)
                return
        else:
            attempts = 1 if static and self.opts.once else READ_ATTEMPTS
            if final or isinstance(error, LimitExceeded) or (
                    failures >= attempts and (terminal or static or self.opts.once)):
                self._give_up(key, stream, error, now)
                return
            if failures == 1:
                self.notice("source_error", f"sample {key[0]} epoch {key[1]}: events could "
                            f"not be read ({error}); trying again", key,
                            transient=error.transient)
        self.retry_at[key] = now + min(RETRY_CAP, self.opts.poll * 2 ** (failures - 1))

    def _give_up(self, key: tuple[str, int], stream: SampleStream, error: SourceError,
                 now: float) -> None:
        """Stop reading a sample that cannot be read: said once, counted, never lost
        silently (it is not marked finished in the state: a later run tries again)."""
        self.notice("unreadable", f"sample {key[0]} epoch {key[1]}: its events could not be "
                    f"read ({error}); the rules saw {stream.delivered} of its events", key,
                    scope="sample", reason=str(error), log=self.task.log_location)
        self.unreadable.add(key)
        self._forget_failures(key)
        stream.done = True
        stream.in_flight.clear()
        self._judge_deferred(key, stream)
        self._findings(self.watches[key].finalize(now))
        row = self.rows.get(key)
        if row is not None and row.terminal:
            self._close(key)

    def _forget_failures(self, key: tuple[str, int]) -> None:
        self.read_failures.pop(key, None)
        self.retry_at.pop(key, None)

    def _poll(self, key: tuple[str, int], stream: SampleStream, now: float,
              result: StreamItem | SourceError | None = None, final: bool = False) -> None:
        self.last_polled[key] = now
        if result is None:
            result = _read(stream, self.source, now)
        if isinstance(result, SourceError):
            self._read_failed(key, stream, result, now, final=final)
            return
        if key in self.read_failures:
            self._forget_failures(key)
        item = result
        watch = self.watches[key]
        events = item.events
        meter = self.meter(key)
        if item.new_attempt is not None:
            for event in events[: item.attempt_boundary]:
                meter.add(event)
                self._findings(watch.feed(event))
            self._findings(watch.finalize(now))
            watch.reset_attempt(self.ref(key[0], key[1], item.new_attempt))
            self.meters.pop(key, None)
            meter = self.meter(key)
            self.notice("attempt", f"sample {key[0]} epoch {key[1]} started attempt "
                        f"{item.new_attempt}", key, attempt=item.new_attempt)
            events = events[item.attempt_boundary:]
        for event in events:
            meter.add(event)
            self._findings(watch.feed(event))
        if self.opts.recent_events and item.events:
            kept = self.recent.get(key)
            if kept is None:
                kept = self.recent[key] = deque(maxlen=self.opts.recent_events)
            kept.extend(recent_copy(e) for e in item.events[-self.opts.recent_events:])
        for kind, message, details in item.notices:
            self.notice(kind, f"sample {key[0]} epoch {key[1]}: {message}", key, **details)
        if item.done:
            self._finish(key, stream, now)

    def _judge_deferred(self, key: tuple[str, int], stream: SampleStream) -> None:
        """The finished row kept for the sample's end (see ``_on_row``), judged now that
        its last event's time is known."""
        row = self.deferred_rows.pop(key, None)
        watch = self.watches.get(key)
        if row is not None and watch is not None:
            self._findings(watch.sample_row(row.raw, self.context, stream.last_event_at))

    def _finish(self, key: tuple[str, int], stream: SampleStream, now: float) -> None:
        stream.done = True
        self._judge_deferred(key, stream)
        self._findings(self.watches[key].finalize(now))
        # behind its findings on the queue: the state marks it finished after them
        self.emit(SampleDone(WatchState.sample_key(self.task.eval_id, *key)))
        row = self.rows.get(key)
        if row is not None and row.terminal:  # else its final row is still to come
            self._close(key)

    def _tick(self, key: tuple[str, int], stream: SampleStream, now: float) -> None:
        status = SampleStatus(
            last_event_at=stream.last_event_at, last_change_at=stream.last_change_at,
            polls_without_change=stream.polls_without_change,
            in_flight=[{"type": e.get("type"), "function": e.get("function"),
                        "model": e.get("model"), "since": e.get("timestamp")}
                       for e in stream.in_flight.values()],
            last_event=stream.last_event,
        )
        self._findings(self.watches[key].tick(now, status))

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
        for key, stream in self.streams.items():
            if not stream.done:
                self.notice("sample_abandoned", f"sample {key[0]} epoch {key[1]}: {reason}", key)
                stream.done = True
                self._judge_deferred(key, stream)
                self._findings(self.watches[key].finalize(now))

    def _findings(self, findings: list[Finding]) -> None:
        for f in findings:
            s = f.sample
            self.emit(self.meter((s.sample_id, s.epoch)).annotate(f))
        # a rule expression that failed on the data just read: said once per rule and
        # reason (the engine keeps count), beside the findings it may have changed
        for err in self.engine.take_errors():
            self.emit(err.notice(at=time.time()))


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
                    tw.task = info
                    for stream in tw.streams.values():
                        stream.task = info
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
            s.behind for t in self.tasks.values() for s in t.streams.values())
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
                                     f"({reason}); nothing was read from it",
                             details={"reached": False}))
            return
        abandoned = 0
        for tw in self.tasks.values():
            # also when every stream is done: the last listing may be seconds old (a
            # sample buffer's reader lists every few seconds), and the log holds each
            # sample's last state, which the final status shows; a task whose samples
            # were never listed is read from its log whole
            stale = any(not r.terminal for r in tw.rows.values()) or tw.as_of is None
            if tw.task.log_location and (stale or any(not s.done for s in tw.streams.values())):
                self._drain_from_log(tw)
            abandoned += sum(not s.done for s in tw.streams.values())
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
        tw.source, tw.task = source, replace(tasks[0], log_location=tw.task.log_location)
        try:
            listing = source.samples(tw.task)
        except SourceError:
            return
        if tw.as_of is None:  # never listed live: every sample of the log, from the start
            tw._apply_listing(listing, None, time.time())
        for row in listing.samples:
            key = (row.sample_id, row.epoch)
            if key in tw.rows and row.terminal:  # the sample's last word
                tw.rows[key] = row
            if key in tw.streams and row.terminal:
                tw.rows[key] = row
                tw._on_row(key, row, time.time())
        for key, stream in tw.streams.items():
            stream.task = tw.task
            last = tw.rows.get(key)
            if stream.done or last is None or not last.terminal:
                continue
            for _ in range(10_000):
                # the log is the last word: a read that fails now is given up
                tw._poll(key, stream, time.time(), final=True)
                if stream.done:
                    break
        tw.judge_whole_task()

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


@dataclass(frozen=True)
class Origin:
    """Where an output was read: the runner's key and label for the source, the source,
    and the control server it speaks to (``None`` for logs, replays and ``inspect ctl``
    without a discovery file). What a hook at the deciding step needs to act on a
    finding through the channel it came from (:class:`watcher.run.router.Decider`)."""

    key: str
    label: str
    source: Source
    server: ControlServer | None = None


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
        self.origins[key] = Origin(key, label, source, server)
        thread = threading.Thread(target=sw.run, args=(self.stop,), name=f"watch-{key}",
                                  daemon=True)
        self.threads[key] = thread
        thread.start()
        return sw

    def active(self) -> bool:
        return any(t.is_alive() for t in self.threads.values())

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
