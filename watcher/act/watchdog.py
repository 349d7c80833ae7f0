"""The watchdog: carries out the action policy on live findings through the eval's own
control channel, and writes an ``action`` record for every step (docs/watchdog.md).

It is a :class:`~watcher.run.router.Decider`: the router shows it each finding that
is news (and, through ``update``, every later snapshot). What takes time (reading the
sample, the grace, the requests) happens on its own thread; its records reach the
outputs through ``pop_notices`` on the routing thread, right after the findings.

For one finding episode, at most once, in this order:

1. The policy's block for the finding applies (:meth:`Policy.lookup`), at its
   confidence (never ``low``) and with its ``when`` facts holding.
2. The grace: the sample is read (``GET /evals/{id}/sample``) every poll until N more
   events or T seconds have passed (whichever first); the finding must still be open
   (no ``ended`` snapshot) and the sample still running the same attempt (same
   ``retries``, started before the finding's first evidence, no cancel pending).
3. Limits: at most ``max_actions`` a watch and ``max_per_task`` a task.
4. What the server supports: a control API of 3 or more (strict mutations: a
   parameter it did not know, such as ``dry_run``, is refused, never ignored), and
   the route itself (a stock 404 means an older Inspect: the watchdog says so once
   and leaves the finding to the hand-off).
5. The dry run (``dry_run=true``): the server says what would change. With
   ``--dry-run`` that answer is the last step.
6. The state (``--state``) remembers the episode, saved before the request, so a
   restarted watch never acts on it twice.
7. The sample is read once more, then the request is sent; the record says what the
   server answered, in its words. A cancel is "requested" until the sample's row shows
   it ended by the cancel (a later ``confirmed`` record).

A whole run (``run: {interrupt: …}``) is interrupted with ``kill -INT PID`` (the
graceful shutdown, as Ctrl+C) once its share of samples with ``high`` findings is
reached; it is never sent SIGTERM or SIGKILL.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from watcher.act import MAX_ACTIONS, MAX_PER_TASK
from watcher.act.control import ControlClient
from watcher.act.policy import ActSpec, InterruptSpec, Policy
from watcher.act.verbs import CANCEL_SAMPLE, INTERRUPT_RUN, VERBS, said, scope_of
from watcher.discovery import ControlServer, pid_alive, read_server, serving_pid
from watcher.findings import Action, Finding, Notice, SampleRef, confidence_rank
from watcher.handoff import (
    MARKERS,
    act_handoff_text,
    action,
    finding_actions,
    finding_handoff,
    process_running,
)
from watcher.reporters.formatting import fmt_clock
from watcher.run.values import Origin
from watcher.sanitize import clean_text
from watcher.sources.base import (
    NotFound,
    ProcessGone,
    SourceBusy,
    SourceError,
)
from watcher.sources.http import ControlAnswer, HttpSource
from watcher.state import WatchState

# the only signal the watchdog ever sends (never SIGTERM, never SIGKILL)
INTERRUPT_SIGNAL = signal.SIGINT
# control API versions from which a mutation's unknown parameter is refused (400) and
# never silently ignored: below it, a dry_run the server did not know would act
STRICT_SINCE = 3
# a grace in events only, on a server whose rows count no events, is met after this long
EVENTS_UNKNOWN_GRACE = 60.0
CONFIRM_SECONDS = 300.0  # how long a requested cancel is watched for the sample's end
STATE_WAIT = 10.0  # how long a request waits for the state to remember it
READ_FAILURES = 5  # reads of a sample in a row that may fail before the action is given up
ANSWER_MAX = 2000  # characters of the server's words kept in an answer's strings
NEARBY_LINES = 5  # a hand-off names at most this many actions taken for other findings


@dataclass
class _Pending:
    """One action on its way: a finding episode (or a run) and where it stands."""

    key: str  # the finding id, or "run:<pid>"
    finding: Finding
    server: ControlServer
    spec: ActSpec | None  # None: the run's interrupt
    since: float  # when its conditions first held (the grace runs from here)
    ready: bool = True  # its `when` facts hold
    events0: int | None = None
    checks: int = 0  # checks since the grace was met (1: the first), failed ones too
    phase: str = "grace"  # grace | confirm
    requested_at: float = 0.0
    failures: int = 0
    counted: bool = False  # counted against --act-max / --act-max-task
    args: dict[str, Any] = field(default_factory=dict)
    asked: bool = False  # someone asked to act now (Watchdog.expedite): no grace


class Watchdog:
    """A :class:`~watcher.run.router.Decider` acting on findings as ``policy`` says.

    ``dry_run`` stops before the last step; ``poll`` is how often pending actions are
    checked; ``state`` remembers acted episodes across watches and ``save`` (set by
    whoever saves the state: the router) persists it, true if it could; ``clock`` is
    the time.
    """

    def __init__(self, policy: Policy, *, dry_run: bool = False, poll: float = 1.0,
                 max_actions: int = MAX_ACTIONS, max_per_task: int = MAX_PER_TASK,
                 state: WatchState | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.policy = policy
        self.dry_run = dry_run
        self.mode = "dry-run" if dry_run else "act"
        self.poll = poll
        self.max_actions = max_actions
        self.max_per_task = max_per_task
        self.state = state if state is not None else WatchState()
        self.save: Callable[[], bool] = lambda: True
        self.clock = clock
        self._lock = threading.Lock()
        self._pending: dict[str, _Pending] = {}
        self._records: list[Notice] = []
        self._acted: set[str] = set()  # episodes acted on in this watch (dry runs too)
        self._settled: set[str] = set()  # episodes whose action this watch has finished
        self._done: dict[str, list[str]] = {}  # finding id -> what was done, in words
        # target (sample, task or run; see _targets) -> the same, for its other findings
        self._around: dict[str, list[str]] = {}
        self._actions = 0
        self._per_task: dict[str, int] = {}
        self._clients: dict[int, HttpSource] = {}
        self._cannot: dict[tuple[int, str], str] = {}  # (pid, verb) -> why not (said once)
        self._high: dict[int, set[tuple[str, str, int]]] = {}  # pid -> samples with high
        self._intents: list[tuple[str, dict[str, Any], threading.Event, list[str]]] = []
        # sample attempts whose cancel this watchdog sent -> when (just before the
        # request): what begins on them from then on is the cancel's doing (absorbs)
        self._cancelled: dict[tuple[str, str, int, int], float] = {}
        self._interrupted: dict[int, float] = {}  # pid -> when the run was interrupted
        self._absorbed: set[str] = set()  # finding ids said to be an action's consequence
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the Decider ---------------------------------------------------------------

    def decide(self, finding: Finding, origin: Origin | None) -> Sequence[Notice]:
        """Note the finding; what is done about it happens on the watchdog's thread."""
        try:
            return self._decide(finding, origin)
        except Exception as e:  # noqa: BLE001 - a bug here must not end the watch
            return [self._record(finding, None, "failed", f"internal error: {e!r}",
                                 reason="internal_error")]

    def _decide(self, f: Finding, origin: Origin | None) -> list[Notice]:
        if f.status == "ended":
            return self._ended(f)
        with self._lock:
            pending = self._pending.get(f.id)
            if pending is not None:
                pending.finding = f
                self._check_ready(pending)
                return []
        server = origin.server if origin is not None else None
        if server is None or confidence_rank(f.confidence) < confidence_rank("medium"):
            return []  # logs, replays and finished runs are never acted on; nor is low
        out: list[Notice] = []
        run = self._note_high(f, server)
        if run is not None:
            out += run
        spec = self.policy.lookup(f)
        if spec is None or confidence_rank(f.confidence) < confidence_rank(spec.confidence):
            return out
        if f.id in self._acted or f.id in self._settled:
            return out  # at most one action (or attempt) per finding episode
        if f.id in self.state.acted:
            self._acted.add(f.id)
            earlier = self.state.acted[f.id]
            when = fmt_clock(earlier.get("at")) if isinstance(earlier.get("at"), float) else ""
            return [*out, self._record(
                f, spec, "skipped", f"an earlier watch with this --state already acted on this "
                f"finding episode ({earlier.get('verb', '?')} {when}): not acting twice",
                reason="already_acted")]
        pending = _Pending(f.id, f, server, spec, since=self.clock(), args=dict(spec.args))
        with self._lock:
            self._pending[f.id] = pending
            self._check_ready(pending)
        self._start()
        return out

    def absorbs(self, f: Finding, origin: Origin | None = None) -> list[Notice] | None:
        """A finding on a sample this watchdog cancelled whose first evidence came after
        the request (the ``operator`` limit the cancel set, as ``sample-limit`` and
        ``limit-row``, whose limit is ``operator``; the model call it interrupted, as
        failing API calls) is the
        action's consequence, not a new problem: it is recorded once as an
        ``action_consequence`` notice beside the action's records, and not reported
        (nor alerted, nor counted for ``--fail-on``). ``None``: not this watchdog's."""
        s = f.sample
        with self._lock:
            verb, what = CANCEL_SAMPLE.name, "the sample's cancel"
            at = self._cancelled.get((s.eval_id, s.sample_id, s.epoch, s.attempt))
            run_at = self._interrupted.get(s.pid) if s.pid is not None else None
            if run_at is not None and (at is None or run_at < at):
                verb, what, at = INTERRUPT_RUN, f"the run's interrupt (pid {s.pid})", run_at
            facts = f.evidence.facts
            # a row-driven finding's time is the sample's last event before the row came,
            # so the limit the cancel set is told by its kind, `operator` (Inspect's word
            # for a person's or a tool's cancel)
            operator = "operator" in (facts.get("limit"), facts.get("limit_type"))
            if at is None or (f.first_seen < at and not operator):
                return None
            if f.id in self._absorbed:
                return []
            self._absorbed.add(f.id)
        return [Notice(kind="action_consequence", sample=s, at=self.clock(),
                       message=f"not reported as a finding: "
                               f"{clean_text(f.rule, 100, one_line=True)} ({f.confidence}) "
                               f"began at {fmt_clock(f.first_seen)}, after the watchdog "
                               f"requested {what} at {fmt_clock(at)}: a consequence of "
                               "that action",
                       details={"finding_id": f.id, "rule": f.rule,
                                "confidence": f.confidence, "action_at": at, "verb": verb})]

    def update(self, f: Finding, origin: Origin | None = None) -> None:
        """A snapshot that is not news: its spend grew, or an earlier watch with this
        state reported it (this watch decides about it all the same, once)."""
        records = self.decide(f, origin)
        if records:
            with self._lock:
                self._records += records

    def _check_ready(self, p: _Pending) -> None:
        """Whether the pending action's ``when`` facts hold now (its grace starts then)."""
        if p.spec is None:
            return
        ready = p.spec.wants(p.finding)
        if ready and not p.ready:
            p.since = self.clock()
            p.events0 = None
        p.ready = ready
        if ready:
            self._wake.set()

    def _ended(self, f: Finding) -> list[Notice]:
        """The finding ended: an action still in its grace is dropped (said)."""
        with self._lock:
            p = self._pending.get(f.id)
            if p is None or p.phase != "grace":
                return []
            del self._pending[f.id]
            self._settled.add(f.id)
        if not p.ready:
            return []  # its conditions never held: nothing was planned
        return [self._record(f, p.spec, "skipped", "the finding ended before the grace was "
                             "over (its rule no longer sees it): nothing was done",
                             reason="finding_ended")]

    def pop_notices(self) -> list[Notice]:
        """The records written since the last call; remembers what is about to be acted
        on in the state (saved before the request goes out)."""
        with self._lock:
            intents, self._intents = self._intents, []
        for key, entry, done, answer in intents:
            self.state.acted[key] = entry
            answer.append("ok" if self.save() else "unsaved")
            done.set()
        with self._lock:
            out, self._records = self._records, []
        return out

    def drain(self, timeout: float) -> None:
        """The watch is ending: stop checking, say what was left undone."""
        self._stop.set()
        self._wake.set()
        with self._lock:  # what waits for the state now would wait for nobody
            intents, self._intents = self._intents, []
        for _key, _entry, done, answer in intents:
            answer.append("ended")
            done.set()
        if self._thread is not None:
            self._thread.join(max(0.1, min(timeout, 10.0)))
        with self._lock:
            left, self._pending = list(self._pending.values()), {}
        for p in left:
            if p.phase == "confirm" and self._confirm_from_log(p):
                continue
            if p.phase == "confirm":
                self._emit(p.finding, p.spec, "unconfirmed", "the watch ended before the "
                           "sample's row showed it end by the cancel", reason="watch_ended",
                           args=p.args)
            elif p.ready:
                self._emit(p.finding, p.spec, "skipped", "the watch ended before the grace "
                           "was over: nothing was done", reason="watch_ended", args=p.args)
        for client in list(self._clients.values()):
            client.close()

    def note(self, record: Notice) -> None:
        """An audit record of an action taken beside the policy's findings path (the MCP
        server's ``launch`` and ``release`` under ``--act``): written with the others."""
        with self._lock:
            self._records.append(record)

    def expedite(self, f: Finding, origin: Origin | None) -> str:
        """Act on ``f`` now, as the policy says, without waiting for its grace: a person
        (or their agent, ``inspect-watch mcp --act``) asked. Every other step is the same:
        the policy must name an action for the finding at its confidence and its
        conditions must hold, then the limits, what the server supports, its dry run,
        the state and the audit records. Returns what was decided, in words; what is
        done is said by the action records."""
        if origin is None or origin.server is None:
            return "not acting: the finding was not read from a live eval's control channel"
        spec = self.policy.lookup(f)
        if spec is None or confidence_rank(f.confidence) < confidence_rank(spec.confidence):
            return (f"not acting: the action policy names no action for {f.rule} at "
                    f"{f.confidence} (the finding keeps its hand-off)")
        if f.id in self._acted or f.id in self._settled or f.id in self.state.acted:
            return "not acting: this finding episode was acted on already (see its actions)"
        with self._lock:
            pending = self._pending.get(f.id)
        if pending is None:
            records = self._decide(f, origin)
            if records:
                with self._lock:
                    self._records += records
            with self._lock:
                pending = self._pending.get(f.id)
        if pending is None:
            return "not acting: the watchdog does not act on this finding (see its actions)"
        if not pending.ready:
            return (f"not acting yet: the policy's conditions for {f.rule} do not hold "
                    f"({spec.describe()})")
        pending.asked = True
        self._wake.set()
        return (f"asked: {spec.describe()}, now, after a dry run"
                + (" (--dry-run: only the dry run)" if self.dry_run else ""))

    # -- hand-offs ---------------------------------------------------------------------

    def handoff(self, f: Finding, live: bool, log_hint: bool, remote: bool = False) -> str:
        """The hand-off of ``f`` in this mode: what the policy will do, what was done
        (an eval read without its control channel, or one that has exited, cannot be
        acted on from here)."""
        if not live or remote or any(marker in f.handoff for marker in MARKERS) or (
                process_running(f.sample.pid) is False):
            return finding_handoff(f, live=live, log_hint=log_hint, remote=remote,
                                   exited=None)
        with self._lock:
            done = list(self._done.get(f.id, ()))
            nearby = [line for line in dict.fromkeys(
                line for key in _targets(f.sample, "run")
                for line in self._around.get(key, ())) if line not in done]
        plan = self._plan(f)[1]
        generated = act_handoff_text(f, mode=self.mode, plan=plan, done=done,
                                     log_hint=log_hint, nearby=nearby[-NEARBY_LINES:])
        return f"{f.handoff.rstrip()}\n{generated}" if f.handoff.strip() else generated

    def _plan(self, f: Finding) -> tuple[ActSpec | None, str | None]:
        """The policy's block for ``f`` at its confidence, and what it will do, in words
        (``None``: nothing)."""
        spec = self.policy.lookup(f)
        if spec is None or confidence_rank(f.confidence) < confidence_rank(spec.confidence):
            return None, None
        why_not = self._cannot.get((f.sample.pid or 0, spec.verb))
        if why_not:
            return spec, f"{spec.describe()}, but it cannot act on this eval ({why_not})"
        dry = " (a dry run: it only asks the server what would change)" if self.dry_run else ""
        if f.category == "budget" and VERBS[spec.verb].about_task:
            # about the task: whichever of its samples the finding names need not run on
            waited = (f"after {spec.grace_words()}, " if spec.grace_events or spec.grace_seconds
                      else "at once, ")
            return spec, f"{waited}{spec.describe()}{dry}"
        conditions = "" if not spec.facts else " its conditions hold,"
        return spec, (f"if{conditions} the finding still holds after "
                      f"{spec.grace_words()} and the sample is still running this "
                      f"attempt, {spec.describe()}"
                      + (" (a dry run: it only asks the server what would change)"
                         if self.dry_run else ""))

    def actions(self, f: Finding, live: bool, log_hint: bool,
                remote: bool = False) -> list[dict[str, Any]]:
        """The finding's ``actions`` (:func:`~watcher.handoff.finding_actions`), the
        watchdog's own first when its policy has one for it: ``status`` ``planned``
        (its conditions and grace to come), or ``taken`` (an action record with this
        finding's id says what the server answered)."""
        out = finding_actions(f, live=live, log_hint=log_hint, remote=remote)
        if not live or remote or process_running(f.sample.pid) is False:
            return out
        spec, plan = self._plan(f)
        with self._lock:
            done = list(self._done.get(f.id, ()))
        if spec is None or not (plan or done):
            return out
        scope = scope_of(spec.verb)
        mine = action(spec.verb, "watchdog", scope, f, changes=not self.dry_run,
                      note="; ".join(done) if done else (plan or ""),
                      status="taken" if done else "planned", mode=self.mode,
                      args=dict(spec.args))
        return [mine, *out]

    # -- the whole run -----------------------------------------------------------------

    def _note_high(self, f: Finding, server: ControlServer) -> list[Notice]:
        """Count a high finding's sample toward the run's interrupt; queue the interrupt
        once enough samples of the run have one (the share is checked on the thread)."""
        spec = self.policy.interrupt
        if spec is None or f.confidence != "high" or (
                spec.categories is not None and f.category not in spec.categories):
            return []
        s = f.sample
        seen = self._high.setdefault(server.pid, set())
        seen.add((s.eval_id, s.sample_id, s.epoch))
        key = f"run:{server.pid}"
        if len(seen) < spec.min_samples or key in self._acted or key in self._settled:
            return []
        with self._lock:
            if key in self._pending:
                self._pending[key].finding = f
                return []
        if key in self.state.acted:
            self._acted.add(key)
            return [self._record(f, None, "skipped", "an earlier watch with this --state "
                                 f"already interrupted pid {server.pid}: not again",
                                 reason="already_acted", scope="run", verb=INTERRUPT_RUN)]
        with self._lock:
            self._pending[key] = _Pending(key, f, server, None, since=self.clock(),
                                          args={"signal": "SIGINT"})
        self._start()
        return []

    # -- the thread ---------------------------------------------------------------------

    def _start(self) -> None:
        if self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(target=self._loop, name="inspect-watch-act",
                                            daemon=True)
            self._thread.start()
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.poll)
            self._wake.clear()
            if self._stop.is_set():
                return
            with self._lock:
                pending = list(self._pending.values())
            for p in pending:
                if self._stop.is_set():
                    return
                try:
                    if p.spec is None:
                        self._check_run(p)
                    elif p.phase == "confirm":
                        self._confirm(p)
                    else:
                        self._check(p)
                except Exception as e:  # noqa: BLE001 - one action's bug ends that action
                    self._drop(p)
                    self._emit(p.finding, p.spec, "failed", f"internal error: {e!r}",
                               reason="internal_error", args=p.args)

    def _drop(self, p: _Pending) -> None:
        """The action is over (done, skipped or failed): not tried again in this watch."""
        with self._lock:
            if self._pending.get(p.key) is p:
                del self._pending[p.key]
            self._settled.add(p.key)

    def _client(self, server: ControlServer) -> HttpSource:
        client = self._clients.get(server.pid)
        if client is None:
            client = self._clients[server.pid] = HttpSource(server, retries=2)
        return client

    # -- one sample's action -----------------------------------------------------------

    def _read(self, p: _Pending) -> dict[str, Any] | None:
        """The sample's row, or ``None`` (the action was dropped, said, or the read is
        to be tried on the next check)."""
        s = p.finding.sample
        try:
            return self._client(p.server).sample(s.eval_id, s.sample_id, s.epoch)
        except NotFound:
            if p.phase == "confirm" and p.failures + 1 < READ_FAILURES:
                p.failures += 1  # a finished sample between the eval's memory and its log
                return None
            self._give_up(p, "skipped", "the eval no longer knows the sample (it finished "
                          "and left, or its task was retried): nothing was done",
                          "not_found")
        except ProcessGone:
            self._give_up(p, "skipped", "the eval process is gone: nothing was done",
                          "process_gone")
        except SourceError as e:
            p.failures += 1
            if p.failures >= READ_FAILURES:
                self._give_up(p, "failed", f"the sample could not be read {p.failures} times "
                              f"in a row ({said(str(e))}): nothing was done", "unreadable")
        return None

    def _give_up(self, p: _Pending, outcome: str, message: str, reason: str) -> None:
        if p.phase == "confirm" and self._confirm_from_log(p):
            return
        self._drop(p)
        if p.phase == "confirm":
            outcome, message = "unconfirmed", (
                f"the cancel was requested, but {message.split(':')[0]}: the listing never "
                "showed the sample end by it")
        self._emit(p.finding, p.spec, outcome, message, reason=reason, args=p.args)

    def _not_acting(self, p: _Pending, row: dict[str, Any]) -> tuple[str, str] | None:
        """Why the sample is not (any more) the one to act on, or ``None``. A task's
        budget finding is about the task: the sample it names may have ended."""
        f = p.finding
        if f.category == "budget" and p.spec is not None and VERBS[p.spec.verb].about_task:
            return None
        status = str(row.get("status") or "unknown")
        if status != "running":
            return ("sample_not_running", f"the sample is no longer running (its row says "
                    f"{said(status)}): nothing was done")
        retries = row.get("retries") or 0
        attempt = (retries if isinstance(retries, int) else 0) + 1
        if attempt != f.sample.attempt:
            return ("new_attempt", f"the sample is on attempt {attempt}, the finding is about "
                    f"attempt {f.sample.attempt}: nothing was done")
        started = row.get("started_at")
        if isinstance(started, int | float) and started > f.first_seen + 1.0:
            return ("requeued", "the sample's running attempt started after the finding's "
                    "evidence (it was re-queued): nothing was done")
        if row.get("interrupt"):
            return ("cancel_pending", f"a cancel of the sample is already pending (interrupt "
                    f"{said(str(row['interrupt']))}): nothing more was done")
        return None

    def _check(self, p: _Pending) -> None:
        if p.checks:  # the grace was over at an earlier check that could not finish
            p.checks += 1
        row = self._read(p)
        if row is None:
            return
        p.failures = 0
        why = self._not_acting(p, row)
        if why is not None:
            self._drop(p)
            if p.ready:  # (an action whose conditions never held was never planned)
                self._emit(p.finding, p.spec, "skipped", why[1], reason=why[0], args=p.args)
            return
        if not p.ready:
            return
        events = row.get("events")
        events = events if type(events) is int else None
        if p.events0 is None:
            p.events0 = events
        met = self._grace_met(p, events)
        if met is None:
            return
        p.checks = p.checks or 1
        self._act(p, met, events)

    def _grace_met(self, p: _Pending, events: int | None) -> str | None:
        assert p.spec is not None
        spec = p.spec
        waited = self.clock() - p.since
        if p.asked:
            return "asked"
        if spec.grace_events is None and spec.grace_seconds is None:
            return "none"
        if (spec.grace_events is not None and events is not None and p.events0 is not None
                and events - p.events0 >= spec.grace_events):
            return "events"
        if spec.grace_seconds is not None and waited >= spec.grace_seconds:
            return "seconds"
        if spec.grace_seconds is None and (events is None or p.events0 is None) and (
                waited >= EVENTS_UNKNOWN_GRACE):
            return "seconds"  # the server counts no events: a grace of time instead
        return None

    def _limit(self, p: _Pending) -> tuple[str, str] | None:
        if p.counted:
            return None  # this very action, tried again: it is within the limits
        s = p.finding.sample
        task = s.task_id or s.eval_id
        if self._actions >= self.max_actions:
            return ("limit_run", f"this watch has taken {self._actions} actions, its limit "
                    "(--act-max): nothing was done")
        if self._per_task.get(task, 0) >= self.max_per_task:
            return ("limit_task", f"{self._per_task[task]} actions were taken on this task, "
                    "its limit (--act-max-task): nothing was done")
        return None

    def _supported(self, p: _Pending, verb: str) -> bool:
        """Whether the server can be asked (said once per server and verb if not). Its API
        version is read again from its discovery file first, as it is now."""
        fresh = read_server(p.server.pid)
        if fresh is not None and fresh.socket_path == p.server.socket_path:
            p.server = replace(p.server, api_version=fresh.api_version)
        server = p.server
        why = self._cannot.get((server.pid, verb))
        if why is None and server.api_version < STRICT_SINCE:
            why = (f"its control API version is {server.api_version}; before {STRICT_SINCE} a "
                   "server ignores parameters it does not know, so a dry run could act")
            self._cannot_act(p, verb, why)
        if why is None:
            return True
        self._drop(p)
        self._emit(p.finding, p.spec, "unsupported", f"not acting: {why}; the finding keeps "
                   "its hand-off", reason="unsupported", args=p.args)
        return False

    def _cannot_act(self, p: _Pending, verb: str, why: str) -> None:
        key = (p.server.pid, verb)
        if key in self._cannot:
            return
        self._cannot[key] = why
        with self._lock:
            self._records.append(Notice(
                kind="watchdog", at=self.clock(), details={"pid": p.server.pid, "verb": verb},
                message=f"pid {p.server.pid}: the watchdog cannot {verb.replace('_', ' ')} on "
                        f"this eval ({why}); its findings keep the hand-off"))

    def _request(self, p: _Pending, *, dry_run: bool) -> ControlAnswer:
        assert p.spec is not None
        return ControlClient(self._client(p.server)).send(
            VERBS[p.spec.verb], p.finding.sample, p.args, dry_run=dry_run)

    def _ask(self, p: _Pending, *, dry_run: bool) -> ControlAnswer | None:
        """Send the request; a transport failure is recorded (``None``)."""
        try:
            return self._request(p, dry_run=dry_run)
        except SourceError as e:
            self._drop(p)
            # (a limit broken is a bad answer too: LimitExceeded is a BadResponse)
            reason = ("no_answer" if isinstance(e, SourceBusy) else "process_gone"
                      if isinstance(e, ProcessGone) else "bad_answer")
            what = "the dry run" if dry_run else "the request"
            self._emit(p.finding, p.spec, "failed", f"{what} failed: {said(str(e))}",
                       reason=reason, args=p.args)
            return None

    def _act(self, p: _Pending, met: str, events: int | None) -> None:
        assert p.spec is not None
        verb = p.spec.verb
        declared = VERBS[verb]
        details = {"grace_met": met, "checks_after_grace": p.checks,
                   "waited": round(self.clock() - p.since, 3),
                   "events_since": None if events is None or p.events0 is None
                   else events - p.events0}
        limit = self._limit(p)
        if limit is not None:
            self._drop(p)
            self._emit(p.finding, p.spec, "skipped", limit[1], reason=limit[0], args=p.args,
                       **details)
            return
        if not self._supported(p, verb):
            return
        dry = self._ask(p, dry_run=True)
        if dry is None:
            return
        if not self._answered(p, dry, dry_run=True, details=details):
            return
        if declared.scope == "tool_call" and isinstance(dry.body, dict) and dry.body.get(
                "tool_call_id"):
            p.args["tool_call_id"] = str(dry.body["tool_call_id"])  # what the dry run showed
        self._count(p)
        if self.dry_run:
            self._drop(p)
            self._acted.add(p.key)
            self._emit(p.finding, p.spec, "dry_run", f"dry run: the server says it would "
                       f"{declared.doing(p.args)} ({_changed(dry)}); --dry-run: nothing was "
                       "sent", dry=dry, args=p.args, **details)
            return
        row = self._read(p)  # once more, just before acting
        if row is None:
            return
        why = self._not_acting(p, row)
        if why is not None:
            self._drop(p)
            self._emit(p.finding, p.spec, "skipped", why[1], reason=why[0], dry=dry,
                       args=p.args, **details)
            return
        remembered = self._remember(p, verb)
        if remembered != "ok":
            self._drop(p)
            self._not_remembered(p, remembered, dry=dry, args=p.args, **details)
            return
        self._acted.add(p.key)
        s = p.finding.sample
        target = (s.eval_id, s.sample_id, s.epoch, s.attempt)
        if declared.confirmed_by_row:  # from now on, what begins on it is the cancel's doing
            with self._lock:
                self._cancelled[target] = self.clock()
        real = self._ask(p, dry_run=False)
        if real is None or not self._answered(p, real, dry_run=False, details=details,
                                              dry=dry):
            with self._lock:
                self._cancelled.pop(target, None)
            return
        words = declared.doing(p.args)
        if declared.confirmed_by_row:
            p.phase, p.requested_at = "confirm", self.clock()
            self._emit(p.finding, p.spec, "requested", f"{words.capitalize()} requested; the "
                       f"server accepted it ({_changed(real)}); the sample ends when Inspect "
                       "has stopped it", dry=dry, real=real, args=p.args, **details)
            return
        self._drop(p)
        self._emit(p.finding, p.spec, "requested", f"{words.capitalize()} requested; the "
                   f"server accepted it ({_changed(real)}){declared.after}", dry=dry, real=real,
                   args=p.args, **details)

    def _answered(self, p: _Pending, ans: ControlAnswer, *, dry_run: bool,
                  details: dict[str, Any], dry: ControlAnswer | None = None) -> bool:
        """Whether the server's answer lets the action go on; else it is recorded."""
        assert p.spec is not None
        verb = p.spec.verb
        declared = VERBS[verb]
        what = "its dry run" if dry_run else "the request"
        given = {"dry": ans if dry_run else dry, "real": None if dry_run else ans}
        if ans.route_missing:
            self._cannot_act(p, verb, f"its control server has no {declared.shown_route} route (an "
                             "older Inspect)")
            self._drop(p)
            self._emit(p.finding, p.spec, "unsupported", f"not acting: the eval's control "
                       f"server has no {declared.shown_route} route (an older Inspect); the "
                       "finding keeps its hand-off", reason="route_missing", args=p.args, **given,
                       **details)
            return False
        if (declared.scope == "tool_call" and dry_run and ans.status == 409
                and isinstance(ans.body, dict) and isinstance(ans.body.get("pending"), list)
                and "tool_call_id" not in p.args):
            chosen = _pick_tool_call(ans.body["pending"], p.finding)
            if chosen is not None:  # several pending: the one the finding is about
                p.args["tool_call_id"] = chosen
                again = self._ask(p, dry_run=True)
                return again is not None and self._answered(p, again, dry_run=True,
                                                            details=details)
        if ans.ok:
            if isinstance(ans.body, dict) and ans.body.get("changed") is False:
                self._drop(p)
                reason = ans.body.get("reason")
                self._emit(p.finding, p.spec, "skipped", f"{what}: the server says nothing "
                           f"would change" + (f" ({said(str(reason))})" if reason else "")
                           + ": nothing more was done", reason="nothing_to_do",
                           args=p.args, **given, **details)
                return False
            return True
        self._drop(p)
        if ans.status == 404:
            self._emit(p.finding, p.spec, "skipped", f"{what}: the server does not know the "
                       f"target ({said(ans.error or 'not found')}): nothing was done",
                       reason="not_found", args=p.args, **given, **details)
        else:
            self._emit(p.finding, p.spec, "failed", f"{what}: the server refused it (HTTP "
                       f"{ans.status}: {said(ans.error or 'no reason given')})",
                       reason="refused", args=p.args, **given, **details)
        return False

    def _count(self, p: _Pending) -> None:
        """Count the action against the limits, once (a check that could not finish and
        is tried again at the next one is the same action)."""
        if p.counted:
            return
        p.counted = True
        s = p.finding.sample
        task = s.task_id or s.eval_id
        self._actions += 1
        self._per_task[task] = self._per_task.get(task, 0) + 1

    def _remember(self, p: _Pending, verb: str) -> str:
        """Have the routing thread save the episode in the state before the request:
        ``ok``, ``unsaved`` (the save failed, or took too long) or ``ended``."""
        if self._stop.is_set():
            return "ended"
        s = p.finding.sample
        entry = {"verb": verb, "at": self.clock(), "eval_id": s.eval_id,
                 "sample_id": s.sample_id, "epoch": s.epoch, "attempt": s.attempt}
        done = threading.Event()
        answer: list[str] = []
        with self._lock:
            self._intents.append((p.key, entry, done, answer))
        if not done.wait(STATE_WAIT) or not answer:
            return "unsaved"
        return answer[0]

    def _not_remembered(self, p: _Pending, why: str, **kw: Any) -> None:
        if why == "ended":
            self._emit(p.finding, p.spec, "skipped", "the watch ended before the request "
                       "was sent: nothing was done", reason="watch_ended", **kw)
        else:
            self._emit(p.finding, p.spec, "failed", "the state file could not remember this "
                       "action, so a restarted watch could act twice: not acting",
                       reason="state_unsaved", **kw)

    def _confirm(self, p: _Pending) -> None:
        """After a requested cancel: the sample's row shows it ended by it (or not)."""
        row = self._read(p)
        if row is not None:
            self._confirm_row(p, row)

    def _confirm_from_log(self, p: _Pending) -> bool:
        """The eval has gone (or no longer serves the sample): its log's row of the
        sample says how it ended. Whether a record was written."""
        location = p.finding.sample.log_location
        if not location:
            return False
        from watcher.sources.logfiles import LogSource

        s = p.finding.sample
        try:
            source = LogSource(location)
            try:
                rows = [r for t in source.tasks() if t.eval_id == s.eval_id
                        for r in source.samples(t).samples
                        if r.sample_id == s.sample_id and r.epoch == s.epoch]
            finally:
                source.close()
        except SourceError:
            return False
        if not rows or not rows[0].terminal:
            return False
        return self._confirm_row(p, rows[0].raw, where="its log's row")

    def _confirm_row(self, p: _Pending, row: dict[str, Any],
                     where: str = "the sample's row") -> bool:
        """Record what ``row`` says of a requested cancel, if it says; whether it did."""
        waited = self.clock() - p.requested_at
        status = str(row.get("status") or "")
        limit = row.get("limit")
        action = p.args.get("action")
        by_cancel = (status == "cancelled" if action == "cancel" else limit == "operator")
        if by_cancel:
            self._drop(p)
            self._emit(p.finding, p.spec, "confirmed", f"{where} shows the sample ended "
                       f"by the cancel (status {said(status)}"
                       + (f", limit {said(str(limit))}" if limit else "") + ")",
                       args=p.args, waited=round(waited, 3))
            return True
        if status in ("error", "cancelled", "completed") and limit not in (None, ""):
            self._drop(p)
            self._emit(p.finding, p.spec, "unconfirmed", f"the sample ended, but {where} "
                       f"does not say by the cancel (status {said(status)}, limit "
                       f"{said(str(limit))})", reason="ended_otherwise", args=p.args)
            return True
        if waited >= CONFIRM_SECONDS:
            self._drop(p)
            self._emit(p.finding, p.spec, "unconfirmed", f"{where} has not shown the sample "
                       f"end by the cancel within {CONFIRM_SECONDS:g} s",
                       reason="not_seen", args=p.args)
            return True
        return False

    # -- the run's interrupt -------------------------------------------------------------

    def _check_run(self, p: _Pending) -> None:
        spec = self.policy.interrupt
        assert spec is not None
        pid = p.server.pid
        try:
            tasks = self._client(p.server).tasks()
        except ProcessGone:
            self._drop(p)
            self._emit(p.finding, None, "skipped", f"pid {pid} is gone: nothing was done",
                       reason="process_gone", scope="run", verb=INTERRUPT_RUN,
                       args=p.args)
            return
        except SourceError:
            return  # tried again on the next check
        totals = [t.counts.get("total") for t in tasks]
        total = sum(n for n in totals if isinstance(n, int))
        high = len(self._high.get(pid, ()))
        if total <= 0 or high / total < spec.share:
            return  # not yet: more samples may get high findings
        details = {"samples_high": high, "samples": total, "share": round(high / total, 3),
                   "threshold": spec.share}
        limit = self._limit(p)
        if limit is not None:
            self._drop(p)
            self._emit(p.finding, None, "skipped", limit[1], reason=limit[0], scope="run",
                       verb=INTERRUPT_RUN, args=p.args, **details)
            return
        why = _share_words(high, total, spec)
        if not pid_alive(pid):
            self._drop(p)
            self._emit(p.finding, None, "skipped", f"pid {pid} is gone: nothing was done",
                       reason="process_gone", scope="run", verb=INTERRUPT_RUN,
                       args=p.args, **details)
            return
        unverified = _not_serving(p.server)
        if unverified is not None:
            self._drop(p)
            self._emit(p.finding, None, "skipped", f"no signal was sent: {unverified}",
                       reason="not_verified", scope="run", verb=INTERRUPT_RUN,
                       args=p.args, **details)
            return
        self._count(p)
        if self.dry_run:
            self._drop(p)
            self._acted.add(p.key)
            self._emit(p.finding, None, "dry_run", f"dry run: {why}, so it would send SIGINT "
                       f"to pid {pid} (kill -INT, the graceful shutdown); --dry-run: nothing "
                       "was sent", scope="run", verb=INTERRUPT_RUN, args=p.args, **details)
            return
        remembered = self._remember(p, INTERRUPT_RUN)
        if remembered != "ok":
            self._drop(p)
            self._not_remembered(p, remembered, scope="run", verb=INTERRUPT_RUN,
                                 args=p.args, **details)
            return
        self._acted.add(p.key)
        self._drop(p)
        with self._lock:  # what begins in the run from now on is the interrupt's doing
            self._interrupted[pid] = self.clock()
        try:
            os.kill(pid, INTERRUPT_SIGNAL)
        except OSError as e:
            with self._lock:
                self._interrupted.pop(pid, None)
            self._emit(p.finding, None, "failed", f"SIGINT to pid {pid} failed: "
                       f"{e.strerror or e}", reason="signal_failed", scope="run",
                       verb=INTERRUPT_RUN, args=p.args, **details)
            return
        self._emit(p.finding, None, "requested", f"{why}: sent SIGINT to pid {pid} (kill -INT, "
                   "the graceful shutdown, as Ctrl+C); the eval decides what follows",
                   scope="run", verb=INTERRUPT_RUN, args=p.args, **details)

    # -- records -----------------------------------------------------------------------

    def _record(self, f: Finding, spec: ActSpec | None, outcome: str, message: str, *,
                reason: str | None = None, dry: ControlAnswer | None = None,
                real: ControlAnswer | None = None, scope: str | None = None,
                verb: str | None = None, args: dict[str, Any] | None = None,
                **details: Any) -> Action:
        verb = verb or (spec.verb if spec is not None else "")
        if scope is None:
            scope = scope_of(verb)
        record = Action(
            message=message, sample=f.sample, at=self.clock(), details=details, verb=verb,
            args=dict(args if args is not None else (spec.args if spec else {})),
            outcome=outcome, reason=reason, mode=self.mode, scope=scope, finding_id=f.id,
            rule=f.rule, confidence=f.confidence, dry_run_answer=_answer(dry),
            server_answer=_answer(real))
        line = (f"{fmt_clock(record.at)} {verb.replace('_', ' ')}: "
                f"{outcome.replace('_', '-')}: {message}")
        with self._lock:
            self._done.setdefault(f.id, []).append(line)
            for key in _targets(f.sample, scope):
                self._around.setdefault(key, []).append(line)
        return record

    def _emit(self, f: Finding, spec: ActSpec | None, outcome: str, message: str,
              **kw: Any) -> None:
        record = self._record(f, spec, outcome, message, **kw)
        with self._lock:
            self._records.append(record)


