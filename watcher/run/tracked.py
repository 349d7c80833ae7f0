"""One tracked sample of a task: its row, stream, rule state, spend, recent events and clocks.

A :class:`~watcher.run.runner.TaskWatcher` lists a task and decides which samples are
due; everything that happens to one sample once it is tracked (a new row, a read that
arrived or failed, a new attempt, its end) happens here, to one object. It used to be
twelve dictionaries keyed by the same ``(sample_id, epoch)``, kept in step by hand;
one missed ``pop`` left a sample half-closed. A tracked sample speaks only through the
``emit`` callable it was given: it never calls back into the task watcher.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from watcher.engine import Engine, RunContext, SampleStatus
from watcher.engine.runtime import SampleWatch
from watcher.events import Event, Tier
from watcher.findings import Finding, Notice, SampleRef
from watcher.run.spend import SpendMeter
from watcher.run.values import Output, RunOptions, SampleView
from watcher.sources.base import LimitExceeded, NotFound, SampleRow, SourceError, TaskInfo
from watcher.state import SampleDone, WatchState
from watcher.stream import SampleStream, StreamItem

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
    """An event shortened for :attr:`TrackedSample.recent` (text fields stay agent text:
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


def sample_ref(task: TaskInfo, sample_id: str, epoch: int, attempt: int) -> SampleRef:
    """What a finding or notice names: the sample attempt, with its task as last listed."""
    return SampleRef(task=task.task, task_id=task.task_id, eval_id=task.eval_id,
                     model=task.model, sample_id=sample_id, epoch=epoch, attempt=attempt,
                     log_location=task.log_location, pid=task.pid)


def _untouched(watch: SampleWatch) -> bool:
    """Whether no rule state of ``watch`` has opened an episode (a row that said nothing
    leaves a fresh watch as it was: only an episode, reported or still silent for want
    of its ``require``, is state a later step reads)."""
    return all(s is None or s.episodes == 0 for s in watch.state_list)


class RowJudge:
    """Judges the listing rows of a task's samples that hold no rule state of their own
    (not read yet, or closed), with one spare :class:`SampleWatch` of the task.

    Opening a watch per row to judge it (its rule states, its pace clock) was most of
    what a listed sample cost, and kept every listed sample's watch alive until its
    events were read: 5,000 of them in a post-hoc scan. A row almost never opens an
    episode; when it does, the watch that holds it is handed to the caller, who keeps
    it as the sample's own, and the next row gets a new spare. One per task watcher
    (one thread), so every watch it lends is of that task (its pace is the task's).
    It also keeps what the task's sample streams read (:attr:`event_types`, :attr:`tier`).
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._spare: SampleWatch | None = None
        # what the rules read, for each sample's stream: properties of the rule set that
        # walk every rule (Engine.tier), once per task rather than once per sample
        self.event_types: frozenset[str] | None = engine.event_types
        self.tier: Tier = engine.tier

    def judge(self, ref: SampleRef, raw: dict[str, Any], context: RunContext,
              end: float | None) -> tuple[list[Finding], SampleWatch | None]:
        """The row's findings, and the watch they left state in (``None``: none was)."""
        watch = self._spare
        if watch is None:
            watch = self.engine.open_sample(ref)
        else:
            watch.rename(ref)
        found = watch.sample_row(raw, context, end)
        if found or not _untouched(watch):
            self._spare = None
            return found, watch
        self._spare = watch
        return found, None


class TrackedSample:
    """One sample being read: from its first row to its close.

    ``watch`` is its rule state, opened when its first events are read (or a row leaves
    state in it) and dropped when it is closed (``closed``): a listing of 5,000 samples
    must not hold 5,000 watches, nor a long run every sample's. Until then its rows are
    judged by the task's ``judge``. ``meter`` is what the current attempt spent;
    ``recent`` its last events (``opts.recent_events``, read by front ends from another
    thread: a deque's copy is atomic); ``failures``/``retry_at`` its failed reads;
    ``last_polled``/``ticked_at`` when it was last read and its clock rules last checked.
    """

    def __init__(self, row: SampleRow, task: TaskInfo, engine: Engine, context: RunContext,
                 opts: RunOptions, emit: Callable[[Output], None],
                 spend_from_events: bool, judge: RowJudge | None = None) -> None:
        """``judge``: the task's (one of its own without); what its stream reads (the
        event types and tier the rules need) is the judge's, worked out once per task."""
        self.sample_id, self.epoch = row.sample_id, row.epoch
        self.row = row
        self.engine = engine
        self.context = context  # the task's other samples, shared with its task watcher
        self.opts = opts
        self.emit = emit
        self.spend_from_events = spend_from_events
        self.judge = judge = judge if judge is not None else RowJudge(engine)
        self.stream = SampleStream(task, row.sample_id, row.epoch, types=judge.event_types,
                                   tier=judge.tier, page_limit=opts.page_limit)
        self.stream.attempt = row.attempt
        self.watch: SampleWatch | None = None  # opened on first need (_open_watch)
        self.closed = False  # done and its rule state dropped (close)
        # what the watch is opened with: the attempt it would have been opened on at the
        # first row (or at a new attempt), not one a read has moved the stream to since
        self._watch_ref = self.ref(row.attempt)
        self._meter: SpendMeter | None = None
        self.recent: deque[dict[str, Any]] | None = None
        self.failures = 0  # reads in a row that failed
        self.retry_at = 0.0  # not read again before this
        self.unreadable = False  # given up on: reported, counted
        self.last_polled = 0.0
        self.ticked_at = 0.0
        self.read_at_count: Any = None  # the listing's live event count at the last read
        # a finished row that does not say when its sample ended: judged at its end
        self.deferred_row: SampleRow | None = None
        if row.attempt > 1:
            self.notice("attempt", f"sample {self.sample_id} epoch {self.epoch} is on attempt "
                        f"{row.attempt} (earlier attempts errored)", attempt=row.attempt)

    # -- what it is ------------------------------------------------------------

    @property
    def key(self) -> tuple[str, int]:
        return (self.sample_id, self.epoch)

    @property
    def task(self) -> TaskInfo:
        """Its task as last listed (the stream reads with it; findings name it)."""
        return self.stream.task

    @task.setter
    def task(self, task: TaskInfo) -> None:
        self.stream.task = task

    def ref(self, attempt: int) -> SampleRef:
        return sample_ref(self.stream.task, self.sample_id, self.epoch, attempt)

    @property
    def meter(self) -> SpendMeter:
        """What the current attempt spent (made at its first use)."""
        meter = self._meter
        if meter is None:
            meter = self._meter = SpendMeter(self.spend_from_events)
        return meter

    @property
    def retrying(self) -> bool:
        """Its last read failed and it is still to be tried again."""
        return self.failures > 0 and not self.stream.done

    def recent_events(self) -> list[dict[str, Any]]:
        """Its last events, oldest first (see :data:`RECENT_FIELDS`)."""
        kept = self.recent
        return list(kept) if kept is not None else []

    def view(self, row: SampleRow | None) -> SampleView:
        """What a front end shows of it, copied (``row``: the task's listing row)."""
        s = self.stream
        return SampleView(sample_id=self.sample_id, epoch=self.epoch, attempt=s.attempt,
                          done=s.done, events=s.delivered, last_event_at=s.last_event_at,
                          last_change_at=s.last_change_at,
                          in_flight=tuple(s.in_flight.values()),
                          last_event=s.last_event, row=row)

    # -- what it says ------------------------------------------------------------

    def notice(self, kind: str, message: str, **details: Any) -> None:
        self.emit(Notice(kind=kind, message=message, sample=self.ref(self.stream.attempt),
                         at=time.time(), details=details))

    def _feed(self, watch: SampleWatch, meter: SpendMeter, events: list[Event]) -> None:
        """Events through the rules, one at a time, as :meth:`findings` says them: an
        event's findings, then the rule errors it caused. (The loop a scan spends most
        of its interpreted time in: per event, only what the event needs.)"""
        engine = self.engine
        for event in events:
            if event.get("type") == "model":  # (the only events the meter counts)
                meter.add(event)
            found = watch.feed(event)
            if found:
                self.findings(found)
            elif engine.has_errors():
                self._rule_errors()

    def findings(self, findings: list[Finding]) -> None:
        """Findings of its rule state, with what it spent; and the rule errors the data
        just read caused (said once per rule and reason: the engine keeps count)."""
        for f in findings:
            self.emit(self.meter.annotate(f))
        self._rule_errors()

    def _rule_errors(self) -> None:
        """The rule errors recorded since they were last said, as notices."""
        for err in self.engine.take_errors():
            self.emit(err.notice(at=time.time()))

    def _closed_error(self) -> RuntimeError:
        """What reading into a closed sample raises (a bug of the caller's, not data)."""
        return RuntimeError(f"sample {self.sample_id} epoch {self.epoch} is closed")

    def _open_watch(self) -> SampleWatch:
        """Its rule state, opened now if it was not yet (raises once it is closed)."""
        watch = self.watch
        if watch is None:
            if self.closed:
                raise self._closed_error()
            watch = self.watch = self.engine.open_sample(self._watch_ref)
        return watch

    def _judge(self, raw: dict[str, Any], end: float | None) -> None:
        """Judge a row with its own rule state, or (none opened yet) the task's spare
        watch, keeping that watch as its own if the row left state in it."""
        watch = self.watch
        if watch is not None:
            self.findings(watch.sample_row(raw, self.context, end))
            return
        found, kept = self.judge.judge(self._watch_ref, raw, self.context, end)
        if kept is not None:
            self.watch = kept
        self.findings(found)

    # -- its life --------------------------------------------------------------

    def on_row(self, row: SampleRow, now: float) -> None:
        """A listing row that changed: a new attempt, what the row says, its close."""
        self.row = row
        stream = self.stream
        if row.attempt > stream.attempt and stream.nonce is not None and (
                row.raw.get("attempt_nonce") == stream.nonce):
            # the attempt being read, under its true number: a source that met it in the
            # middle (a shared sample buffer does not say how many attempts came before)
            # learns it from the log. Its events are not read again; findings reported
            # keep the attempt they were reported with, later ones (its row's, at its
            # end) name the true attempt, as a scan of the log does
            self.notice("attempt", f"sample {self.sample_id} epoch {self.epoch} is on attempt "
                        f"{row.attempt}: earlier attempts errored before this watch saw them",
                        attempt=row.attempt)
            stream.attempt = row.attempt
            if self.watch is not None:
                self.watch.rename(self.ref(row.attempt))
            elif not self.closed:
                self._watch_ref = self.ref(row.attempt)
            if stream.done and self.closed:
                return  # read to its end and closed before the log said so
        elif row.attempt > stream.attempt:
            # a retry; the failed attempt may already have read as done (its terminal
            # source), so a finished stream re-opens for the new attempt
            if stream.done:
                self.emit(SampleDone(self._state_key(), reopened=True))
            self.new_attempt(row.attempt)
        elif stream.done and self.closed:
            return  # finished and closed: its rows have nothing more to say
        self.meter.row(row.raw)
        # a finding about a finished sample's row (a limit it hit) is dated at the sample's
        # end, not at the time the row was read (a post-hoc scan, months later): from the
        # row, or (a log that does not say) its last event, once its events are read
        end = row_end(row)
        if row.terminal and end is None and not stream.done:
            self.deferred_row = row
        else:
            self.deferred_row = None
            if self.closed:  # a closed sample's row is not judged here
                raise self._closed_error()
            self._judge(row.raw, end)
        if stream.done and row.terminal:
            self.close()

    def apply(self, item: StreamItem, now: float) -> None:
        """What one read delivered: its events through the rules, its notices, its end."""
        self.last_polled = now
        if self.failures:
            self._forget_failures()
        watch = self._open_watch()
        events = item.events
        meter = self.meter
        if item.new_attempt is not None:
            self._feed(watch, meter, events[: item.attempt_boundary])
            self.findings(watch.finalize(now))
            watch.reset_attempt(self.ref(item.new_attempt))
            self._meter = None
            meter = self.meter
            self.notice("attempt", f"sample {self.sample_id} epoch {self.epoch} started "
                        f"attempt {item.new_attempt}", attempt=item.new_attempt)
            events = events[item.attempt_boundary:]
        self._feed(watch, meter, events)
        keep = self.opts.recent_events
        if keep and item.events:
            kept = self.recent
            if kept is None:
                kept = self.recent = deque(maxlen=keep)
            kept.extend(recent_copy(e) for e in item.events[-keep:])
        for kind, message, details in item.notices:
            self.notice(kind, f"sample {self.sample_id} epoch {self.epoch}: {message}",
                        **details)
        if item.done:
            self.finish(now)

    def read_failed(self, error: SourceError, now: float, *, live: bool,
                    final: bool = False) -> None:
        """A read failed: try it again later, or give it up with a notice (``live``: the
        source can still change; ``final``: nothing more can come).

        Never raises: one sample that cannot be read (invalid JSON in a log, a server
        that answers 500 for it) must neither stop the others nor keep a --once going.
        """
        stream = self.stream
        stream.behind = False  # nothing was read: not a backlog to read at once
        self.last_polled = now
        self.failures += 1
        failures = self.failures
        terminal = self.row.terminal
        static = not live
        once = self.opts.once
        if isinstance(error, NotFound):
            if not terminal:
                self.failures = 0  # not started, or not yet listed
                return
            if final or static or failures >= (READ_ATTEMPTS if once else NOT_FOUND_ATTEMPTS):
                self.notice("gap", f"sample {self.sample_id} epoch {self.epoch} finished but "
                            "its events could not be read", reason=str(error))
                self._forget_failures()
                self.finish(now)
                return
        else:
            attempts = 1 if static and once else READ_ATTEMPTS
            if final or isinstance(error, LimitExceeded) or (
                    failures >= attempts and (terminal or static or once)):
                self.give_up(error, now)
                return
            if failures == 1:
                self.notice("source_error", f"sample {self.sample_id} epoch {self.epoch}: "
                            f"events could not be read ({error}); trying again",
                            transient=error.transient)
        self.retry_at = now + min(RETRY_CAP, self.opts.poll * 2 ** (failures - 1))

    def give_up(self, error: SourceError, now: float) -> None:
        """Stop reading a sample that cannot be read: said once, counted, never lost
        silently (it is not marked finished in the state: a later run tries again)."""
        stream = self.stream
        self.notice("unreadable", f"sample {self.sample_id} epoch {self.epoch}: its events "
                    f"could not be read ({error}); the rules saw {stream.delivered} of its "
                    "events", scope="sample", reason=str(error), log=self.task.log_location)
        self.unreadable = True
        self._forget_failures()
        stream.done = True
        stream.in_flight.clear()
        self._judge_deferred()
        self.findings(self._open_watch().finalize(now))
        if self.row.terminal:
            self.close()

    def finish(self, now: float) -> None:
        """Read to its end: its last findings, then ``SampleDone`` behind them on the
        queue (the state marks it finished after them)."""
        self.stream.done = True
        self._judge_deferred()
        self.findings(self._open_watch().finalize(now))
        self.emit(SampleDone(self._state_key()))
        if self.row.terminal:  # else its final row is still to come
            self.close()

    def abandon(self, reason: str, now: float) -> None:
        """Its source is gone with the sample unfinished: end it, with a notice."""
        if self.stream.done:
            return
        self.notice("sample_abandoned", f"sample {self.sample_id} epoch {self.epoch}: {reason}")
        self.stream.done = True
        self._judge_deferred()
        self.findings(self._open_watch().finalize(now))

    def close(self) -> None:
        """Drop a finished sample's rule state: a long run must not keep every sample's.
        (One never opened has nothing to end: a fresh watch's finalize says nothing.)"""
        watch, self.watch = self.watch, None
        self.closed = True
        if watch is not None:
            self.findings(watch.finalize(time.time()))
            watch.release()
        self._meter = None

    def new_attempt(self, attempt: int) -> None:
        """The listing says the sample was retried: the old attempt's findings end, the
        stream starts over, and the new attempt spends from nothing."""
        watch = self.watch
        if watch is None:  # the failed attempt was closed (or never opened): a new watch
            self.closed = False
            self._watch_ref = self.ref(attempt)
        else:
            self.findings(watch.finalize(time.time()))
            watch.reset_attempt(self.ref(attempt))
        self._meter = None
        self.stream.start_attempt(attempt)
        self.notice("attempt", f"sample {self.sample_id} epoch {self.epoch} started attempt "
                    f"{attempt}", attempt=attempt)

    def tick(self, now: float) -> None:
        """Check its clock rules (idle, windows that close without events)."""
        self.ticked_at = now
        stream = self.stream
        status = SampleStatus(
            last_event_at=stream.last_event_at, last_change_at=stream.last_change_at,
            polls_without_change=stream.polls_without_change,
            in_flight=[{"type": e.get("type"), "function": e.get("function"),
                        "model": e.get("model"), "since": e.get("timestamp")}
                       for e in stream.in_flight.values()],
            last_event=stream.last_event,
        )
        self.findings(self._open_watch().tick(now, status))

    def refresh(self) -> None:
        """Its open findings again, as they stand: how far a loop went by now and what
        the sample spent since (see :meth:`TaskWatcher.refresh_open`)."""
        if self.closed:
            return
        watch = self.watch
        grown = watch.grown_snapshots() if watch is not None else []
        if self._meter is None and not grown:
            return
        meter = self.meter
        for f in grown:
            self.emit(meter.annotate(f))
        for f in meter.refreshed(skip={f.id for f in grown}):
            self.emit(f)

    def judge_row(self, row: SampleRow) -> bool:
        """Judge a finished task's row with its rule state (what needs every sample:
        outliers); ``False`` when it is closed and the caller must judge it apart."""
        if self.closed:
            return False
        self._judge(row.raw, self.ended_at(row))
        return True

    def ended_at(self, row: SampleRow) -> float | None:
        """When the sample ended: its row's times, else (an older log's rows carry none)
        its last event's, once read to its end; ``None`` while it runs."""
        end = row_end(row)
        if end is None and self.stream.done and row.terminal:
            end = self.stream.last_event_at
        return end

    def _judge_deferred(self) -> None:
        """The finished row kept for the sample's end (see :meth:`on_row`), judged now that
        its last event's time is known."""
        row, self.deferred_row = self.deferred_row, None
        if row is not None and not self.closed:
            self._judge(row.raw, self.stream.last_event_at)

    def _forget_failures(self) -> None:
        self.failures = 0
        self.retry_at = 0.0

    def _state_key(self) -> str:
        return WatchState.sample_key(self.stream.task.eval_id, self.sample_id, self.epoch)
