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

This module is the order of the steps and the thread that takes them; each step's
rules live in their own module: 1. :mod:`~watcher.act.policy`, 2.
:mod:`~watcher.act.grace`, 3. :mod:`~watcher.act.limits`, 4. :mod:`~watcher.act.support`,
5. :mod:`~watcher.act.dryrun`, 6. :mod:`~watcher.act.remember`, 7. the request through
:mod:`~watcher.act.control` and :mod:`~watcher.act.confirm`; the run's interrupt in
:mod:`~watcher.act.interrupt`, and every record in :mod:`~watcher.act.records`.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from watcher.act import MAX_ACTIONS, MAX_PER_TASK
from watcher.act.confirm import confirmation, final_row
from watcher.act.control import ControlClient
from watcher.act.dryrun import changed, pick_tool_call
from watcher.act.grace import grace_met, not_acting
from watcher.act.interrupt import INTERRUPT_SIGNAL, not_serving, share_words
from watcher.act.limits import Limits
from watcher.act.pending import Pending
from watcher.act.policy import ActSpec, Policy
from watcher.act.records import Records
from watcher.act.remember import Memory
from watcher.act.support import Support
from watcher.act.verbs import CANCEL_SAMPLE, INTERRUPT_RUN, VERBS, said, scope_of
from watcher.discovery import ControlServer, pid_alive
from watcher.findings import Action, Finding, Notice, confidence_rank
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

__all__ = ["INTERRUPT_SIGNAL", "Watchdog"]

