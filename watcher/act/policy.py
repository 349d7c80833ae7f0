"""The action policy of ``inspect-watch watch --act``: what to do about which findings.

Policy is data. An ``act:`` block says what the watchdog does about a finding (the
language is in docs/watchdog.md)::

    verb: cancel_sample        # cancel_sample | cancel_tool_call | drain_task | pause_task
    action: score              # cancel_sample: score (keep what was done) | cancel
    when:                      # the finding must be at least this sure (never low), and
      confidence: high         #   its facts must hold: a value or {op: value}
      count: {gte: 4}          #   (eq ne gt gte lt lte in), as in a rule's confidence_when
      tokens_since_first_seen: {gte: 20000}
    grace: {events: 30, seconds: 60}  # act once N more events or T seconds have passed
                                      #   (whichever first) and it still holds

or ``off`` (``false``): no action. A policy file (``--act-policy FILE``) maps rule ids
and categories to such blocks, adds a whole-run ``interrupt`` (``kill -INT``), and may
drop the built-in defaults (:data:`DEFAULTS`, ``defaults.yaml`` beside this module)::

    defaults: true
    rules: {submit-loop: {...}, near-identical-tool-calls: off}
    categories: {stall: {...}}
    run: {interrupt: {share: 0.5, min_samples: 10}}

A rule's own ``act:`` block will reach :func:`parse_act` from the rule engine, which
parses the rule document with the same located YAML (:mod:`watcher.engine.yamlsrc`).
Which block applies to a finding (:meth:`Policy.lookup`): the file's entry for its
rule, the file's for its category, the rule's own block, the defaults' for its rule,
the defaults' for its category; the first found wins, and ``off`` ends the search.

Errors are located (file:line:col) and coded as rule errors are (docs/rules.md): the
same :class:`~watcher.engine.errors.RuleError` kinds, collected and raised together
(:class:`PolicyErrors`).
"""

from __future__ import annotations

import difflib
import math
import os
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from watcher.act.verbs import SAMPLE_ACTIONS, VERBS
from watcher.engine.errors import (
    BadValueError,
    FileError,
    MissingFieldError,
    RuleError,
    RuleLoadErrors,
    UnknownFactError,
    UnknownKeyError,
    UnknownSelectionError,
    WrongTypeError,
)
from watcher.engine.lang.ctx import Ctx
from watcher.engine.lang.facts import FACT_OPS, ORDER_OPS, fact_test
from watcher.engine.yamlsrc import MAX_FILE_BYTES, Doc, load_docs
from watcher.findings import SPEND_FACTS, Finding, confidence_rank

Path_ = tuple[Any, ...]

OFF = "off"
ACT_LEVELS = ("medium", "high")  # the watchdog never acts on a low finding
ACT_KEYS = ("verb", "action", "now", "when", "grace")
GRACE_KEYS = ("events", "seconds")
FILE_KEYS = ("defaults", "rules", "categories", "run")
RUN_KEYS = ("interrupt",)
INTERRUPT_KEYS = ("share", "min_samples", "categories")
DEFAULTS = Path(__file__).with_name("defaults.yaml")
# facts every finding has, whatever its rule: the engine's common ones and the spend
COMMON_FACTS = frozenset({"count", "span", "episode", *SPEND_FACTS})


class PolicyErrors(RuleLoadErrors):
    """Every problem found in an action policy, raised at once (located, coded)."""

    def render(self) -> str:
        n = len(self.errors)
        body = "\n".join(e.render() for e in self.errors)
        return f"{body}\n{n} error{'s' if n != 1 else ''} in the action policy"


@dataclass(frozen=True)
class FactTest:
    """One ``when`` condition on a finding's facts (``count: {gte: 4}``)."""

    name: str
    op: str
    value: Any
    line: int = 0
    col: int = 0

    test: Callable[[Any], bool] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "test", fact_test(self.op, self.value))

    def holds(self, facts: Mapping[str, Any]) -> bool:
        return self.test(facts.get(self.name))


