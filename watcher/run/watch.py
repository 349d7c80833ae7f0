"""One watch, start to finish: the loop that ties sources, runner and router together.

:class:`Watch` picks its sources (:mod:`~watcher.run.sources`), starts a
:class:`~watcher.run.runner.Runner` on them, and on the caller's thread hands every
output to the :class:`~watcher.run.router.Router` (the deciding step) until the
sources are done, the options say stop (``--once``, no ``--follow``), or it is told
to stop: :meth:`Watch.request_stop`, Ctrl+C, SIGTERM, or an output or the state file
that failed. About once a second it sends a status snapshot
(:mod:`~watcher.run.status`). A post-hoc scan with ``jobs > 1`` runs in forked
workers instead (:mod:`~watcher.run.parallel`). At the end it says what could not be
read or matched nothing, drains the alerts and saves the state.

This is the library behind :func:`watcher.app.run`, which adds the outputs.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from watcher.alertqueue import DRAIN_SECONDS
from watcher.engine import Engine
from watcher.exit_codes import ExitCode
from watcher.findings import Finding, Notice
from watcher.limits import READ_TIMEOUT
from watcher.run import parallel
from watcher.run.budget import (
    SampleSpend,
    TaskBudget,
    TaskSpend,
    loop_tokens,
    sample_spend,
    spend_notice,
    task_spend,
)
from watcher.run.options import picker_kwargs, router_kwargs, run_kwargs
from watcher.run.router import AlertSink, Decider, Handoff, Router, Sink
from watcher.run.runner import Runner
from watcher.run.sources import SourcePicker
from watcher.run.status import run_summary, status_snapshot
from watcher.run.tracked import row_end
from watcher.run.values import PROCESS_EXIT_GRACE, RunOptions, Selector
from watcher.starting import starting_evals
from watcher.state import WatchState
from watcher.summary import RunSummary, StatusSnapshot

# seconds between two status snapshots sent to the sinks; one is sent sooner (but not
# within STATUS_MIN of the last) when a source finished a cycle or anything was written,
# so the counts a status area shows are never a cycle behind what was printed above it
STATUS_EVERY = 1.0
STATUS_MIN = 0.2
# the share of the watch's time status snapshots may take (they are skipped beyond it)
STATUS_SHARE = 0.02
# seconds a watch about to say "no eval yet" looks again: an eval that is finishing has
# removed its discovery file and exits within this; one that is starting may bind
STARTING_RECHECK = 3.0


@dataclass
class WatchConfig:
    """What a :class:`Watch` is given (from :class:`watcher.app.WatchOptions`, or by a
    library caller); where each field goes is declared in :mod:`watcher.run.options`."""

    transport: str = "auto"  # auto (HTTP + sample buffer) | http | cli
    log_dir: str | None = None
    replay: list[str] = field(default_factory=list)
    follow: bool = False
    once: bool = False
    poll: float = 1.0
    selector: Selector = field(default_factory=Selector)
    min_confidence: str = "low"
    fail_on: str | None = None
    wait_for_evals: float = 0.0  # seconds to wait for a first eval before giving up
    read_timeout: float = READ_TIMEOUT  # seconds a control-socket read waits for bytes
    exit_grace: float = PROCESS_EXIT_GRACE  # see RunOptions.exit_grace
    jobs: int = 1  # processes for a post-hoc scan (log_dir with once); see Watch.run
    shard: tuple[int, int] | None = None  # set in a parallel scan's workers
    log_shard: tuple[int, int] | None = None  # --shard K/N: the logs of share K of N
    alert_drain: float = DRAIN_SECONDS  # seconds the end waits for queued alerts
    log_hints: bool = True  # hand-offs name the log (not one that will be deleted: the demo's)
    sample_detail: bool = False  # status snapshots carry a row per sample read
    recent_events: int = 0  # events kept per sample for a front end (RunOptions)
    task_budget: int | None = None  # tokens a task may spend before a task-budget finding


@dataclass
class WatchResult:
    exit_code: ExitCode
    findings: dict[str, Finding]
    notices: list[Notice]
    interrupted: bool = False
    watchers: int = 0
    output_closed: bool = False
    write_error: str | None = None
    state_error: str | None = None


class Watch:
    """A running watch; :meth:`run` blocks until it ends.

    ``sinks`` get what the router passes (findings, notices, status); ``alerts`` too,
    and are asked for their notices and drained at the end; ``deciders`` see each
    finding that is news before it is written (see :mod:`watcher.run.router`), and
    ``handoff`` (if given) writes each finding's hand-off in their place.
    """

    def __init__(self, engine: Engine, config: WatchConfig, state: WatchState,
                 sinks: Sequence[Sink], *, alerts: Sequence[AlertSink] = (),
                 deciders: Sequence[Decider] = (), handoff: Handoff | None = None) -> None:
        self.engine = engine
        self.config = config
        self.state = state
        self.opts = RunOptions(**run_kwargs(config))
        self.runner = Runner(engine, self.opts, state)
        self.router = Router(state, sinks, alerts=alerts, deciders=deciders,
                             **router_kwargs(config))
        if handoff is not None:
            self.router.handoff = handoff
        self.sources = SourcePicker(self.runner, state, self.router.notice,
                                    **picker_kwargs(config))
        self.router.live_eval = self.sources.reads_live
        self.router.remote_eval = self.sources.reads_remote
        self.router.before_save = self.sources.remember_open_evals
        self.live = self.sources.live
        self.started_at = time.time()
        self._stop_requested = False
        self._merged: RunSummary | None = None  # a parallel scan's workers' summaries
        self.budget = TaskBudget(config.task_budget) if config.task_budget else None

    @property
    def findings(self) -> dict[str, Finding]:
        return self.router.findings

    @property
    def notices(self) -> list[Notice]:
        return self.router.notices

    @property
    def interrupted(self) -> bool:
        """Told to stop (a signal, :meth:`request_stop`), or an output or the state
        failed."""
        return self._stop_requested or self.router.halted

    def request_stop(self) -> None:
        """End the watch as Ctrl+C does (from any thread): flush, summarise, save."""
        self._stop_requested = True

    def status(self) -> StatusSnapshot:
        """A snapshot for the live status area."""
        return status_snapshot(self.runner, self.router.findings.values(),
                               min_confidence=self.config.min_confidence,
                               notices=len(self.router.notices),
                               samples=self.config.sample_detail)

    def recent_events(self, eval_id: str, sample_id: str, epoch: int) -> list[dict[str, Any]]:
        """A sample's last events as the runner kept them (``recent_events``); from any
        thread."""
        for sw in list(self.runner.watchers.values()):
            tw = sw.tasks.get(eval_id)
            if tw is not None:
                return tw.recent_events(sample_id, epoch)
        return []

    def _polls(self) -> int:
        return sum(sw.cycles for sw in list(self.runner.watchers.values()))

    def summary(self) -> RunSummary:
        """What the end-of-run reports show: tasks, samples, findings, notices."""
        return run_summary(self.runner, self.router.findings.values(), self.router.notices,
                           min_confidence=self.config.min_confidence,
                           log_dir=self.config.log_dir, started_at=self.started_at,
                           merged=self._merged)

    # -- the loop --------------------------------------------------------------

    def run(self) -> WatchResult:
        cfg = self.config
        if cfg.jobs > 1 and cfg.log_dir and cfg.once and cfg.shard is None:
            return self._run_parallel()
        router, runner = self.router, self.runner
        static = self.sources.add_static()
        if not static:
            self.sources.discover()
        if self.live and cfg.shard is None and self.state.open_evals:
            self.sources.resume_exited()
        deadline = time.time() + cfg.wait_for_evals
        rechecked = False  # evals seen starting were looked at again (STARTING_RECHECK)
        # a parallel scan's worker leaves signals to its parent (see parallel.py)
        previous = _install_stop_signals(self.request_stop) if cfg.shard is None else None
        finished_before = set(self.state.finished)
        try:
            last_status = 0.0
            last_polls = -1
            status_cost, status_at = 0.0, 0.0  # what the last snapshot cost, and when
            last_discover = time.time()
            while True:
                routed = False
                for origin, item in runner.drain_from(timeout=min(0.2, cfg.poll)):
                    router.route(item, origin)
                    routed = True
                router.flush()
                router.pop_notices()
                now = time.time()
                # evals launched later are found with --follow, and, until the first one
                # is, within --wait (a --once too: the eval may still be starting)
                if not static and (not cfg.once or (not runner.watchers and now < deadline)) \
                        and now - last_discover >= cfg.poll:
                    last_discover = now
                    self.sources.discover()
                polls = self._polls()
                if now - last_status >= STATUS_EVERY or (
                        (routed or polls != last_polls) and now - last_status >= STATUS_MIN):
                    last_status, last_polls = now, polls
                    # a snapshot walks every sample read: one that cost more than
                    # STATUS_SHARE of the time since the last is skipped (a 5,000-sample
                    # scan sent one every 0.2 s, a seventh of its CPU)
                    if router.wants_status and status_cost <= STATUS_SHARE * (now - status_at):
                        t0 = time.perf_counter()
                        router.send("status", self.status())
                        status_cost, status_at = time.perf_counter() - t0, now
                    self._check_budget(now)
                if self.interrupted:
                    break
                if runner.active():
                    continue
                if runner.watchers and not cfg.follow:
                    break
                if not runner.watchers and not cfg.follow and now >= deadline:
                    if not static and not rechecked and starting_evals():
                        # an eval process without a control channel is starting, or is
                        # finishing (its discovery file goes first): a moment tells them
                        # apart (the one exits, the other binds), and is read on
                        rechecked = True
                        deadline = now + STARTING_RECHECK
                        continue
                    self._say_no_evals(static)
                    break
                if cfg.once and runner.watchers:
                    break
        except KeyboardInterrupt:
            self._stop_requested = True
        finally:
            _restore_signals(previous)
            runner.shutdown()
            for origin, item in runner.drain_from(timeout=0.0):
                router.route(item, origin)
            if not self.interrupted:
                self._say_if_nothing_matched()
            if cfg.shard is None:  # a parallel scan's parent says it for all its workers
                self._say_if_incomplete()
                self._say_spend()
            router.flush(force=True)
            # the last word of the status area: every task as it ended (the rows the
            # last listing, or the log of an eval that exited, gave), not a second old
            if router.wants_status:
                router.send("status", self.status())
            router.drain_alerts(cfg.alert_drain)
            # what the alerts and deciders said as they drained (alerts lost, actions
            # not finished) was routed after the flush above: written now
            router.flush(force=True)
            if router.output_failed:
                # findings of samples read in this run may not have been written: the
                # next run reads those samples again (what was written is not repeated)
                self.state.finished = finished_before
            else:
                self.state.task_as_of.update(
                    {tw.task.eval_id: tw.as_of for sw in runner.watchers.values()
                     for tw in sw.tasks.values() if tw.as_of is not None})
            router.save()
        return self._result(len(runner.watchers))

    # -- what the run spent ----------------------------------------------------------

    def spend(self) -> list[tuple[str, TaskSpend, list[SampleSpend]]]:
        """Each watched task's spend (with the key of the source it is read from), from
        its listing rows and the findings routed so far (:mod:`watcher.run.budget`)."""
        loops = loop_tokens(self.router.findings.values())
        out = []
        for key, sw in list(self.runner.watchers.items()):
            for tw in list(sw.tasks.values()):
                samples = []
                for (sid, epoch), row in list(tw.rows.items()):
                    if not tw.opts.owns(sid, epoch):
                        continue
                    samples.append(sample_spend(sid, epoch, row.raw, row.attempt,
                                                not row.terminal, row_end(row)))
                spend = task_spend(tw.task, samples, loops.get(tw.task.eval_id, (0, 0)),
                                   finished=tw.finished)
                out.append((key, spend, samples))
        return out

    def _check_budget(self, now: float) -> None:
        """A task that passed ``--task-budget`` (and, later, ended) raises its finding,
        routed with where its task is read from (a watchdog may act on it)."""
        if self.budget is None:
            return
        for key, spend, samples in self.spend():
            if not samples:
                continue
            for _ in range(2):  # passed and finished in one turn: both snapshots
                f = self.budget.check(spend, samples, now)
                if f is None:
                    break
                self.router.route(f, self.runner.origins.get(key))

    def _say_spend(self) -> None:
        """The run-level view, once, at the end (a ``spend`` notice)."""
        now = time.time()
        self._check_budget(now)
        tasks = [spend for _, spend, _ in self.spend()]
        if tasks:
            self.router.route(spend_notice(tasks, now, self.config.task_budget))

    def _say_spend_of(self, tasks: list[Any], samples: list[Any]) -> None:
        """:meth:`_say_spend` for a parallel scan: from the tasks and samples its workers
        read (:class:`~watcher.summary.TaskSummary`, ``SampleSummary``)."""
        now = time.time()
        loops = loop_tokens(self.router.findings.values())
        views = []
        for t in tasks:
            mine = [SampleSpend(s.sample_id, s.epoch, s.retries + 1, s.total_tokens,
                                s.status == "running")
                    for s in samples if s.eval_id == t.eval_id]
            spend = task_spend(t, mine, loops.get(t.eval_id, (0, 0)), finished=True)
            views.append(spend)
            if self.budget is not None and mine:
                for _ in range(2):
                    f = self.budget.check(spend, mine, now)
                    if f is None:
                        break
                    self.router.route(f)
        if views:
            self.router.route(spend_notice(views, now, self.config.task_budget))

    # -- the end -------------------------------------------------------------------------

    def _source_failed(self) -> bool:
        return any(n.kind == "source_error" for n in self.router.notices)

    def _unreadable(self) -> dict[str, int]:
        """How many logs, samples (and whole sources) could not be read, by scope. A
        shared sample buffer's file is not counted: the log serves what it held."""
        counts: dict[str, int] = {}
        for n in self.router.notices:
            if n.kind == "unreadable" and n.details.get("scope") != "buffer":
                scope = str(n.details.get("scope") or "sample")
                counts[scope] = counts.get(scope, 0) + 1
        return counts

    def _say_if_incomplete(self) -> None:
        """One closing notice counting what could not be read, so a summary, a CI log
        and the JSONL all say the findings cover only part of the input."""
        counts = self._unreadable()
        if not counts:
            return
        words = {"log": "log(s)", "sample": "sample(s)", "source": "source(s)",
                 "task": "task(s)"}
        parts = [f"{n} {words.get(scope, scope)}" for scope, n in sorted(counts.items())]
        self.router.route(Notice(kind="incomplete", at=time.time(), details=dict(counts),
                                 message=f"{' and '.join(parts)} could not be read (see the "
                                         "`unreadable` notices): the findings cover the rest"))

    def _say_if_nothing_matched(self, tasks_read: bool | None = None,
                                samples_read: bool | None = None) -> None:
        """A notice when the watch read nothing because nothing matched: an empty scan of a
        mistyped task or sample looks like a clean run. A parallel scan's parent says it
        from what its workers read (a worker sees only its own share of the samples)."""
        cfg, sel = self.config, self.config.selector
        if cfg.shard is not None:
            return  # the parent says it, for every worker
        if tasks_read is None and not self.runner.watchers:
            return  # no eval at all: its own notice
        if self._source_failed() or self._unreadable():
            return  # a source that could not be read
        where = f"in {cfg.log_dir}" if cfg.log_dir else "in the watched evals"
        if cfg.log_shard is not None:
            where = f"in shard {cfg.log_shard[0]}/{cfg.log_shard[1]} of {cfg.log_dir}"
        if tasks_read is None:
            tasks_read = self._tasks_read()
        if samples_read is None:
            samples_read = any(tw.samples for sw in self.runner.watchers.values()
                               for tw in sw.tasks.values())
        if not tasks_read:
            if sel.task:
                self.router.notice("no_match", f"no task matching {sel.task!r} {where} (a "
                                   "task id prefix, an eval id prefix or the exact task name)")
            elif cfg.log_dir:
                self.router.notice("no_logs", f"no Inspect logs (.eval or .json) found {where}")
        elif sel.sample_id is not None and not samples_read:
            epoch = f" epoch {sel.epoch}" if sel.epoch is not None else ""
            self.router.notice("no_match", f"no sample {sel.sample_id!r}{epoch} in the "
                               f"matching tasks {where}")

    def _say_no_evals(self, static: bool) -> None:
        """Nothing to watch: "no eval yet" when an eval process is starting (its control
        channel is not up: a watch started with ``inspect eval`` finds none for several
        seconds), else "no evals"."""
        starting = [] if static else starting_evals()
        waiting = [e for e in starting if not e.ctl_server_off]
        off = [e for e in starting if e.ctl_server_off]
        waited = (f" (waited {self.config.wait_for_evals:g} s)"
                  if self.config.wait_for_evals else "")
        if waiting:
            pids = ", ".join(str(e.pid) for e in waiting)
            self.router.route(Notice(
                kind="no_eval_yet", at=time.time(),
                details={"pids": [e.pid for e in waiting],
                         "waited": self.config.wait_for_evals},
                message=f"no eval yet: `inspect {waiting[0].command}` (pid {pids}) is "
                        f"starting and its control channel is not up{waited}; watch again, "
                        "or use --wait SECONDS (or --follow) to wait for it"))
            return
        message = ("no running Inspect evals found (start one, or use --follow to wait, or "
                   "--log-dir for logs)")
        if off:
            message += (f"; pid {', '.join(str(e.pid) for e in off)} runs `inspect "
                        f"{off[0].command}` with --ctl-server off: it has no control channel "
                        "to watch live (read its logs with --log-dir)")
        self.router.route(Notice(kind="no_evals", at=time.time(), message=message,
                                 details={"ctl_server_off": [e.pid for e in off]}))

    def _tasks_read(self) -> bool:
        return any(sw.tasks for sw in self.runner.watchers.values())

    def _result(self, watchers: int) -> WatchResult:
        router = self.router
        code = ExitCode.FAIL_ON if router.failed else ExitCode.OK
        if code == ExitCode.OK and (self.config.log_dir or self.config.replay) and (
                self._source_failed() and not self._tasks_read()):
            code = ExitCode.SOURCE  # nothing could be read: not a clean scan
        if code == ExitCode.OK and self._unreadable():
            code = ExitCode.SOURCE  # a log or a sample could not be read: not a clean scan
        if code == ExitCode.OK:
            kinds = {n.kind for n in router.notices}
            if "no_match" in kinds:
                code = ExitCode.NO_MATCH  # a mistyped task or sample is no clean run
            elif "no_eval_yet" in kinds:
                code = ExitCode.NOT_STARTED  # the eval was not read: not yet watched
        if self.interrupted and not router.failed:
            code = ExitCode.OUTPUT_CLOSED if router.output_closed else ExitCode.INTERRUPTED
        if router.write_error is not None or router.state_error is not None:
            code = ExitCode.SOURCE  # findings could not be written: not a run to trust
        return WatchResult(code, router.findings, router.notices, self.interrupted, watchers,
                           router.output_closed, router.write_error, router.state_error)

    # -- parallel post-hoc scans -----------------------------------------------------

    def _run_parallel(self) -> WatchResult:
        """Scan a log directory with ``jobs`` forked processes, one shard of samples each
        (see :mod:`watcher.run.parallel`); what they find is routed here."""
        jobs = self.config.jobs
        # SIGTERM stops the scan as Ctrl+C does (the pool's workers are terminated; this
        # process still writes its summary and state); each worker handles its own
        previous = _install_stop_signals(_raise_interrupt)
        try:
            results = parallel.run_shards(jobs, self._scan_shard)
        except KeyboardInterrupt:
            self._stop_requested = True
            results = []
        finally:
            _restore_signals(previous)
        tasks, samples = parallel.merge_shards(results, self.router, self.state)
        if not self.interrupted:
            self._say_if_nothing_matched(tasks_read=bool(tasks), samples_read=bool(samples))
        self._say_if_incomplete()  # before the last flush: it belongs in the outputs too
        self._say_spend_of(tasks, samples)
        self.router.flush(force=True)
        self.router.drain_alerts(self.config.alert_drain)
        self._merged = RunSummary(tasks=tuple(tasks), samples=tuple(samples),
                                  findings=(), notices=(), log_dirs=(), log_files=(),
                                  started_at=self.started_at, ended_at=time.time())
        self.router.save()
        return self._result(jobs)

    def _scan_shard(self, k: int) -> parallel.ShardResult:
        """In a forked worker: scan shard ``k`` of the samples. Samples finished in an
        earlier run are skipped as in one process; everything found goes back to the
        parent, whose state decides what is news."""
        config = self.config
        mine = WatchState(finished=set(self.state.finished))
        sink = parallel.Collect()
        watch = Watch(self.engine, replace(config, shard=(k, config.jobs), min_confidence="low",
                                           fail_on=None), mine, [sink])
        watch.run()
        return sink.items, watch.summary(), mine.finished


def _raise_interrupt() -> None:
    raise KeyboardInterrupt


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _install_stop_signals(handler: Callable[[], None]) -> dict[int, Any] | None:
    """SIGINT and SIGTERM stop the watch: flush, write the summary, save state.

    SIGINT is handled explicitly, not left to Python's default: a non-interactive shell
    starts background jobs with SIGINT ignored, and Python then installs no handler, so
    ``inspect-watch watch ... &`` followed by ``kill -INT $pid`` (how scripts and coding
    agents stop a run, as they stop Inspect itself) did nothing. The previous handlers
    come back when the watch ends (:func:`_restore_signals`)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return {int(sig): signal.signal(sig, lambda *_: handler()) for sig in STOP_SIGNALS}


def _restore_signals(previous: dict[int, Any] | None) -> None:
    for sig, handler in (previous or {}).items():
        if handler is not None:
            signal.signal(sig, handler)
