"""The compiled rule: values the loader builds once and the engine reads for every event.

A :class:`Rule` holds its validated fields and its compiled parts as plain values and
callables (predicates, the detector spec, templates, confidence conditions,
exceptions), so nothing at run time re-parses a rule. Everything here sits below the
rule language (:mod:`watcher.engine.lang`, which builds these values) and the run time
(:mod:`watcher.engine.runtime` and the detectors, which read them).

Expressions can fail on an event's data (a JMESPath function given the wrong type): a
compiled getter then raises :class:`ExprFailed`, the engine treats the event as not
counting for that rule, and it records a :class:`RuleRunError` for the caller.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from watcher.engine.text import collapse_ws
from watcher.findings import Notice, SampleRef, confidence_rank

Getter = Callable[[Any], Any]
Pred = Callable[[dict[str, Any]], bool]

# what drives a detector kind (each kind declares one, see detectors/base.Kind)
EVENT = "event"  # events fed one by one (match, repeat, threshold, ...)
CLOCK = "clock"  # the clock and the stream's status between events (idle)
ROW = "row"  # the samples-listing row of a sample (sample)


# where a rule's ``act:`` block sits in its document (a yamlsrc path)
ACT_PATH: tuple[str, ...] = ("act",)


def never(e: dict[str, Any]) -> bool:
    """The predicate no event satisfies (what a type test answers for other types)."""
    return False


class ExprFailed(Exception):
    """A rule expression failed on an event's data (raised by compiled getters).

    ``reason`` names the failure without quoting the data (agent text is untrusted
    and varies per event; one rule's failures are reported once per reason)."""

    def __init__(self, expression: str, reason: str) -> None:
        super().__init__(f"{expression}: {reason}")
        self.expression = expression
        self.reason = reason


@dataclass(frozen=True)
class RuleRunError:
    """One way one rule's expression failed at run time (reported once per rule and
    reason): the event it failed on did not count for the rule."""

    rule: str
    file: str
    line: int
    expression: str
    reason: str
    sample: SampleRef | None = None  # where it first failed

    @property
    def message(self) -> str:
        return (f"rule {self.rule} ({self.file}:{self.line}): expression "
                f"{self.expression!r} failed ({self.reason}); events it fails on do not "
                "count for the rule")

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "file": self.file, "line": self.line,
                "expression": self.expression, "reason": self.reason}

    def notice(self, at: float = 0.0) -> Notice:
        """The ``rule_error`` notice a runner reports for it (docs/findings.md)."""
        return Notice(kind="rule_error", message=self.message, sample=self.sample, at=at,
                      details=self.to_dict())


@dataclass
class CompiledPath:
    """A JMESPath expression: source text, fast getter, fields it reads."""

    source: str
    get: Getter
    fields: frozenset[str]
    fast: bool
    test: Pred | None = None  # JMESPath truthiness of ``get``, generated as one function
    # the plain field names of ``name`` or ``[a, b, ...]``: keys made of fields can be
    # prepared field by field, and rules keyed on the same field share the work
    parts: tuple[str, ...] | None = None


@dataclass
class Template:
    """A message template: literal text and ``{fact}`` fields, nothing else."""

    source: str
    parts: tuple[tuple[bool, str], ...]  # (is_field, text)

    @property
    def fields(self) -> set[str]:
        return {t for is_field, t in self.parts if is_field}

    def render(self, facts: dict[str, Any]) -> str:
        out: list[str] = []
        for is_field, text in self.parts:
            if not is_field:
                out.append(text)
                continue
            value = facts.get(text)
            if value is None:
                out.append("?")
            elif isinstance(value, float):
                out.append(f"{value:.1f}" if value != int(value) else str(int(value)))
            else:
                s = collapse_ws(str(value))
                out.append(s if len(s) <= 200 else s[:199] + "…")
        return "".join(out)


@dataclass
class ConfidenceCondition:
    """``when`` facts hold → ``raise``/``lower``/``set`` the level, for ``reason``."""

    tests: dict[str, Callable[[Any], bool]]
    op: str
    level: str
    reason: str