READ_FAILURES = 5  # reads of a sample in a row that may fail before the action is given up
NEARBY_LINES = 5  # a hand-off names at most this many actions taken for other findings


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
        self.state = state if state is not None else WatchState()
        self.save: Callable[[], bool] = lambda: True
        self.clock = clock
        self.records = Records(self.mode, clock)  # every step's record
        self.limits = Limits(max_actions, max_per_task)  # step 3
        self.support = Support()  # step 4
        self.memory = Memory(clock)  # step 6
        self._lock = threading.Lock()
        self._pending: dict[str, Pending] = {}
        self._acted: set[str] = set()  # episodes acted on in this watch (dry runs too)
        self._settled: set[str] = set()  # episodes whose action this watch has finished
        self._clients: dict[int, HttpSource] = {}
        self._high: dict[int, set[tuple[str, str, int]]] = {}  # pid -> samples with high
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
        pending = Pending(f.id, f, server, spec, since=self.clock(), args=dict(spec.args))
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
        self.records.add(self.decide(f, origin))

    def _check_ready(self, p: Pending) -> None:
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
        self.memory.settle(self.state, self.save)
        return self.records.take()

    def drain(self, timeout: float) -> None:
        """The watch is ending: stop checking, say what was left undone."""
        self._stop.set()
        self._wake.set()
        self.memory.end()  # what waits for the state now would wait for nobody
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
        self.records.add([record])

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
            self.records.add(self._decide(f, origin))
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
        done = self.records.done(f.id)
        nearby = [line for line in self.records.around(f.sample) if line not in done]
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
        why_not = self.support.why_not(f.sample.pid or 0, spec.verb)
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
        done = self.records.done(f.id)
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
            self._pending[key] = Pending(key, f, server, None, since=self.clock(),
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

    def _drop(self, p: Pending) -> None:
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

    def _read(self, p: Pending) -> dict[str, Any] | None:
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

    def _give_up(self, p: Pending, outcome: str, message: str, reason: str) -> None:
        if p.phase == "confirm" and self._confirm_from_log(p):
            return
        self._drop(p)
        if p.phase == "confirm":
            outcome, message = "unconfirmed", (
                f"the cancel was requested, but {message.split(':')[0]}: the listing never "
                "showed the sample end by it")
        self._emit(p.finding, p.spec, outcome, message, reason=reason, args=p.args)

    def _check(self, p: Pending) -> None:
        if p.checks:  # the grace was over at an earlier check that could not finish
            p.checks += 1
        row = self._read(p)
        if row is None:
            return
        p.failures = 0
        why = not_acting(p, row)
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
        met = grace_met(p, events, self.clock())
        if met is None:
            return
        p.checks = p.checks or 1
        self._act(p, met, events)

    def _supported(self, p: Pending, verb: str) -> bool:
        """Whether the server can be asked (said once per server and verb if not)."""
        why, notice = self.support.check(p, verb, self.clock())
        if notice is not None:
            self.records.add([notice])
        if why is None:
            return True
        self._drop(p)
        self._emit(p.finding, p.spec, "unsupported", f"not acting: {why}; the finding keeps "
                   "its hand-off", reason="unsupported", args=p.args)
        return False

    def _cannot_act(self, p: Pending, verb: str, why: str) -> None:
        notice = self.support.say(p.server.pid, verb, why, self.clock())
        if notice is not None:
            self.records.add([notice])

    def _request(self, p: Pending, *, dry_run: bool) -> ControlAnswer:
        assert p.spec is not None
        return ControlClient(self._client(p.server)).send(
            VERBS[p.spec.verb], p.finding.sample, p.args, dry_run=dry_run)

    def _ask(self, p: Pending, *, dry_run: bool) -> ControlAnswer | None:
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

    def _act(self, p: Pending, met: str, events: int | None) -> None:
        assert p.spec is not None
        verb = p.spec.verb
        declared = VERBS[verb]
        details = {"grace_met": met, "checks_after_grace": p.checks,
                   "waited": round(self.clock() - p.since, 3),
                   "events_since": None if events is None or p.events0 is None
                   else events - p.events0}
        limit = self.limits.exceeded(p)
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
        self.limits.count(p)
        if self.dry_run:
            self._drop(p)
            self._acted.add(p.key)
            self._emit(p.finding, p.spec, "dry_run", f"dry run: the server says it would "
                       f"{declared.doing(p.args)} ({changed(dry)}); --dry-run: nothing was "
                       "sent", dry=dry, args=p.args, **details)
            return
        row = self._read(p)  # once more, just before acting
        if row is None:
            return
        why = not_acting(p, row)
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
                       f"server accepted it ({changed(real)}); the sample ends when Inspect "
                       "has stopped it", dry=dry, real=real, args=p.args, **details)
            return
        self._drop(p)
        self._emit(p.finding, p.spec, "requested", f"{words.capitalize()} requested; the "
                   f"server accepted it ({changed(real)}){declared.after}", dry=dry, real=real,
                   args=p.args, **details)

    def _answered(self, p: Pending, ans: ControlAnswer, *, dry_run: bool,
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
            chosen = pick_tool_call(ans.body["pending"], p.finding)
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

    def _remember(self, p: Pending, verb: str) -> str:
        """Step 6: the state remembers the episode before the request (``ok``,
        ``unsaved`` or ``ended``)."""
        if self._stop.is_set():
            return "ended"
        return self.memory.remember(p, verb)

    def _not_remembered(self, p: Pending, why: str, **kw: Any) -> None:
        if why == "ended":
            self._emit(p.finding, p.spec, "skipped", "the watch ended before the request "
                       "was sent: nothing was done", reason="watch_ended", **kw)
        else:
            self._emit(p.finding, p.spec, "failed", "the state file could not remember this "
                       "action, so a restarted watch could act twice: not acting",
                       reason="state_unsaved", **kw)

    def _confirm(self, p: Pending) -> None:
        """After a requested cancel: the sample's row shows it ended by it (or not)."""
        row = self._read(p)
        if row is not None:
            self._confirm_row(p, row)

    def _confirm_from_log(self, p: Pending) -> bool:
        """The eval has gone (or no longer serves the sample): its log's row of the
        sample says how it ended. Whether a record was written."""
        row = final_row(p.finding.sample)
        return row is not None and self._confirm_row(p, row, where="its log's row")

    def _confirm_row(self, p: Pending, row: dict[str, Any],
                     where: str = "the sample's row") -> bool:
        """Record what ``row`` says of a requested cancel, if it says; whether it did."""
        verdict = confirmation(row, p.args.get("action"), self.clock() - p.requested_at,
                               where)
        if verdict is None:
            return False
        self._drop(p)
        self._emit(p.finding, p.spec, verdict.outcome, verdict.message, reason=verdict.reason,
                   args=p.args, **verdict.details)
        return True

    # -- the run's interrupt -------------------------------------------------------------

    def _check_run(self, p: Pending) -> None:
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
        limit = self.limits.exceeded(p)
        if limit is not None:
            self._drop(p)
            self._emit(p.finding, None, "skipped", limit[1], reason=limit[0], scope="run",
                       verb=INTERRUPT_RUN, args=p.args, **details)
            return
        why = share_words(high, total, spec)
        if not pid_alive(pid):
            self._drop(p)
            self._emit(p.finding, None, "skipped", f"pid {pid} is gone: nothing was done",
                       reason="process_gone", scope="run", verb=INTERRUPT_RUN,
                       args=p.args, **details)
            return
        unverified = not_serving(p.server)
        if unverified is not None:
            self._drop(p)
            self._emit(p.finding, None, "skipped", f"no signal was sent: {unverified}",
                       reason="not_verified", scope="run", verb=INTERRUPT_RUN,
                       args=p.args, **details)
            return
        self.limits.count(p)
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

    def _record(self, f: Finding, spec: ActSpec | None, outcome: str, message: str,
                **kw: Any) -> Action:
        return self.records.record(f, spec, outcome, message, **kw)

    def _emit(self, f: Finding, spec: ActSpec | None, outcome: str, message: str,
              **kw: Any) -> None:
        self.records.emit(f, spec, outcome, message, **kw)