@dataclass(frozen=True)
class ActSpec:
    """One parsed ``act:`` block (``verb == "off"``: no action)."""

    verb: str
    action: str | None = None  # cancel_sample: score | cancel
    now: bool = False  # pause_task: hold in-flight samples too (a hard pause)
    confidence: str = "high"
    facts: tuple[FactTest, ...] = ()
    grace_events: int | None = None
    grace_seconds: float | None = None
    source: str = ""  # file:line of the block, for messages

    @property
    def off(self) -> bool:
        return self.verb == OFF

    @property
    def args(self) -> dict[str, Any]:
        """What the verb is asked with, as the audit records name it."""
        declared = VERBS.get(self.verb)
        takes = declared.arguments if declared is not None else ()
        out: dict[str, Any] = {}
        if "action" in takes:
            out["action"] = self.action or "score"
        if "now" in takes:
            out["now"] = self.now
        return out

    def wants(self, f: Finding) -> bool:
        """Sure enough, and its facts hold (count and spend included)."""
        if confidence_rank(f.confidence) < confidence_rank(self.confidence):
            return False
        facts = {**f.evidence.facts, "count": f.count}
        return all(t.holds(facts) for t in self.facts)

    def describe(self) -> str:
        """The verb in words, for hand-offs and messages ("cancel the sample (action
        score)")."""
        declared = VERBS.get(self.verb)
        return declared.plan(self.args) if declared is not None else "do nothing"

    def grace_words(self) -> str:
        parts = []
        if self.grace_events is not None:
            parts.append(f"{self.grace_events} more events")
        if self.grace_seconds is not None:
            parts.append(f"{self.grace_seconds:g} s")
        return " or ".join(parts) if parts else "no wait"


OFF_SPEC = ActSpec(verb=OFF)


@dataclass(frozen=True)
class InterruptSpec:
    """``run: {interrupt: …}``: ``kill -INT`` an eval process (the graceful shutdown, as
    Ctrl+C; never SIGTERM or SIGKILL) once ``share`` of its samples (and at least
    ``min_samples``) have a ``high`` finding (of ``categories``, if given)."""

    share: float
    min_samples: int = 5
    categories: frozenset[str] | None = None
    source: str = ""


@dataclass
class Layer:
    """One source of ``act:`` blocks (the file, the rules, the defaults)."""

    name: str
    rules: dict[str, ActSpec] = field(default_factory=dict)
    categories: dict[str, ActSpec] = field(default_factory=dict)
    # where each entry was written (for errors found after parsing)
    locs: dict[tuple[str, str], tuple[Doc, Path_]] = field(default_factory=dict)
    doc: Doc | None = None  # the document it was read from (a policy file's)


@dataclass
class Policy:
    """The layers, highest precedence first, and the whole-run interrupt."""

    layers: list[Layer] = field(default_factory=list)
    interrupt: InterruptSpec | None = None

    def lookup(self, f: Finding) -> ActSpec | None:
        """The block that applies to ``f``'s rule (see the module), ``None`` if none
        does or it is ``off``."""
        found = self.find(f.rule, f.category)
        return None if found is None or found.off else found

    def find(self, rule: str, category: str) -> ActSpec | None:
        file, *rest = self.layers or [Layer("none")]
        order: list[tuple[Layer, str]] = [(file, "rules"), (file, "categories")]
        for layer in rest:
            order += [(layer, "rules"), (layer, "categories")]
        for layer, kind in order:
            table = layer.rules if kind == "rules" else layer.categories
            spec = table.get(rule if kind == "rules" else category)
            if spec is not None:
                return spec
        return None

    @property
    def empty(self) -> bool:
        """No action anywhere (every entry off, or none) and no interrupt."""
        return self.interrupt is None and not any(
            not s.off for layer in self.layers
            for s in [*layer.rules.values(), *layer.categories.values()])


# -- parsing ---------------------------------------------------------------------------