@dataclass
class ExceptionSpec:
    """Suppression as data: the event (or sample) field matches → the rule ignores it."""

    field: str
    op: str
    value: Any
    on_sample: bool
    get: Callable[[Any], Any]
    test: Callable[[Any], bool]
    rule: str | None = None  # for global suppressions: rule id, category or glob
    reason: str = ""

    def matches(self, event: dict[str, Any], sample_view: dict[str, Any]) -> bool:
        return self.test(self.get(sample_view if self.on_sample else event))


@dataclass
class Rule:
    """A validated, compiled rule."""

    id: str
    title: str
    category: str
    severity: str
    detect_kind: str
    detector: Any
    predicate: Pred | None  # None: every event matches
    events: frozenset[str] | None
    needs: str
    description: str = ""
    tags: tuple[str, ...] = ()
    references: tuple[str, ...] = ()
    status: str = "stable"
    enabled: bool = True
    falsepositives: tuple[str, ...] = ()
    confidence_base: str = "medium"
    confidence_reason: str = ""
    confidence_when: tuple[ConfidenceCondition, ...] = ()
    require: dict[str, Callable[[Any], bool]] = field(default_factory=dict)
    exceptions: tuple[ExceptionSpec, ...] = ()
    message: Template | None = None
    handoff: str = ""
    tests: tuple[dict[str, Any], ...] = ()
    author: str = ""
    source: str = "<string>"
    line: int = 1
    # a necessary condition of ``predicate`` answered by a shared scan (gate.Gate)
    gate: Any = None
    # ``predicate`` for events of one type, where that differs (lang.predicates.specialise)
    typed: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    fields: frozenset[str] = frozenset()
    replaces: tuple[str, ...] = ()  # sources of earlier rules with this id it replaced
    drive: str = EVENT  # what drives its detector kind: EVENT, CLOCK or ROW
    node: Any = None  # the predicate as a tree (lang.nodes), ``predicate`` its lowering
    # ``act:`` as written (a mapping, or None): the watchdog's action block, which the
    # engine never interprets (watcher.act parses it, docs/watchdog.md). ``act_doc`` is
    # its YAML document (a yamlsrc.Doc: file and the line and column of every value), so
    # the parser reports located errors: ``parse_act(rule.act_block, rule.act_doc,
    # ACT_PATH)``
    act_block: dict[str, Any] | None = None
    act_doc: Any = None
    # events matching ``ignore`` are invisible to the rule: they neither match nor miss,
    # and take no place in its windows (e.g. calls of effect ``none`` in a storm)
    ignore: Pred | None = None
    # the rule set's call effects and failure signatures (engine.calls.CallFacts)
    calls: Any = None

    @property
    def act_location(self) -> tuple[str, int, int] | None:
        """``(file, line, column)`` of the ``act:`` block's value, if there is one."""
        if self.act_doc is None:
            return None
        line, col = self.act_doc.loc(ACT_PATH)
        return (self.act_doc.file, line, col)

    def judge(self, facts: dict[str, Any]) -> tuple[str, str]:
        """Confidence level and one-sentence reason for the match facts."""
        level, reason = self.confidence_base, self.confidence_reason
        for cond in self.confidence_when:
            if all(test(facts.get(name)) for name, test in cond.tests.items()):
                if cond.op == "set":
                    level = cond.level
                elif cond.op == "raise":
                    if confidence_rank(cond.level) > confidence_rank(level):
                        level = cond.level
                elif confidence_rank(cond.level) < confidence_rank(level):
                    level = cond.level
                reason = cond.reason
        return level, reason

    def meets(self, facts: dict[str, Any]) -> bool:
        """Whether an episode's facts satisfy ``require`` (else it is not reported)."""
        return all(test(facts.get(name)) for name, test in self.require.items())

    @property
    def min_count(self) -> int:
        return int(self.detector.min_count)

    @property
    def reads_events(self) -> bool:
        return self.drive == EVENT
