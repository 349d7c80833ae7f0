"""One watch, start to finish: choose sources, run them, route what they find.

This is the library behind ``inspect-watch watch`` (and ``demo``): it picks the
sources (control sockets found by discovery, the CLI, a log directory or
replays), runs a :class:`~watcher.runner.Runner`, and on the caller's thread
decides what reaches the reporters — new findings, escalations and ended
episodes at or above ``min_confidence`` that the state has not seen — and keeps
the state file and the ``--fail-on`` verdict.

The state is saved as the watch goes, each time *before* the findings it marks
reported are written: a watcher killed outright (SIGKILL, the OOM killer) never
reports a finding twice when resumed, at the price that findings it was writing at
that instant may never be reported (at most once). Every other end (a signal, a
closed pipe, a full disk) reports each finding exactly once.
"""

from __future__ import annotations

import pickle
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from watcher.alertqueue import DRAIN_SECONDS
from watcher.discovery import list_servers
from watcher.engine import Engine
from watcher.exit_codes import ExitCode
from watcher.findings import Finding, Notice, confidence_rank
from watcher.handoff import finding_handoff
from watcher.runner import PROCESS_EXIT_GRACE, Output, Runner, RunOptions, Selector
from watcher.sources.base import TaskInfo
from watcher.state import Reported, SampleDone, WatchState
from watcher.summary import (
    RunSummary,
    SampleSummary,
    StatusSnapshot,
    TaskStatus,
    TaskSummary,
    sample_summary,
)

# At most this share of a watch's time goes to saving its state: a save costs time in
# proportion to the state's size, so the next one waits (1/share - 1) times as long as
# the last took, and the findings routed meanwhile wait with it (milliseconds for a
# state of thousands of findings).
STATE_SAVE_SHARE = 0.1


class Sink(Protocol):
    """Where the watch sends what passed the filters (the reporters)."""

    def finding(self, f: Finding) -> None: ...
    def notice(self, n: Notice) -> None: ...
    def status(self, snapshot: StatusSnapshot) -> None: ...