class _Ctx(Ctx):
    """The rule loader's located-error collector (file:line:col, codes, did you mean),
    with type errors worded by the policy's own names for what is wanted."""

    def wants(self, value: Any, types: type | tuple[type, ...], path: Path_, what: str,
              names: str) -> bool:
        wanted = types if isinstance(types, tuple) else (types,)
        ok = isinstance(value, wanted) and not (isinstance(value, bool) and bool not in wanted)
        if not ok:
            self.error(WrongTypeError, path, f"{what} must be {names}, got "
                       f"{type(value).__name__ if value is not None else 'null'}")
        return ok

    def keys(self, mapping: dict[Any, Any], path: Path_, allowed: Iterable[str],
             section: str) -> bool:
        return self.check_keys(mapping, path, allowed, section=section)

    def choice(self, value: Any, allowed: tuple[str, ...], path: Path_, what: str,
               hint: str | None = None) -> str | None:
        if not self.wants(value, str, path, what, "a string"):
            return None
        if value not in allowed:
            close = difflib.get_close_matches(value, allowed, n=1, cutoff=0.5)
            self.error(BadValueError, path, f"{what} {value!r} is not one of "
                       f"{', '.join(allowed)}",
                       hint or (f"did you mean {close[0]!r}?" if close else None))
            return None
        return value


def parse_act(value: Any, doc: Doc, path: Path_) -> ActSpec | list[RuleError]:
    """Parse the ``act:`` block ``value``, found at ``path`` in the located YAML
    document ``doc``: an :class:`ActSpec` (``off`` gives one whose ``off`` is true), or
    the located errors found in it.

    The rule engine calls this with a rule's document and ``("act",)``; the policy file
    with its own paths. Fact names are checked later, against the rule's detector
    (:func:`check_references`): a block on its own cannot know them.
    """
    errors: list[RuleError] = []
    spec = _act(value, _Ctx(doc, errors), path)
    if errors or spec is None:
        return errors or [WrongTypeError("invalid act block", file=doc.file)]
    return spec


def _act(value: Any, ctx: _Ctx, path: Path_) -> ActSpec | None:
    line, _ = ctx.doc.loc(path)
    source = f"{ctx.doc.file}:{line}"
    if value is False or value == OFF:
        return ActSpec(verb=OFF, source=source)
    if not ctx.wants(value, dict, path, "act", f"a mapping or {OFF!r}"):
        return None
    if not ctx.keys(value, path, ACT_KEYS, "act"):
        return None
    if "verb" not in value:
        ctx.error(MissingFieldError, path, "act is missing required field 'verb'",
                  "verb: " + " | ".join(VERBS))
        return None
    verb = ctx.choice(value["verb"], tuple(VERBS), path + ("verb",), "verb")
    takes = VERBS[verb].arguments if verb is not None else ()
    action = None
    if "action" in value:
        if verb is not None and "action" not in takes:
            ctx.error(UnknownKeyError, path + ("action",), f"'action' is for {_taking('action')}",
                      at_key=True)
        action = ctx.choice(value["action"], SAMPLE_ACTIONS, path + ("action",), "action",
                            "score ends the sample and scores what was done; cancel records "
                            "it as cancelled (the watchdog never marks a sample errored)")
    now = False
    if "now" in value:
        if verb is not None and "now" not in takes:
            ctx.error(UnknownKeyError, path + ("now",), f"'now' is for {_taking('now')}",
                      at_key=True)
        if ctx.wants(value["now"], bool, path + ("now",), "now", "true or false"):
            now = bool(value["now"])
    confidence, facts = _when(value.get("when"), ctx, path + ("when",))
    grace_events, grace_seconds = _grace(value.get("grace"), ctx, path + ("grace",))
    if ctx.failed or verb is None:
        return None
    return ActSpec(verb=verb, action=action or ("score" if "action" in takes else None),
                   now=now, confidence=confidence, facts=facts, grace_events=grace_events,
                   grace_seconds=grace_seconds, source=source)


def _taking(argument: str) -> str:
    """The verbs that take ``argument``, for a message."""
    return " and ".join(v.name for v in VERBS.values() if argument in v.arguments)


