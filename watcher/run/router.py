"""The deciding step: what the runner's outputs mean, and who gets them.

For each finding the runner produces, the router writes the hand-off (what a person
can do about it), keeps it for the summary, and decides whether it is news: at or
above ``min_confidence`` and not yet reported at this level (the state). A finding
that is news may set the ``--fail-on`` verdict, is shown to the :class:`Decider`
hooks (what may act on it, with the :class:`~watcher.run.values.Origin` it was read
from), is marked reported, and goes to every :class:`Sink`. Notices go to the sinks
as they come; a sample read to its end is marked finished in the state.

The state is saved as the watch goes, each time *before* the findings it marks
reported are written: a watcher killed outright (SIGKILL, the OOM killer) never
reports a finding twice when resumed, at the price that findings it was writing at
that instant may never be reported (at most once). Every other end (a signal, a
closed pipe, a full disk) reports each finding exactly once: a sink that cannot
write (EPIPE, ENOSPC) is dropped, what it refused is unmarked, and the router asks
the watch to stop (:attr:`Router.halted`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

from watcher.findings import SPEND_FACTS, Finding, Notice, confidence_rank
from watcher.handoff import Actions, eval_exited, finding_actions, finding_handoff
from watcher.run.values import Origin, Output
from watcher.state import Reported, SampleDone, WatchState
from watcher.summary import ReportContext, RunSummary, StatusSnapshot

# At most this share of a watch's time goes to saving its state: a save costs time in
# proportion to the state's size, so the next one waits (1/share - 1) times as long as
# the last took, and the findings routed meanwhile wait with it (milliseconds for a
# state of thousands of findings).
STATE_SAVE_SHARE = 0.1


class Sink(Protocol):
    """Where a watch sends what passed the router: the reporters, the alerts, a front
    end's own (:func:`watcher.app.start`). All calls come from the watch's one routing
    thread. ``start`` and ``stop`` are called by :func:`watcher.app.run` around the
    watch; the watch itself calls only ``finding``, ``notice`` and ``status``. A sink
    that raises :class:`OSError` is dropped and the watch stops (see the module)."""

    def start(self, context: ReportContext) -> None: ...
    def finding(self, f: Finding) -> None: ...
    def notice(self, n: Notice) -> None: ...
    def status(self, snapshot: StatusSnapshot) -> None: ...
    def stop(self, summary: RunSummary | None = None) -> None: ...

    # optional (looked up): ``update(finding)`` gets later snapshots of a reported finding
    # that are not news (a loop's count and spend as they grow, every few seconds), for
    # a sink that shows findings as they stand; the text stream has no use for them.
    # ``takes_status = False`` says ``status`` ignores its snapshot: when no sink takes
    # one the watch builds none (a snapshot walks every sample read)


class AlertSink(Sink, Protocol):
    """A sink that talks to the outside world on its own thread (``--on-finding``,
    ``--notify``): asked for what it has to say (drops, failures) each turn of the
    loop, and given a bounded time to finish what is queued at the end."""

    def pop_notices(self) -> list[Notice]: ...
    def drain(self, timeout: float) -> None: ...


class Decider(Protocol):
    """A hook at the deciding step (a watchdog that acts on findings: watcher/act/).

    ``decide`` sees each finding that is news, before it is written, with where it was
    read (``origin``: its source and, for a live eval, the control server); what it
    returns (audit records of what it did) goes to every sink right after the finding.
    It runs on the routing thread: what takes time belongs on its own thread, whose
    records ``pop_notices`` hands over on the next turn of the loop. It must not raise.

    More hooks are optional (looked up, so a decider without them still works):
    ``update(finding, origin)`` sees every snapshot at or above the confidence floor
    that is not news (an open finding's spend grows every poll; a finding an earlier
    watch with this state reported); ``absorbs(finding, origin)`` sees every snapshot
    first and claims one its own action caused (a list of notices saying so, routed in
    its place; ``None``: not its doing); and ``drain(timeout)`` is called once when the
    watch ends, before the last ``pop_notices``, to say what it could not finish.
    """

    def decide(self, finding: Finding, origin: Origin | None) -> Sequence[Notice]: ...
    def pop_notices(self) -> list[Notice]: ...


# (finding, live, log hint, remote) -> the hand-off
Handoff = Callable[[Finding, bool, bool, bool], str]


def _spend(f: Finding) -> tuple[Any, ...]:
    facts = f.evidence.facts
    return tuple(facts.get(k) for k in SPEND_FACTS)


# the observer's hand-offs remembered (at most this many; then forgotten all at once)
OBSERVER_MEMO = 4096


def _observer_handoff(f: Finding, live: bool, log_hint: bool, remote: bool = False) -> str:
    return finding_handoff(f, live=live, log_hint=log_hint, remote=remote, exited=None)


def _observer_actions(f: Finding, live: bool, log_hint: bool,
                      remote: bool = False) -> list[dict[str, Any]]:
    return finding_actions(f, live=live, log_hint=log_hint, remote=remote)


_UNMARKED = object()  # a pending item the state did not mark reported
_UPDATE = object()  # a later snapshot of a reported finding that is not news (Sink.update)


class Router:
    """Routes one watch's outputs; see the module. ``live_eval(eval_id)`` says whether
    an eval is read while it runs (its hand-off then names ways to stop it),
    ``remote_eval(eval_id)`` whether it runs on another machine (those ways are there);
    ``before_save`` runs before each save of the state; ``handoff`` writes each
    finding's hand-off (a watchdog's says what it did), ``actions`` the same as data."""

    def __init__(self, state: WatchState, sinks: Sequence[Sink], *,
                 alerts: Sequence[AlertSink] = (), deciders: Sequence[Decider] = (),
                 min_confidence: str = "low", fail_on: str | None = None,
                 log_hints: bool = True,
                 live_eval: Callable[[str], bool] = lambda eval_id: True,
                 remote_eval: Callable[[str], bool] = lambda eval_id: False,
                 before_save: Callable[[], None] | None = None,
                 handoff: Handoff = _observer_handoff,
                 actions: Actions = _observer_actions) -> None:
        self.state = state
        self.sinks: list[Sink] = [*sinks, *alerts]  # dropped from when they cannot write
        self.alerts = list(alerts)
        self.deciders = list(deciders)
        self._updates = [u for u in (getattr(d, "update", None) for d in self.deciders)
                         if callable(u)]
        self._absorbers = [a for a in (getattr(d, "absorbs", None) for d in self.deciders)
                           if callable(a)]
        self.handoff = handoff
        self.actions = actions
        self.min_confidence = min_confidence
        self.fail_on = fail_on
        self.log_hints = log_hints
        self.live_eval = live_eval
        self.remote_eval = remote_eval
        self.before_save = before_save
        self.findings: dict[str, Finding] = {}
        self.notices: list[Notice] = []
        self.failed = False  # a finding reached --fail-on
        self.halted = False  # an output or the state failed: the watch must stop
        self.output_closed = False  # a reporter's reader went away (``| head``)
        self.write_error: str | None = None  # a reporter could not write (a full disk)
        self.state_error: str | None = None  # the state file could not be saved
        # routed, not yet written: each finding with what the state held for it before it
        # was marked reported (None: nothing), or _UNMARKED; written after the next save
        self._pending: list[tuple[Finding | Notice, Reported | None | object]] = []
        self._dirty = False  # the state changed since it was last saved
        # finding id -> the spend facts of its snapshot last sent in this watch
        self._sent: dict[str, tuple[Any, ...]] = {}
        self._next_save = 0.0  # time.monotonic() before which no save starts
        # the observer's hand-off and actions by all they are made of (see _handed)
        self._handed_memo: dict[tuple[Any, ...], tuple[str, tuple[dict[str, Any], ...]]] = {}

    @property
    def output_failed(self) -> bool:
        """A reporter was dropped (its pipe closed, or it could not write)."""
        return self.output_closed or self.write_error is not None

    def shown(self, finding: Finding) -> bool:
        """At or above the confidence floor (what reports and the status count)."""
        return confidence_rank(finding.confidence) >= confidence_rank(self.min_confidence)

    # -- deciding ------------------------------------------------------------------------

    def notice(self, kind: str, message: str) -> None:
        """A notice of the watch's own."""
        self.route(Notice(kind=kind, message=message, at=time.time()))

    def route(self, item: Output, origin: Origin | None = None) -> None:
        """Decide what ``item`` means for the state and the sinks; what is to be
        written waits for :meth:`flush`, in order."""
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
        # what a decider's own action caused (its cancel's limit row, the model calls it
        # interrupted) is not a new problem: its audit trail says so instead
        for absorbs in self._absorbers:
            said = absorbs(item, origin)
            if said is not None:
                for n in said:
                    self.route(n)
                return
        # the hand-off names what a person can do (cancel commands, kill -INT PID) for
        # every reporter, JSONL included, so an agent reading findings gets them too; and
        # as data (``actions``: who can do what, on what, the command and its dry run)
        eval_id = item.sample.eval_id
        if item.sample.pid is None and origin is not None and origin.server is not None:
            # a sample first read from the log of a process that has exited: its process
            # is still the one it ran in (and the hand-off must not offer to stop it)
            item = replace(item, sample=replace(item.sample, pid=origin.server.pid))
        live, remote = self.live_eval(eval_id), self.remote_eval(eval_id)
        handoff, actions = self._handed(item, live, remote)
        item = replace(item, handoff=handoff, actions=actions)
        self.findings[item.id] = item
        if not self.shown(item):
            return
        if not self.state.should_report(item):
            for update in self._updates:
                update(item, origin)
            if self._grew(item):
                # reported before, not news, but it went on: the sinks that keep a
                # finding as it stands (``update``: the JSONL, the fleet view) get it
                self._pending.append((item, _UPDATE))
            return
        if self.fail_on and confidence_rank(item.confidence) >= confidence_rank(self.fail_on):
            self.failed = True
        audit = [n for d in self.deciders for n in d.decide(item, origin)]
        if self.output_failed:
            self._pending.append((item, _UNMARKED))  # to the reporters left; not marked
        else:
            # marked now (a later snapshot of the same finding is judged against it),
            # saved before it is written (see flush), unmarked if a reporter refuses it
            self._pending.append((item, self.state.reported.get(item.id)))
            self.state.mark_reported(item)
            self._sent[item.id] = _spend(item)
            self._dirty = True
        for n in audit:
            self.route(n)

    def _handed(self, f: Finding, live: bool,
                remote: bool) -> tuple[str, tuple[dict[str, Any], ...]]:
        """The finding's hand-off and actions. The observer's read nothing of a finding
        but its rule's own hand-off, its category and its sample, and of the eval whether
        it is live, remote, and its process has exited: made once for those (a live
        watch routes each open finding again every poll, and a sample's findings share
        them), where a watchdog's (which say what it did) are made each time."""
        if self.handoff is not _observer_handoff or self.actions is not _observer_actions:
            return (self.handoff(f, live, self.log_hints, remote),
                    tuple(self.actions(f, live, self.log_hints, remote)))
        exited = eval_exited(f.sample.pid, live, remote)
        key = (f.handoff, f.category, f.sample, live, remote, exited, self.log_hints)
        got = self._handed_memo.get(key)
        if got is None:
            if len(self._handed_memo) >= OBSERVER_MEMO:
                self._handed_memo.clear()
            got = self._handed_memo[key] = (
                finding_handoff(f, live=live, log_hint=self.log_hints, remote=remote,
                                exited=exited),
                tuple(finding_actions(f, live=live, log_hint=self.log_hints, remote=remote,
                                      exited=exited)))
        return got

    def _grew(self, f: Finding) -> bool:
        """Whether a reported finding's snapshot that is not news says more than what was
        reported: a higher count (a loop that went round again; also a finding an
        earlier watch with this state reported), or, for one reported in this watch,
        more spent. A count is never reported lower (a sample re-read from its start)."""
        prior = self.state.reported.get(f.id)
        if prior is None or f.status == "ended":
            return False
        if f.count > prior.count:
            prior.count = f.count
            self._dirty = True
        elif f.id not in self._sent or self._sent[f.id] == _spend(f):
            return False
        self._sent[f.id] = _spend(f)
        return True

    def pop_notices(self) -> None:
        """Route what the alerts and deciders have to say: drops, failures, what they did.
        They run on their own threads, so they are asked, as sources are."""
        talkers: list[AlertSink | Decider] = [a for a in self.alerts if a in self.sinks]
        for talker in [*talkers, *self.deciders]:
            for n in talker.pop_notices():
                self.route(n)

    def drain_alerts(self, timeout: float) -> None:
        """The watch is ending: give queued alerts ``timeout`` seconds, then say what was
        lost (and what the deciders could not finish)."""
        for alert in [a for a in self.alerts if a in self.sinks]:
            alert.drain(timeout)
        for decider in self.deciders:
            drain = getattr(decider, "drain", None)
            if callable(drain):
                drain(timeout)
        self.pop_notices()

    # -- writing -------------------------------------------------------------------------

    def flush(self, force: bool = False) -> None:
        """Save the state if it changed, then write what was routed since.

        Saves are throttled (:data:`STATE_SAVE_SHARE`) unless ``force``: until the next
        save is due, what was routed waits. A finding a reporter refused (a closed pipe,
        a full disk) is unmarked again, so the next run with this state reports it.
        """
        if self._dirty:
            started = time.monotonic()
            if not force and started < self._next_save:
                return
            self.save()
            took = time.monotonic() - started
            self._next_save = started + took / STATE_SAVE_SHARE
        pending, self._pending = self._pending, []
        refused: list[tuple[Finding, Reported | None]] = []
        for item, prior in pending:
            if isinstance(item, Notice):
                self.send("notice", item)
                continue
            if prior is _UPDATE:
                if self.state_error is None:
                    self.send("update", item)
                continue
            # a finding the state could not remember is not written: the next run has it
            if self.state_error is not None or not self.send("finding", item):
                if prior is not _UNMARKED:
                    refused.append((item, prior if isinstance(prior, Reported) else None))
        for f, before in reversed(refused):  # one finding twice in a batch: undo in turn
            if before is None:
                self.state.reported.pop(f.id, None)
            else:
                self.state.reported[f.id] = before
            self._dirty = True

    def save(self) -> None:
        """Save the state. A save that fails stops the watch: what the state cannot
        remember must not be reported (the watch says why at the end)."""
        self._dirty = False
        if self.state.path is None or self.state_error is not None:
            return
        if self.before_save is not None:
            self.before_save()
        try:
            self.state.save()
        except OSError as e:
            self.state_error = f"{self.state.path}: {e.strerror or e}"
            self.halted = True

    @property
    def wants_status(self) -> bool:
        """Whether any sink takes status snapshots (see :class:`Sink`)."""
        return any(getattr(s, "takes_status", True) for s in self.sinks)

    def send(self, method: str, what: Finding | Notice | StatusSnapshot) -> bool:
        """Call ``method`` with ``what`` on every sink; False if one could not take it.

        A sink whose reader has gone (EPIPE: ``inspect-watch watch | head``) or that
        cannot write (a full disk) is dropped and the watch ends as if interrupted: it
        saves its state and stops, instead of a traceback that would skip the state file.
        What it could not take is not marked reported, so the next run reports it.
        """
        ok = not self.output_failed  # once one is dropped, nothing more reaches them all
        for sink in list(self.sinks):
            call = getattr(sink, method, None)
            if call is None:  # ``update`` is optional
                continue
            try:
                call(what)
            except OSError as e:
                self.sinks.remove(sink)
                if isinstance(e, BrokenPipeError):
                    self.output_closed = True
                else:
                    self.write_error = str(e)
                self.halted = True
                ok = False
        return ok
