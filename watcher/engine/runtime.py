"""The engine: dispatch events to rules, keep per-sample state, emit findings.

An :class:`Engine` is built once from a rule set and shared by every sample; a
:class:`SampleWatch` holds one sample attempt's bounded state. Rules are
pre-filtered by event type (a dict from type to rules) so each event touches only
the rules that read it, and per-event derived keys are cached across rules.

A rule expression that fails on an event's data (:class:`ExprFailed`) never matches:
the event, row or tick does not count for that rule, and the failure is recorded once
per rule, expression and reason for the caller to report (:meth:`Engine.take_errors`,
the ``rule_error`` notice).
"""

from __future__ import annotations

import fnmatch
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from mypy_extensions import mypyc_attr

from watcher.engine.calls import CHANGES, FAILED, CallFacts
from watcher.engine.detectors import RuleState, whole_value
from watcher.engine.gate import Gate
from watcher.engine.pace import CallClock, Pace, Paces
from watcher.engine.rule import CLOCK, ExceptionSpec, ExprFailed, Rule, RuleRunError, never
from watcher.engine.text import collapse_ws
from watcher.events import TIERS, Event, Tier, tier_rank
from watcher.findings import Finding, SampleRef
from watcher.median import median


@dataclass
class SampleStatus:
    """What the stream knows about a sample between events; drives ``idle`` rules.

    ``in_flight`` lists events left pending, each ``{type, function, model, since}``;
    ``polls_without_change`` counts consecutive polls that brought nothing new, so
    a stall is only reported once it is corroborated by at least two polls.
    """

    last_event_at: float | None = None
    last_change_at: float | None = None
    polls_without_change: int = 0
    in_flight: list[dict[str, Any]] = field(default_factory=list)
    last_event: dict[str, Any] | None = None


_DIGITS = re.compile(r"\d+")
MAX_PROMPTS = 1024  # user prompts remembered per sample attempt (prompt_seen)
RECENT_CALLS = 64  # tool calls remembered per sample attempt for evidence (calls_between)
# what a clock rule that learns the task's pace reads (engine/pace.py; idle's in flight)
PACED_TYPES = frozenset({"model", "tool", "sandbox"})
NUMERIC_FIELDS = ("total_tokens", "total_time", "message_count", "retries")


def error_signature(error: Any) -> str:
    """An error message reduced so the same failure in two samples compares equal."""
    text = error.get("message", "") if isinstance(error, dict) else str(error or "")
    first = text.strip().splitlines()[0] if text.strip() else ""
    return _DIGITS.sub("#", first)[:200]


def _row_key(row: dict[str, Any]) -> tuple[str, str]:
    return (str(row.get("sample_id")), str(row.get("epoch") or 1))


@dataclass
class RunContext:
    """Other samples of the same task, so sample rules can tell task-wide from local.

    ``errors`` counts samples per error signature; ``stats`` holds numeric fields of
    finished samples for outlier tests. Outliers are judged only once the context is
    ``complete`` (every sample of the task finished and counted): a median over the
    samples a live watch happens to have seen finish depends on when it looked, and the
    same run read from its log must give the same finding. The watch then judges them
    in one late pass (``outliers_only``), as a scan of the finished log does at once.
    """

    task: str = ""
    samples: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    stats: dict[str, list[float]] = field(default_factory=dict)
    counted: dict[tuple[str, str], str] = field(default_factory=dict)
    complete: bool = False
    outliers_only: bool = False
    # each field's median, with how many values it is of (a field's values only grow):
    # every finished sample's row asks, and a median of n values sorts them all
    _medians: dict[str, tuple[int, float]] = field(default_factory=dict, repr=False)

    @classmethod
    def from_rows(cls, rows: Iterable[dict[str, Any]], task: str = "",
                  complete: bool = True) -> RunContext:
        """A context of the given rows, by default the task's whole set of samples."""
        ctx = cls(task=task, complete=complete)
        for row in rows:
            ctx.add(row)
        return ctx

    def add(self, row: dict[str, Any]) -> None:
        """Count one (finished) sample's row; call once per sample."""
        self.samples += 1
        if row.get("error"):
            sig = error_signature(row["error"])
            self.errors[sig] += 1
            self.counted[_row_key(row)] = sig
        if row.get("status") in ("completed", "error", "cancelled", None):
            for name in NUMERIC_FIELDS:
                v = row.get(name)
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    self.stats.setdefault(name, []).append(float(v))

    def median(self, name: str) -> float:
        """The median of a numeric field over the finished samples counted so far."""
        values = self.stats.get(name, [])
        hit = self._medians.get(name)
        if hit is not None and hit[0] == len(values):
            return hit[1]
        med = median(values)
        self._medians[name] = (len(values), med)
        return med

    def view(self, row: dict[str, Any]) -> dict[str, Any]:
        """The ``context`` object sample predicates see (and facts they may quote)."""
        sig = error_signature(row.get("error")) if row.get("error") else None
        same = self.errors.get(sig, 0) if sig else 0
        itself = 1 if sig and self.counted.get(_row_key(row)) == sig else 0
        others = max(same - itself, 0)
        return {
            "task": self.task,
            "samples": self.samples,
            "errored_samples": sum(self.errors.values()),
            "same_error_samples": others,
            "task_wide": others >= 2,
        }