def _targets(s: SampleRef, scope: str) -> list[str]:
    """What an action of ``scope`` about sample ``s`` touched (its sample; for a task
    or run scope, that too); for a finding, ``scope="run"`` gives every key it shares."""
    keys = [f"sample:{s.eval_id}:{s.sample_id}:{s.epoch}"]
    if scope in ("task", "run"):
        keys.append(f"task:{s.task_id or s.eval_id}")
    if scope == "run" and s.pid is not None:
        keys.append(f"run:{s.pid}")
    return keys


def _not_serving(server: ControlServer) -> str | None:
    """Why ``server.pid`` is not known to be the eval process serving its control socket
    (``None``: it is). A discovery file names a pid; only the socket's peer credentials
    say which process serves it. Signalling any other pid it named would stop whatever
    process that is."""
    fresh = read_server(server.pid)
    if fresh is None:
        return f"pid {server.pid} no longer has a control discovery file"
    if fresh.socket_path != server.socket_path:
        return (f"pid {server.pid}'s discovery file names another control socket than the "
                "one this watch read")
    serving = serving_pid(server.socket_path)
    if serving is None:
        return (f"the process serving {server.socket_path} could not be identified (its "
                "peer credentials cannot be read here)")
    if serving != server.pid:
        return (f"its control socket is served by pid {serving}, not by pid {server.pid}, "
                "which its discovery file names")
    return None