def _when(value: Any, ctx: _Ctx, path: Path_) -> tuple[str, tuple[FactTest, ...]]:
    if value is None:
        return "high", ()
    if not ctx.wants(value, dict, path, "when", "a mapping"):
        return "high", ()
    confidence = "high"
    if "confidence" in value:
        got = value["confidence"]
        if got == "low":
            ctx.error(BadValueError, path + ("confidence",), "the watchdog never acts on a "
                      "low finding", "a low finding is a hint for a person to read: use "
                      "medium or high")
        else:
            confidence = ctx.choice(got, ACT_LEVELS, path + ("confidence",),
                                    "confidence") or "high"
    tests: list[FactTest] = []
    for name, cond in value.items():
        if name == "confidence":
            continue
        p = path + (name,)
        if not isinstance(name, str):
            ctx.error(WrongTypeError, p, "a fact name must be a string", at_key=True)
            continue
        line, col = ctx.doc.loc(p, at_key=True)
        if not isinstance(cond, dict):
            if isinstance(cond, list):
                ctx.error(WrongTypeError, p, "a fact condition is a value or {op: value}",
                          "use {in: [...]} to test membership")
                continue
            tests.append(FactTest(name, "eq", cond, line, col))
            continue
        if not cond:
            ctx.error(WrongTypeError, p, "a fact condition needs at least one {op: value}")
        for op, want in cond.items():
            if op not in FACT_OPS:
                close = difflib.get_close_matches(str(op), FACT_OPS, n=1, cutoff=0.5)
                ctx.error(UnknownKeyError, p + (op,), f"unknown operator {op!r}",
                          f"did you mean {close[0]!r}?" if close else
                          "operators: " + ", ".join(FACT_OPS), at_key=True)
                continue
            if op in ORDER_OPS and not ctx.wants(
                    want, (int, float), p + (op,), op, "a number"):
                continue
            if op in ORDER_OPS and not math.isfinite(want):
                ctx.error(BadValueError, p + (op,), f"{op} must be a finite number, not "
                          f"{str(want)[:40]}", "a comparison with NaN or an infinity "
                          "never holds (or always does): the action would be off unsaid")
                continue
            if op == "in" and not ctx.wants(want, list, p + (op,), op, "a list"):
                continue
            tests.append(FactTest(name, op, want, line, col))
    return confidence, tuple(tests)


# the largest grace, interrupt minimum and the like a policy may set: a value past them
# (a 400-digit integer, .inf) would never be reached and switch the action off unsaid
MAX_COUNT = 1_000_000
MAX_SECONDS = 7 * 24 * 3600.0


def _bounded(value: Any, ctx: _Ctx, path: Path_, what: str, *, integer: bool,
             low: float, high: float, low_open: bool = False) -> bool:
    """Whether ``value`` is a finite number (an integer if ``integer``) in its range; a
    located error otherwise. NaN, infinities and numbers no eval reaches switch an
    action off without a word, so they are refused."""
    if not ctx.wants(value, int if integer else (int, float), path, what,
                     "an integer" if integer else "a number"):
        return False
    # (an int is compared as an int: math.isfinite of a 400-digit one overflows)
    ok = (isinstance(value, int) or math.isfinite(value)) and (
        value > low if low_open else value >= low) and value <= high
    if not ok:
        lowest = f"above {low:g}" if low_open else f"{low:g} or more"
        shown = str(value) if not isinstance(value, int) or value.bit_length() < 128 else (
            f"a {len(str(value))}-digit integer")
        top = f"{high:,.0f}" if float(high).is_integer() else f"{high:g}"
        ctx.error(BadValueError, path, f"{what} must be {lowest} and at most {top}, not "
                  f"{shown[:40]}", "a value no run reaches would turn the action off")
    return ok


def _grace(value: Any, ctx: _Ctx, path: Path_) -> tuple[int | None, float | None]:
    if value is None:
        return None, None
    if not ctx.wants(value, dict, path, "grace", "a mapping") or not ctx.keys(
            value, path, GRACE_KEYS, "grace"):
        return None, None
    events = seconds = None
    if "events" in value and _bounded(value["events"], ctx, path + ("events",), "events",
                                      integer=True, low=1, high=MAX_COUNT):
        events = int(value["events"])
    if "seconds" in value and _bounded(value["seconds"], ctx, path + ("seconds",), "seconds",
                                       integer=False, low=0, high=MAX_SECONDS, low_open=True):
        seconds = float(value["seconds"])
    if events is None and seconds is None and not ctx.failed:
        ctx.error(MissingFieldError, path, "grace needs events or seconds (or leave it out: "
                  "act at once)")
    return events, seconds