# predicate, exceptions test (or None), state index, gate of the predicate (or None),
# the rule's ignore predicate (or None) and its own population (or -1); the gate typed,
# so compiled code calls its method directly
_Target = tuple[Any, Any, int, "Gate | None", Any, int]


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled (setup.py), and extensible
class Engine:
    """Compiled rules plus the type → rules dispatch table; shared across samples."""

    def __init__(self, rules: Iterable[Rule], suppressions: Iterable[ExceptionSpec] = (),
                 calls: CallFacts | None = None) -> None:
        self.rules: list[Rule] = [r for r in rules if r.enabled]
        # the rule set's call effects and failure signatures (one object per rule set)
        if calls is None:
            calls = next((r.calls for r in self.rules if r.calls is not None), None)
        self.calls: CallFacts | None = None if calls is None or calls.empty else calls
        self.order = {r.id: i for i, r in enumerate(self.rules)}  # load order, by id
        supp = list(suppressions)
        self.exceptions: dict[str, tuple[ExceptionSpec, ...]] = {}
        for r in self.rules:
            extra = [s for s in supp if _applies(s, r)]
            self.exceptions[r.id] = tuple(r.exceptions) + tuple(extra)
        # one test per rule: does any of its exceptions cover this event (or row)?
        self.excepted = {rid: _excepted(specs) for rid, specs in self.exceptions.items()}
        self.by_type: dict[str, list[Rule]] = {}
        self.any_type: list[Rule] = []
        # rules that read the same event types share one population counter (the
        # index window rules count in), so a rule need not be called to count an event
        self.populations: dict[Any, int] = {}
        self.population_of: dict[str, int] = {}
        # a rule that ignores some events counts only the others: a population of its own
        self.own_population: dict[str, int] = {}
        for r in self.rules:
            if not r.reads_events:
                continue
            key: Any = r.events if r.ignore is None else ("ignore", r.id)
            self.population_of[r.id] = self.populations.setdefault(key, len(self.populations))
            if r.ignore is not None:
                self.own_population[r.id] = self.population_of[r.id]
            if r.events is None:
                self.any_type.append(r)
            else:
                for t in r.events:
                    self.by_type.setdefault(t, []).append(r)
        if self.calls is not None and not self.any_type and "tool" not in self.by_type:
            # no loaded rule reads a tool event: the call facts (each call's effect and
            # failure, set on every tool event) would be read by none
            self.calls = None
        self._table: dict[str, tuple[tuple[int, ...], list[_Target]]] = {}
        # run-time expression failures: each (rule, expression, reason) once, shared by
        # every sample (and every source thread) of this engine
        self._failures_seen: set[tuple[str, str, str]] = set()
        self._failures: list[RuleRunError] = []
        self._failures_lock = threading.Lock()
        # the tasks' own pace of calls, for rules that learn it (``idle`` with ``learn``):
        # only then does each sample time its calls (engine/pace.py)
        self.paced = any(getattr(r.detector, "learns", False) for r in self.rules)
        self.paces = Paces()

    def failed(self, rule: Rule, exc: ExprFailed, ref: SampleRef) -> None:
        """Record that ``rule``'s expression failed on ``ref``'s data (first time only)."""
        key = (rule.id, exc.expression, exc.reason)
        with self._failures_lock:
            if key in self._failures_seen:
                return
            self._failures_seen.add(key)
            self._failures.append(RuleRunError(rule.id, rule.source, rule.line,
                                               exc.expression, exc.reason, ref))

    def has_errors(self) -> bool:
        """Whether :meth:`take_errors` has something to give (cheap: asked per event)."""
        return bool(self._failures)

    def take_errors(self) -> list[RuleRunError]:
        """The expression failures recorded since the last call (each reported once)."""
        if not self._failures:
            return []
        with self._failures_lock:
            out, self._failures = self._failures, []
        return out

    @property
    def event_types(self) -> frozenset[str] | None:
        """Union of event types the rules read; ``None`` when some rule reads all. Rules
        that learn a task's pace read its calls (and see them pending)."""
        if self.any_type:
            return None
        types = frozenset(self.by_type)
        return types | PACED_TYPES if self.paced else types

    @property
    def tier(self) -> Tier:
        """The least content tier that satisfies every rule."""
        best = 0
        for r in self.rules:
            best = max(best, tier_rank(r.needs))  # type: ignore[arg-type]
        return TIERS[best]

    def open_sample(self, ref: SampleRef) -> SampleWatch:
        return SampleWatch(self, ref)

    def targets(self, etype: str) -> tuple[tuple[int, ...], list[_Target]]:
        """For one event type: the population counters it advances and the rules it
        reaches, in load order. Shared by every sample (a per-sample copy costs KBs)."""
        hit = self._table.get(etype)
        if hit is None:
            rules = self.by_type.get(etype, []) + self.any_type
            rules.sort(key=lambda r: self.order[r.id])
            own = set(self.own_population.values())
            pops = tuple(i for key, i in self.populations.items()
                         if i not in own and (key is None or etype in key))
            hit = (pops, [self._target(r, etype) for r in rules])
            self._table[etype] = hit
        return hit

    def _target(self, r: Rule, etype: str) -> _Target:
        """One rule's entry in the table of ``etype``: its predicate specialised to that
        type (type tests answered: compile.specialise) and its scan gate, if useful."""
        pred = r.predicate
        gate = r.gate if r.gate is not None and r.gate.useful() else None
        if etype in r.typed:
            pred = r.typed[etype]
            if pred is None or pred is never:
                gate = None  # decided by the type alone
        return (pred, self.excepted[r.id], self.order[r.id], gate, r.ignore,
                self.own_population.get(r.id, -1))