@dataclass
class WatchConfig:
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
    exit_grace: float = PROCESS_EXIT_GRACE  # see RunOptions.exit_grace
    jobs: int = 1  # processes for a post-hoc scan (log_dir with once); see Watch.run
    shard: tuple[int, int] | None = None  # set in a parallel scan's workers
    alert_drain: float = DRAIN_SECONDS  # seconds the end waits for queued alerts
    log_hints: bool = True  # hand-offs name the log (not one that will be deleted: the demo's)


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
    """A running watch; :meth:`run` blocks until it ends."""

    def __init__(self, engine: Engine, config: WatchConfig, state: WatchState,
                 sinks: list[Sink]) -> None:
        self.engine = engine
        self.config = config
        self.state = state
        self.sinks = sinks
        self.opts = RunOptions(poll=config.poll, once=config.once, selector=config.selector,
                               exit_grace=config.exit_grace, shard=config.shard)
        self.runner = Runner(engine, self.opts, state)
        self.findings: dict[str, Finding] = {}
        self.notices: list[Notice] = []
        self.failed = False
        self._interrupted = False
        self.output_closed = False  # a reporter's reader went away (``| head``)
        self.write_error: str | None = None  # a reporter could not write (a full disk)
        self.state_error: str | None = None  # the state file could not be saved
        self._known_pids: set[int] = set()
        self.started_at = time.time()
        # findings read from logs or recordings are about runs that are over
        self.live = not (config.log_dir or config.replay)
        self._merged: RunSummary | None = None  # a parallel scan's workers' summaries
        # routed, not yet written: each finding with what the state held for it before it
        # was marked reported (None: nothing), or _UNMARKED; written after the next save
        self._pending: list[tuple[Finding | Notice, Reported | None | object]] = []
        self._dirty = False  # the state changed since it was last saved
        self._next_save = 0.0  # time.monotonic() before which no save starts
        # runner keys of sources reading the logs of evals that exited since the last
        # watch (see _resume_exited), and those evals' ids
        self._resumed: dict[str, list[str]] = {}
        self._resumed_evals: set[str] = set()
        self._skipped: set[str] = set()  # discovery files said to be skipped

    # -- sources -----------------------------------------------------------

    def _add_static_sources(self) -> bool:
        cfg = self.config
        if cfg.log_dir:
            from watcher.sources.logfiles import LogSource

            self.runner.add("logs", LogSource(cfg.log_dir), f"log dir {cfg.log_dir}")
            return True
        if cfg.replay:
            from watcher.sources.replay import ReplaySource

            self.runner.add("replay", ReplaySource(list(cfg.replay)), "replay")
            return True
        if cfg.transport == "cli":
            from watcher.sources.cli import CliSource

            self.runner.add("cli", CliSource(), "inspect ctl")
            return True
        return False

    def _servers(self) -> list[Any]:
        """The alive control servers; a discovery file skipped as not the user's alone is
        said once, as a ``discovery`` notice."""
        skipped: list[str] = []
        servers = list_servers(skipped=skipped)
        for message in skipped:
            if message not in self._skipped:
                self._skipped.add(message)
                self._notice("discovery", message)
        return servers

    def _discover(self) -> None:
        """Add a watcher for every control server not seen before."""
        for server in self._servers():
            if server.pid in self._known_pids:
                continue
            self._known_pids.add(server.pid)
            if server.api_known and self.config.transport != "cli":
                from watcher.sources.http import HttpSource

                source: Any = HttpSource(server)
                if self.config.transport == "auto":
                    from watcher.sources.buffer import BufferedSource

                    source = BufferedSource(source)  # running samples' pages from the buffer
                self.runner.add(f"pid{server.pid}", source, f"pid {server.pid}")
            else:
                from watcher.sources.cli import CliSource

                self._notice("transport", f"pid {server.pid} speaks control API "
                             f"{server.api_version}, newer than this watcher knows; "
                             "reading it through `inspect ctl` instead (slower)")
                self.runner.add(f"pid{server.pid}", CliSource(pid=server.pid),
                                f"pid {server.pid} (cli)")

    # -- routing -------------------------------------------------------------

    def _resume_exited(self) -> None:
        """Read, from their logs, the live tasks an earlier watch left unfinished whose eval
        has exited since (``watch --once`` called while an eval ran, then after it ended):
        their open findings end, and what happened after that watch is reported."""
        from watcher.sources.logfiles import LogSource

        alive = {s.pid for s in self._servers()}
        sel = self.config.selector
        by_log: dict[str, list[str]] = {}
        for eval_id, entry in self.state.open_evals.items():
            log, pid = entry.get("log"), entry.get("pid")
            info = TaskInfo(eval_id=eval_id, task=str(entry.get("task") or ""),
                            task_id=str(entry.get("task_id") or ""), model="")
            if not log or (isinstance(pid, int) and pid in alive) or not sel.task_matches(info):
                continue
            by_log.setdefault(str(log), []).append(eval_id)
        for i, (log, eval_ids) in enumerate(sorted(by_log.items())):
            key = f"exited{i}"
            self._resumed[key] = eval_ids
            self._resumed_evals.update(eval_ids)
            tasks = ", ".join(sorted({str(self.state.open_evals[e].get("task"))
                                      for e in eval_ids}))
            self._notice("process_exited", f"the eval of task {tasks} exited since the last "
                         f"watch; reading the rest of it from its log {log}")
            self.runner.add(key, LogSource(log), f"log {log}", once=True)

    def _open_evals(self) -> dict[str, dict[str, Any]]:
        """What the state remembers of live tasks not read to their end: the earlier
        entries, less those read to their end (live, or from the log) in this watch."""
        out = dict(self.state.open_evals)
        for key, sw in list(self.runner.watchers.items()):
            if key in self._resumed:
                if sw.finished:  # the log is all there is: read once (or said unreadable)
                    for eval_id in self._resumed[key]:
                        out.pop(eval_id, None)
                continue
            if not self.live:
                continue
            for tw in list(sw.tasks.values()):
                t = tw.task
                if t.finished and t.eval_id and all(s.done for s in list(tw.streams.values())):
                    out.pop(t.eval_id, None)
                elif t.log_location:
                    out[t.eval_id] = {"log": t.log_location, "pid": t.pid, "task": t.task,
                                      "task_id": t.task_id}
        return out

    # -- routing -------------------------------------------------------------

    def _notice(self, kind: str, message: str) -> None:
        self._route(Notice(kind=kind, message=message, at=time.time()))

    def _route(self, item: Output) -> None:
        """Decide what ``item`` means for the state and the reporters; what is to be
        written waits in ``_pending`` for :meth:`_flush`, in order."""
        if isinstance(item, SampleDone):
            if not self.output_failed:  # else its findings may not all have been written
                if item.reopened:
                    self.state.finished.discard(item.key)
                else:
                    self.state.finished.add(item.key)
                self._dirty = True
            return
        if isinstance(item, Notice):
            self.notices.append(item)
            self._pending.append((item, _UNMARKED))
            return
        # the hand-off names what a person can do (cancel commands, kill -INT PID) for
        # every reporter, JSONL included, so an agent reading findings gets them too
        live = self.live and item.sample.eval_id not in self._resumed_evals
        item = replace(item, handoff=finding_handoff(item, live=live,
                                                     log_hint=self.config.log_hints))
        self.findings[item.id] = item
        if confidence_rank(item.confidence) < confidence_rank(self.config.min_confidence):
            return
        if not self.state.should_report(item):
            return
        if self.config.fail_on and confidence_rank(item.confidence) >= confidence_rank(
            self.config.fail_on
        ):
            self.failed = True
        if self.output_failed:
            self._pending.append((item, _UNMARKED))  # to the reporters left; not marked
            return
        # marked now (a later snapshot of the same finding is judged against it), saved
        # before it is written (see _flush), unmarked if a reporter refuses it
        self._pending.append((item, self.state.reported.get(item.id)))
        self.state.mark_reported(item)
        self._dirty = True

    def _flush(self, force: bool = False) -> None:
        """Save the state if it changed, then write what was routed since.

        Saves are throttled (:data:`STATE_SAVE_SHARE`) unless ``force``: until the next
        save is due, what was routed waits. A finding a reporter refused (a closed pipe,
        a full disk) is unmarked again, so the next run with this state reports it.
        """
        if self._dirty:
            started = time.monotonic()
            if not force and started < self._next_save:
                return
            self._save()
            took = time.monotonic() - started
            self._next_save = started + took / STATE_SAVE_SHARE
        pending, self._pending = self._pending, []
        refused: list[tuple[Finding, Reported | None]] = []
        for item, prior in pending:
            if isinstance(item, Notice):
                self._send("notice", item)
                continue
            # a finding the state could not remember is not written: the next run has it
            if self.state_error is not None or not self._send("finding", item):
                if prior is not _UNMARKED:
                    refused.append((item, prior if isinstance(prior, Reported) else None))
        for f, before in reversed(refused):  # one finding twice in a batch: undo in turn
            if before is None:
                self.state.reported.pop(f.id, None)
            else:
                self.state.reported[f.id] = before
            self._dirty = True

    def _save(self) -> None:
        """Save the state. A save that fails stops the watch: what the state cannot
        remember must not be reported (the watch says why at the end)."""
        self._dirty = False
        if self.state.path is None or self.state_error is not None:
            return
        if self.live or self._resumed:
            self.state.open_evals = self._open_evals()
        try:
            self.state.save()
        except OSError as e:
            self.state_error = f"{self.state.path}: {e.strerror or e}"
            self._interrupted = True

    def _send(self, method: str, what: Finding | Notice | StatusSnapshot) -> bool:
        """Call ``method`` with ``what`` on every reporter; False if one could not take it.

        A reporter whose reader has gone (EPIPE: ``inspect-watch watch | head``) or that
        cannot write (a full disk) is dropped and the watch ends as if interrupted: it
        saves its state and stops, instead of a traceback that would skip the state file.
        What it could not take is not marked reported, so the next run reports it.
        """
        ok = not self.output_failed  # once one is dropped, nothing more reaches them all
        for sink in list(self.sinks):
            try:
                getattr(sink, method)(what)
            except OSError as e:
                self.sinks.remove(sink)
                if isinstance(e, BrokenPipeError):
                    self.output_closed = True
                else:
                    self.write_error = str(e)
                self._interrupted = True
                ok = False
        return ok

    def _alert_notices(self) -> None:
        """Route what the alert sinks (``--on-finding``, ``--notify``) have to say: drops,
        failures. They run on their own threads, so they are asked, as sources are."""
        for sink in list(self.sinks):
            pop = getattr(sink, "pop_notices", None)
            if pop is not None:
                for n in pop():
                    self._route(n)

    def _drain_alerts(self) -> None:
        """The watch is ending: give queued alerts a bounded time, then say what was lost."""
        for sink in list(self.sinks):
            drain = getattr(sink, "drain", None)
            if drain is not None:
                drain(self.config.alert_drain)
        self._alert_notices()

    def status(self) -> StatusSnapshot:
        """A snapshot for the live status area."""
        tasks = []
        for sw in self.runner.watchers.values():
            for tw in list(sw.tasks.values()):
                rows = list(tw.rows.values())
                tasks.append(TaskStatus(
                    task=tw.task.task, model=tw.task.model, eval_id=tw.task.eval_id,
                    running=sum(r.status == "running" for r in rows),
                    done=sum(r.status == "completed" for r in rows),
                    errored=sum(r.status == "error" for r in rows),
                    total=tw.task.counts.get("total") or len(rows) or None,
                    finished=tw.finished,
                ))
        by_conf: dict[str, int] = {"high": 0, "medium": 0, "low": 0}
        for f in self.findings.values():
            if confidence_rank(f.confidence) >= confidence_rank(self.config.min_confidence):
                by_conf[f.confidence] = by_conf.get(f.confidence, 0) + 1
        polls = [sw.last_poll_at for sw in self.runner.watchers.values() if sw.last_poll_at]
        return StatusSnapshot(
            tasks=tuple(tasks), findings_by_confidence=by_conf, now=time.time(),
            last_poll_at=max(polls) if polls else None,
            polls=sum(sw.cycles for sw in self.runner.watchers.values()),
            notices=len(self.notices),
        )

    def summary(self) -> RunSummary:
        """What the end-of-run reports show: tasks, samples, findings, notices."""
        tasks: list[TaskSummary] = list(self._merged.tasks) if self._merged else []
        samples: list[SampleSummary] = list(self._merged.samples) if self._merged else []
        for sw in self.runner.watchers.values():
            for tw in sw.tasks.values():
                t = tw.task
                tasks.append(TaskSummary(task=t.task, model=t.model, eval_id=t.eval_id,
                                         task_id=t.task_id, status=t.status,
                                         total_samples=t.counts.get("total"),
                                         scores=dict(t.raw.get("scores") or {}),
                                         log_location=t.log_location))
                for (sid, epoch), row in tw.rows.items():
                    samples.append(sample_summary(t, sid, epoch, row.raw))
        shown = [f for f in self.findings.values()
                 if confidence_rank(f.confidence) >= confidence_rank(self.config.min_confidence)]
        logs = sorted({t.log_location for t in tasks if t.log_location})
        return RunSummary(tasks=tuple(tasks), samples=tuple(samples),
                          findings=tuple(sorted(shown, key=Finding.sort_key)),
                          notices=tuple(self.notices),
                          log_dirs=(self.config.log_dir,) if self.config.log_dir else (),
                          log_files=tuple(logs), started_at=self.started_at,
                          ended_at=time.time())

    # -- the loop --------------------------------------------------------------

    def run(self, on_tick: Callable[[], None] | None = None) -> WatchResult:
        cfg = self.config
        if cfg.jobs > 1 and cfg.log_dir and cfg.once and cfg.shard is None:
            return self._run_parallel()
        static = self._add_static_sources()
        if not static:
            self._discover()
        if self.live and cfg.shard is None and self.state.open_evals:
            self._resume_exited()
        deadline = time.time() + self.config.wait_for_evals
        # a parallel scan's worker leaves signals to its parent (see _worker_signals)
        previous = _install_sigterm(self.request_stop) if cfg.shard is None else None
        finished_before = set(self.state.finished)
        try:
            last_status = 0.0
            last_discover = time.time()
            while True:
                for item in self.runner.drain(timeout=min(0.2, self.config.poll)):
                    self._route(item)
                self._flush()
                self._alert_notices()
                now = time.time()
                if not static and not self.config.once and now - last_discover >= self.config.poll:
                    last_discover = now
                    self._discover()
                if now - last_status >= 1.0:
                    last_status = now
                    snap = self.status()
                    self._send("status", snap)
                    if on_tick:
                        on_tick()
                if self._interrupted:
                    break
                if self.runner.active():
                    continue
                if self.runner.watchers and not self.config.follow:
                    break
                if not self.runner.watchers and not self.config.follow and now >= deadline:
                    self._notice("no_evals", "no running Inspect evals found "
                                 "(start one, or use --follow to wait, or --log-dir for logs)")
                    break
                if self.config.once and self.runner.watchers:
                    break
        except KeyboardInterrupt:
            self._interrupted = True
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
            self.runner.shutdown()
            for item in self.runner.drain(timeout=0.0):
                self._route(item)
            if not self._interrupted:
                self._say_if_nothing_matched()
            if cfg.shard is None:  # a parallel scan's parent says it for all its workers
                self._say_if_incomplete()
            self._flush(force=True)
            self._drain_alerts()
            if self.output_failed:
                # findings of samples read in this run may not have been written: the
                # next run reads those samples again (what was written is not repeated)
                self.state.finished = finished_before
            else:
                self.state.task_as_of.update(
                    {tw.task.eval_id: tw.as_of for sw in self.runner.watchers.values()
                     for tw in sw.tasks.values() if tw.as_of is not None})
            self._save()
        return self._result(len(self.runner.watchers))

    def request_stop(self) -> None:
        self._interrupted = True

    @property
    def output_failed(self) -> bool:
        """A reporter was dropped (its pipe closed, or it could not write)."""
        return self.output_closed or self.write_error is not None

    def _source_failed(self) -> bool:
        return any(n.kind == "source_error" for n in self.notices)

    def _unreadable(self) -> dict[str, int]:
        """How many logs, samples (and whole sources) could not be read, by scope."""
        counts: dict[str, int] = {}
        for n in self.notices:
            if n.kind == "unreadable":
                scope = str(n.details.get("scope") or "sample")
                counts[scope] = counts.get(scope, 0) + 1
        return counts

    def _say_if_incomplete(self) -> None:
        """One closing notice counting what could not be read, so a summary, a CI log
        and the JSONL all say the findings cover only part of the input."""
        counts = self._unreadable()
        if not counts:
            return
        words = {"log": "log(s)", "sample": "sample(s)", "source": "source(s)"}
        parts = [f"{n} {words.get(scope, scope)}" for scope, n in sorted(counts.items())]
        self._route(Notice(kind="incomplete", at=time.time(), details=dict(counts),
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
        if tasks_read is None:
            tasks_read = self._tasks_read()
        if samples_read is None:
            samples_read = any(tw.streams for sw in self.runner.watchers.values()
                               for tw in sw.tasks.values())
        if not tasks_read:
            if sel.task:
                self._notice("no_match", f"no task matching {sel.task!r} {where} (a task id "
                             "prefix, an eval id prefix or the exact task name)")
            elif cfg.log_dir:
                self._notice("no_logs", f"no Inspect logs (.eval or .json) found {where}")
        elif sel.sample_id is not None and not samples_read:
            epoch = f" epoch {sel.epoch}" if sel.epoch is not None else ""
            self._notice("no_match", f"no sample {sel.sample_id!r}{epoch} in the matching "
                         f"tasks {where}")

    def _tasks_read(self) -> bool:
        return any(sw.tasks for sw in self.runner.watchers.values())

    def _result(self, watchers: int) -> WatchResult:
        code = ExitCode.FAIL_ON if self.failed else ExitCode.OK
        if code == ExitCode.OK and (self.config.log_dir or self.config.replay) and (
                self._source_failed() and not self._tasks_read()):
            code = ExitCode.SOURCE  # nothing could be read: not a clean scan
        if code == ExitCode.OK and self._unreadable():
            code = ExitCode.SOURCE  # a log or a sample could not be read: not a clean scan
        if self._interrupted and not self.failed:
            code = ExitCode.OUTPUT_CLOSED if self.output_closed else ExitCode.INTERRUPTED
        if self.write_error is not None or self.state_error is not None:
            code = ExitCode.SOURCE  # findings could not be written: not a run to trust
        return WatchResult(code, self.findings, self.notices, self._interrupted, watchers,
                           self.output_closed, self.write_error, self.state_error)

    # -- parallel post-hoc scans -----------------------------------------------------

    def _run_parallel(self) -> WatchResult:
        """Scan a log directory with ``jobs`` forked processes, one shard of samples each.

        Rules are per sample, so samples split cleanly: each worker reads every log's
        listing (so sample rules compare against the whole task, as in one process)
        but streams only the samples of its shard. Workers are forked after the rules
        are compiled, so they start at once; what they find comes back here and is
        routed as usual (state, filters, reporters).
        """
        import multiprocessing

        from watcher.sources import logfiles  # noqa: F401  (imported once, inherited)

        global _FORKED
        jobs = self.config.jobs
        _FORKED = (self.engine, self.config, self.state)
        # SIGTERM stops the scan as Ctrl+C does (the pool's workers are terminated; this
        # process still writes its summary and state); each worker handles its own
        previous = _install_sigterm(_raise_interrupt)
        try:
            ctx = multiprocessing.get_context("fork")
            with ctx.Pool(jobs, initializer=_worker_signals) as pool:
                # workers pickle their results themselves: a result the pool's own
                # thread failed to unpickle would leave map() waiting for ever; here the
                # error is raised
                results = [pickle.loads(b) for b in pool.map(_shard_worker, range(jobs))]
        except KeyboardInterrupt:
            self._interrupted = True
            results = []
        finally:
            _FORKED = None
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
        seen_notices: set[tuple[str, str]] = set()
        tasks: dict[str, TaskSummary] = {}
        samples: dict[tuple[str, str, int], SampleSummary] = {}
        for outputs, summary, finished in results:
            for item in outputs:
                if isinstance(item, Notice):
                    if (item.kind, item.message) in seen_notices:
                        continue  # every worker reads every listing: say it once
                    seen_notices.add((item.kind, item.message))
                self._route(item)
            self._flush(force=True)
            for t in summary.tasks:
                tasks.setdefault(t.eval_id, t)
            for smp in summary.samples:
                samples.setdefault((smp.eval_id, smp.sample_id, smp.epoch), smp)
            if not self.output_failed:
                self.state.finished.update(finished)  # else read them again next run
        if not self._interrupted:
            self._say_if_nothing_matched(tasks_read=bool(tasks), samples_read=bool(samples))
            self._flush(force=True)
        self._drain_alerts()
        self._merged = RunSummary(tasks=tuple(tasks.values()), samples=tuple(samples.values()),
                                  findings=(), notices=(), log_dirs=(), log_files=(),
                                  started_at=self.started_at, ended_at=time.time())
        self._say_if_incomplete()
        self._save()
        return self._result(jobs)


class _Collect:
    """A worker's sink: everything the runner emitted, in order, for the parent."""

    def __init__(self) -> None:
        self.items: list[Finding | Notice] = []

    def finding(self, f: Finding) -> None:
        self.items.append(f)

    def notice(self, n: Notice) -> None:
        self.items.append(n)

    def status(self, snapshot: StatusSnapshot) -> None:
        return None


# (engine, config, state) for forked workers: set just before the fork, so nothing that
# cannot be pickled (compiled rules) has to cross a process boundary
_FORKED: tuple[Engine, WatchConfig, WatchState] | None = None

_UNMARKED = object()  # a pending item the state did not mark reported


def _shard_worker(k: int) -> bytes:
    """Scan shard ``k``; its (outputs, summary, finished samples), pickled."""
    assert _FORKED is not None
    from watcher.sources.logfiles import forget_open_zips

    forget_open_zips()  # inherited zip handles share file offsets with the parent's
    engine, config, state = _FORKED
    # samples finished in an earlier run are skipped as in one process; everything found
    # goes back to the parent, whose state decides what is news
    mine = WatchState(finished=set(state.finished))
    sink = _Collect()
    watch = Watch(engine, replace(config, shard=(k, config.jobs), min_confidence="low",
                                  fail_on=None), mine, [sink])
    watch.run()
    return pickle.dumps((sink.items, watch.summary(), mine.finished))


def _raise_interrupt() -> None:
    raise KeyboardInterrupt


def _worker_signals() -> None:
    """In a parallel scan's worker: Ctrl+C at a terminal reaches the whole process group,
    but only the parent acts on it; SIGTERM (the pool's ``terminate``) ends the worker at
    once. A worker that handled either would keep the pool waiting for it for ever."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _install_sigterm(handler: Callable[[], None]) -> Any:
    """SIGTERM stops the watch like Ctrl+C: flush, write the summary, save state."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, lambda *_: handler())