def _interrupt(value: Any, ctx: _Ctx, path: Path_) -> InterruptSpec | None:
    if not ctx.wants(value, dict, path, "interrupt", "a mapping") or not ctx.keys(
            value, path, INTERRUPT_KEYS, "interrupt"):
        return None
    if "share" not in value:
        ctx.error(MissingFieldError, path, "interrupt is missing required field 'share'",
                  "share: the part of the run's samples with a high finding, e.g. 0.5")
        return None
    share = value["share"]
    if not _bounded(share, ctx, path + ("share",), "share", integer=False, low=0, high=1,
                    low_open=True):
        return None
    min_samples = 5
    if "min_samples" in value and _bounded(value["min_samples"], ctx, path + ("min_samples",),
                                           "min_samples", integer=True, low=1,
                                           high=MAX_COUNT):
        min_samples = int(value["min_samples"])
    categories = None
    if "categories" in value:
        cats = value["categories"]
        if ctx.wants(cats, list, path + ("categories",), "categories", "a list"):
            if all(ctx.wants(c, str, path + ("categories", i), "category", "a string")
                   for i, c in enumerate(cats)):
                categories = frozenset(cats)
    if ctx.failed:
        return None
    line, _ = ctx.doc.loc(path)
    return InterruptSpec(float(share), min_samples, categories, f"{ctx.doc.file}:{line}")


def parse_policy(text: str, file: str, name: str = "file") -> tuple[Layer, InterruptSpec | None,
                                                                    bool]:
    """A policy document: its layer, its interrupt, and whether it keeps the defaults.
    Raises :class:`PolicyErrors` with every error found."""
    errors: list[RuleError] = []
    docs = load_docs(text, file, errors)
    layer = Layer(name)
    interrupt: InterruptSpec | None = None
    keep_defaults = True
    if len(docs) > 1:
        errors.append(WrongTypeError("an action policy is one YAML document", file=file,
                                     line=docs[1].start_line, col=1,
                                     hint="remove the second '---'"))
    for doc in docs[:1]:
        ctx = _Ctx(doc, errors)
        layer.doc = doc
        data = doc.data
        if not ctx.wants(data, dict, (), "an action policy", "a mapping"):
            break
        ctx.keys(data, (), FILE_KEYS, "the action policy")
        if "defaults" in data and ctx.wants(data["defaults"], bool, ("defaults",),
                                             "defaults", "true or false"):
            keep_defaults = bool(data["defaults"])
        for kind in ("rules", "categories"):
            table = data.get(kind)
            if table is None:
                continue
            if not ctx.wants(table, dict, (kind,), kind, "a mapping of name: act block"):
                continue
            for key, block in table.items():
                if not isinstance(key, str):
                    ctx.error(WrongTypeError, (kind, key), "a name must be a string",
                              at_key=True)
                    continue
                spec = _act(block, ctx, (kind, key))
                if spec is not None:
                    getattr(layer, kind)[key] = spec
                    layer.locs[(kind, key)] = (doc, (kind, key))
        run = data.get("run")
        if run is not None and ctx.wants(run, dict, ("run",), "run", "a mapping") and ctx.keys(
                run, ("run",), RUN_KEYS, "run") and "interrupt" in run:
            interrupt = _interrupt(run["interrupt"], ctx, ("run", "interrupt"))
    if errors:
        raise PolicyErrors(errors)
    return layer, interrupt, keep_defaults