def _excepted(specs: tuple[ExceptionSpec, ...]
              ) -> Callable[[dict[str, Any], dict[str, Any]], bool] | None:
    """One call that tells whether any of a rule's exceptions covers an event (``None``
    when it has none): the dispatch loop asks it for every matching event."""
    if not specs:
        return None
    if len(specs) == 1:
        return specs[0].matches
    return lambda e, sv: any(x.matches(e, sv) for x in specs)


def _applies(s: ExceptionSpec, rule: Rule) -> bool:
    pat = s.rule or "*"
    return fnmatch.fnmatchcase(rule.id, pat) or fnmatch.fnmatchcase(rule.category, pat)


@mypyc_attr(allow_interpreted_subclasses=True)
class SampleWatch:
    """One sample attempt: bounded per-rule state; each event is processed once."""

    def __init__(self, engine: Engine, ref: SampleRef) -> None:
        self.engine = engine
        self.cache: dict[Any, Any] = {}
        self._setup(ref)

    def _setup(self, ref: SampleRef) -> None:
        self.rename(ref)
        eng = self.engine
        # in load order (Engine.order). An event rule's state is created by the first
        # event it matches: a fresh state is unarmed, so until then a miss could not
        # change it, and most rules never match most samples (opening a sample with
        # every state built cost more than its first fifty events)
        self.state_list: list[RuleState | None] = [
            None if r.reads_events else r.detector.new_state(r, self) for r in eng.rules]
        # events of each population seen so far (see Engine.populations)
        self.pop: list[int] = [0] * len(eng.populations)
        # clock-driven states: anything new on the sample ends their episode
        self.clocked = [s for s in self.state_list if s is not None and s.rule.drive == CLOCK]
        self.last_ts = 0.0
        self.finalized = False
        # shown open episodes that grew since their last snapshot, with their state
        # (RuleState.emit fills it; grown_snapshots empties it)
        self.grown: dict[Any, RuleState] = {}
        # hashes of the user messages that prompted model turns so far (bounded): one seen
        # again verbatim is the harness repeating itself (a continue message), not a person
        self.prompts: dict[int, None] = {}
        # tool calls so far, those that changed (or may have changed) state, whether the
        # current one did, and the last few (seq, name, effect or FAILED): see _call_facts
        self.call_seq = 0
        self.changed = False
        self.changes = 0
        self.recent_calls: list[tuple[int, str, str]] = []
        # the task's pace (shared by its samples) and this attempt's timing of its calls
        self.pace: Pace | None = None
        self.calls: CallClock | None = None
        if eng.paced:
            self.pace = eng.paces.of(ref.eval_id, ref.task_id)
            self.calls = CallClock(self.pace)

    def rename(self, ref: SampleRef) -> None:
        """Name the sample (what findings and exceptions read) without touching its state:
        a new attempt number, or a fresh watch lent to judge another sample's row."""
        self.ref = ref
        self.sample_view: dict[str, Any] = ref.as_dict()

    def _state(self, i: int) -> RuleState:
        """Rule ``i``'s state, created on first use."""
        s = self.state_list[i]
        if s is None:
            r = self.engine.rules[i]
            s = self.state_list[i] = r.detector.new_state(r, self)
            pop_i = self.engine.population_of.get(r.id)
            if pop_i is not None:
                s.pop_i = pop_i
        return s

    @property
    def states(self) -> dict[str, RuleState]:
        """The states created so far, by rule id (in load order)."""
        return {s.rule.id: s for s in self.state_list if s is not None}

    def suppressed(self, view: dict[str, Any], rule: Rule) -> bool:
        """Whether a rule exception or run suppression covers this event or row."""
        excepted = self.engine.excepted.get(rule.id)
        return excepted is not None and excepted(view, self.sample_view)

    def feed(self, event: Event) -> list[Finding]:
        """Process one completed event; pending events are ignored (they will come again)."""
        if event.get("pending"):
            return []
        ts = event.get("timestamp")
        if type(ts) is float or isinstance(ts, (int, float)):
            ts = float(ts)  # type: ignore[arg-type]
            if ts > self.last_ts:
                self.last_ts = ts
        else:
            ts = self.last_ts
        if self.cache:
            self.cache = {}
        if event.get("prompt_role") == "user":
            self._prompt_seen(event)
        elif self.engine.calls is not None and event.get("type") == "tool":
            self._call_facts(event, self.engine.calls)
        clock = self.calls
        if clock is not None:
            clock.see(event)
        out: list[Finding] = []
        for st in self.clocked:
            if st.ep is not None:
                out += st.activity(ts)
        eng = self.engine
        table = eng._table.get(event.get("type"))  # type: ignore[arg-type]
        if table is None:
            table = eng.targets(str(event.get("type")))
        pops, targets = table
        if not targets:
            return out
        pop = self.pop
        for i in pops:
            pop[i] += 1
        sv = self.sample_view
        states = self.state_list
        for pred, excepted, i, gate, ignore, own in targets:
            try:
                if ignore is not None:
                    if ignore(event):
                        continue  # invisible to this rule: not a match, not a miss
                    pop[own] += 1
                if gate is not None and not gate.open(event):
                    matched = False  # the shared scan rules out every pattern of the predicate
                else:
                    matched = True if pred is None else pred(event)
                if matched and excepted is not None and excepted(event, sv):
                    matched = False  # excepted: a miss, to a state that is waiting for one
                s: RuleState | None = states[i]
                if matched:
                    if s is None:
                        s = self._state(i)
                else:
                    if s is None or not s.armed():  # a miss changes nothing (the common case)
                        continue
                found = s.feed(event, ts, matched)
            except ExprFailed as exc:  # the event does not count for this rule
                eng.failed(eng.rules[i], exc, self.ref)
                continue
            if found:
                out += found
        return out

    def _call_facts(self, event: Event, calls: CallFacts) -> None:
        """Set a tool event's ``effect`` and ``failure`` (engine.calls), and remember the
        call: repeat rules ask which calls ran between two repeats and what they may
        have changed (``calls_between``)."""
        effect, name = calls.effect(event)
        event["effect"] = effect
        failure = event["failure"] = calls.failure(event)
        self.call_seq += 1
        self.changed = False
        if effect in CHANGES:
            # a call that failed (raised, or said so) is taken as having changed nothing:
            # a booking refused, a command that did not run
            if event.get("has_error") or failure is not None:
                effect = FAILED
            else:
                self.changes += 1
                self.changed = True
        recent = self.recent_calls
        recent.append((self.call_seq, name, effect))
        if len(recent) > RECENT_CALLS:
            del recent[0]

    def calls_between(self, after: int, before: int) -> dict[tuple[str, str], int]:
        """The calls strictly between call numbers ``after`` and ``before`` that are still
        remembered (the last :data:`RECENT_CALLS`), counted by (name, effect)."""
        counts: dict[tuple[str, str], int] = {}
        if before - after > 1:
            for seq, name, effect in self.recent_calls:
                if after < seq < before:
                    counts[(name, effect)] = counts.get((name, effect), 0) + 1
        return counts

    def _prompt_seen(self, event: Event) -> None:
        """Set ``prompt_seen``: the (whole) user message that prompted this model turn
        already prompted an earlier one in this attempt, word for word (whitespace and
        numbers aside). A harness nudging with its own continue message repeats it; a
        person or simulated user answering the agent says something new."""
        text = whole_value(event, "prompt")
        # numbers read alike: a harness's message with a counter in it ("[usage] tokens
        # used so far: 1,333") is the same message each time
        h = hash(_DIGITS.sub("#", collapse_ws(text))) if type(text) is str else 0
        seen = self.prompts
        event["prompt_seen"] = h in seen
        if h not in seen:
            seen[h] = None
            if len(seen) > MAX_PROMPTS:
                del seen[next(iter(seen))]

    def tick(self, now: float, status: SampleStatus) -> list[Finding]:
        """Clock-driven checks: clock-driven rules, and time windows that closed without
        events (each state's ``tick``)."""
        out: list[Finding] = []
        for s in self.state_list:
            if s is not None:
                try:
                    out += s.tick(now, status)
                except ExprFailed as exc:
                    self.engine.failed(s.rule, exc, self.ref)
        return out

    def sample_row(self, row: Any, context: RunContext | None = None,
                   now: float | None = None) -> list[Finding]:
        """Run row-driven rules over a samples-listing row (a dict or a ``SampleRow``)."""
        if not isinstance(row, dict):
            raw = dict(getattr(row, "raw", {}) or {})
            raw.setdefault("status", getattr(row, "status", None))
            raw.setdefault("retries", getattr(row, "retries", 0))
            raw.setdefault("sample_id", getattr(row, "sample_id", None))
            raw.setdefault("epoch", getattr(row, "epoch", None))
            row = raw
        when = now if now is not None else (self.last_ts or time.time())
        out: list[Finding] = []
        for s in self.state_list:
            if s is not None:
                try:
                    out += s.row(row, context, when)
                except ExprFailed as exc:  # the row does not count for this rule
                    self.engine.failed(s.rule, exc, self.ref)
        return out

    def grown_snapshots(self) -> list[Finding]:
        """A fresh snapshot of each shown episode that grew (more events, a longer span)
        since its last one, without news (no new level, not ended): the engine emits
        snapshots only when something is news, and a live watch refreshes the rest so
        that a report of a loop says how long it has gone on, not how it began."""
        if not self.grown:
            return []
        grown, self.grown = self.grown, {}
        return [s.current(ep) for ep, s in grown.items()]

    def finalize(self, now: float | None = None) -> list[Finding]:
        """End every open episode (status ``ended``); the sample is done."""
        if self.finalized:
            return []
        self.finalized = True
        when = now if now is not None else self.last_ts
        out: list[Finding] = []
        for s in self.state_list:
            if s is not None:
                out += s.finalize(when)
        return out

    def release(self) -> None:
        """Let go of the rule states of a sample that has ended (after :meth:`finalize`).

        Each state points back at its watch: dropped as they were, a watch and its
        states were a cycle that only Python's collector frees, late and at a cost (a
        post-hoc scan of 5,000 small samples left it 300,000 objects to find)."""
        self.state_list = []
        self.clocked = []
        self.grown = {}
        self.calls = None

    def reset_attempt(self, new_ref: SampleRef) -> list[Finding]:
        """A retried sample starts a new attempt: fresh state, episode numbers from 1.

        Episodes still open on the old attempt are ended first; their ``ended``
        snapshots are returned so the caller can report them.
        """
        ended = self.finalize(self.last_ts)
        self._setup(new_ref)
        return ended