def _changed(ans: ControlAnswer) -> str:
    body = ans.body if isinstance(ans.body, dict) else {}
    out = f"changed: {str(body.get('changed')).lower()}"
    if body.get("reason"):
        out += f"; it said {said(str(body['reason']))}"
    return out


def _pick_tool_call(pending: list[Any], f: Finding) -> str | None:
    """Of several pending tool calls, the one the finding names (its ``function``), if
    exactly one is; else ``None`` (a mutation must not guess)."""
    function = f.evidence.facts.get("function")
    ids = [str(c.get("id")) for c in pending
           if isinstance(c, dict) and c.get("id") and function and c.get("function") == function]
    return ids[0] if len(ids) == 1 else None


def _share_words(high: int, total: int, spec: InterruptSpec) -> str:
    return (f"{high} of the run's {total} samples ({high / total:.0%}) have a high finding, "
            f"at least the policy's {spec.share:.0%}")


def _answer(ans: ControlAnswer | None) -> dict[str, Any] | None:
    """An answer as the record keeps it: status and body, bounded (untrusted data)."""
    if ans is None:
        return None
    return {"status": ans.status, "body": _bounded(ans.body)}


def _bounded(value: Any, depth: int = 0) -> Any:
    if depth > 5:
        return "…"
    if isinstance(value, str):
        return value if len(value) <= ANSWER_MAX else value[:ANSWER_MAX] + "…"
    if isinstance(value, dict):
        return {str(k)[:200]: _bounded(v, depth + 1) for k, v in list(value.items())[:50]}
    if isinstance(value, list):
        return [_bounded(v, depth + 1) for v in value[:50]]
    if value is None or isinstance(value, bool | int | float):
        return value
    return str(value)[:ANSWER_MAX]