def read_policy_file(path: str | os.PathLike[str]) -> str:
    """A policy file's text; a missing, unreadable or non-regular file is a located
    error (as rule files: a FIFO would block the watch, a device never end)."""
    p = str(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with open(fd, encoding="utf-8") as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise PolicyErrors([FileError("not a regular file (a device, FIFO or socket)",
                                              file=p, hint="an action policy is a YAML file")])
            return fh.read(MAX_FILE_BYTES + 1)
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyErrors([FileError(f"cannot read the action policy: {exc}", file=p,
                                      hint="check the path given to --act-policy")]) from exc


def load_policy(path: str | os.PathLike[str] | None = None, *, builtin: bool = True,
                rule_acts: Mapping[str, ActSpec] | None = None) -> Policy:
    """The policy of a watch: the file at ``path`` (if any) over the rules' own ``act:``
    blocks (``rule_acts``, rule id → block) over the built-in defaults (unless the file
    says ``defaults: false`` or ``builtin`` is false). Raises :class:`PolicyErrors`."""
    layers: list[Layer] = []
    interrupt = None
    keep = builtin
    if path is not None:
        layer, interrupt, keep_defaults = parse_policy(read_policy_file(path), str(path))
        keep = keep and keep_defaults
        layers.append(layer)
    else:
        layers.append(Layer("file"))
    layers.append(Layer("rules", rules=dict(rule_acts or {})))
    if keep:
        layers.append(parse_policy(DEFAULTS.read_text(encoding="utf-8"), str(DEFAULTS),
                                   "defaults")[0])
    return Policy(layers, interrupt)


# -- the rules' own blocks --------------------------------------------------------------


@dataclass(frozen=True)
class RuleActBlock:
    """A rule's own ``act:`` block as the rule loader keeps it: the raw value, the
    located document it was read from, and its path in that document."""

    value: Any
    doc: Doc
    path: Path_ = ("act",)


def rule_act_block(rule: Any) -> RuleActBlock | None:
    """A loaded rule's own ``act:`` block, or ``None`` (no block, or a rule engine that
    does not keep one yet). The one place that reads it off a compiled rule: the loader
    keeps it raw, with its location, as ``rule.act_block``."""
    block = getattr(rule, "act_block", None)
    if block is None or isinstance(block, RuleActBlock):
        return block
    doc = getattr(rule, "act_doc", None)
    if isinstance(doc, Doc):  # the engine's: the value as written, its document, ACT_PATH
        from watcher.engine.rule import ACT_PATH

        return RuleActBlock(block, doc, tuple(ACT_PATH))
    if isinstance(block, tuple) and len(block) in (2, 3):
        return RuleActBlock(*block)
    doc = getattr(block, "doc", None)
    if isinstance(doc, Doc):  # an object of the loader's own with value, doc (and path)
        return RuleActBlock(getattr(block, "value", None), doc,
                            tuple(getattr(block, "path", ("act",))))
    raise TypeError(f"rule {getattr(rule, 'id', '?')}: act_block of unknown shape "
                    f"{type(block).__name__}")


def rule_acts(rules: Iterable[Any]) -> dict[str, ActSpec]:
    """The rules' own ``act:`` blocks, parsed (rule id → block), for :func:`load_policy`.
    Raises :class:`PolicyErrors` with every located error of every block."""
    out: dict[str, ActSpec] = {}
    errors: list[RuleError] = []
    for rule in rules:
        block = rule_act_block(rule)
        if block is None:
            continue
        got = parse_act(block.value, block.doc, block.path)
        if isinstance(got, list):
            errors += got
        else:
            out[str(rule.id)] = got
    if errors:
        raise PolicyErrors(errors)
    return out


# -- references ------------------------------------------------------------------------


@dataclass(frozen=True)
class RuleInfo:
    """What the policy is checked against for one loaded rule: its category and the
    facts its detector emits (``None``: not known, not checked)."""

    category: str
    facts: frozenset[str] | None = None


def check_references(policy: Policy, rules: Mapping[str, RuleInfo]) -> None:
    """The policy file names loaded rules and categories, and its conditions name facts
    those rules have; raises :class:`PolicyErrors` (W121, W119) otherwise. Entries of the
    built-in defaults for rules not loaded (``--only``, ``--disable``) are fine."""
    errors: list[RuleError] = []
    categories: dict[str, set[str] | None] = {}
    for info in rules.values():
        have = categories.setdefault(info.category, set())
        if have is not None:
            if info.facts is None:
                categories[info.category] = None
            else:
                have.update(info.facts)
    for layer in policy.layers:
        if layer.name == "rules":  # a rule's own block: the facts of that rule
            for name, spec in layer.rules.items():
                known_rule = rules.get(name)
                if known_rule is not None and known_rule.facts is not None:
                    errors += _unknown_facts(name, spec, known_rule.facts, None)
        if layer.name != "file":
            continue
        for (kind, name), (doc, path) in layer.locs.items():
            ctx = _Ctx(doc, errors)
            known = list(rules) if kind == "rules" else list(categories)
            if name not in known:
                close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
                what = "rule id" if kind == "rules" else "category"
                ctx.error(UnknownSelectionError, path, f"no loaded {what} {name!r}",
                          f"did you mean {close[0]!r}?" if close else
                          f"loaded {kind}: " + ", ".join(sorted(known)), at_key=True)
                continue
            spec = (layer.rules if kind == "rules" else layer.categories)[name]
            facts = rules[name].facts if kind == "rules" else categories[name]
            if facts is None:
                continue
            errors += _unknown_facts(name, spec, facts, doc)
    errors += _interrupt_categories(policy, set(categories))
    if not errors and rules and policy.interrupt is None and not any(
            (found := policy.find(name, info.category)) is not None and not found.off
            for name, info in rules.items()):
        errors.append(_acts_on_nothing(policy))
    if errors:
        raise PolicyErrors(errors)


def _interrupt_categories(policy: Policy, known: set[str]) -> list[RuleError]:
    """W121 for a ``run.interrupt.categories`` entry no loaded rule has: the interrupt
    would count no sample of it, and never come."""
    spec = policy.interrupt
    if spec is None or spec.categories is None:
        return []
    file, _, line = spec.source.rpartition(":")
    out: list[RuleError] = []
    for name in sorted(spec.categories - known):
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
        out.append(UnknownSelectionError(
            f"run.interrupt.categories: no loaded category {name!r}", file=file,
            line=int(line) if line.isdigit() else 1, col=1,
            hint=f"did you mean {close[0]!r}?" if close else
            "loaded categories: " + ", ".join(sorted(known))))
    return out


def _acts_on_nothing(policy: Policy) -> RuleError:
    """The error for a policy under which ``--act`` could do nothing at all (every loaded
    rule off or without a block, no interrupt): the watch's banner would say it acts."""
    file_layer = next((x for x in policy.layers if x.name == "file"), None)
    doc = file_layer.doc if file_layer is not None else None
    if doc is not None:
        data = doc.data if isinstance(doc.data, dict) else {}
        line, col = doc.loc(("defaults",), at_key=True) if "defaults" in data else (1, 1)
        return BadValueError(
            "this action policy acts on nothing: no loaded rule has an action under it "
            "and there is no run interrupt, so --act would only watch",
            file=doc.file, line=line, col=col, source_line=doc.source_line(line),
            hint="keep the built-in defaults (defaults: true) or add an action under "
            "rules:, categories: or run:")
    return BadValueError(
        "no loaded rule has an action (the built-in defaults act on submit loops and "
        "repeated tool calls) and there is no run interrupt, so --act would only watch",
        file="--act", line=1, col=1,
        hint="load those rules, or give an --act-policy that acts on what you load")


def _unknown_facts(name: str, spec: ActSpec, facts: Iterable[str],
                   doc: Doc | None) -> list[RuleError]:
    """W119 for each condition of ``spec`` on a fact ``name``'s rules do not have."""
    allowed = set(facts) | COMMON_FACTS
    file = doc.file if doc is not None else spec.source.rsplit(":", 1)[0]
    out: list[RuleError] = []
    for t in spec.facts:
        if t.name not in allowed:
            close = difflib.get_close_matches(t.name, sorted(allowed), n=1)
            out.append(UnknownFactError(
                f"{name!r} has no fact {t.name!r}", file=file, line=t.line, col=t.col,
                source_line=doc.source_line(t.line) if doc is not None else None,
                hint=(f"did you mean {close[0]!r}? " if close else "") +
                "facts: " + ", ".join(sorted(allowed))))
    return out
