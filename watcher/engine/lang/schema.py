"""Rule documents at load time: validation of every field, compiled into a :class:`Rule`.

Validation reports every problem of a document (not just the first) with its
position; a rule with any error is dropped, and the loader raises all errors
together.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from watcher.engine.detectors import DETECTORS
from watcher.engine.detectors.params import Kind, Problem
from watcher.engine.errors import (
    BadDetectorParamsError,
    BadIdError,
    BadTestError,
    BadValueError,
    MissingFieldError,
    NeedsMismatchError,
    RuleError,
    UnknownFactError,
    WrongTypeError,
)
from watcher.engine.lang.ctx import Ctx, did_you_mean
from watcher.engine.lang.facts import FACT_OPS, ORDER_OPS, fact_test
from watcher.engine.lang.nodes import Node, gate, lower, lowered_or_none, specialise
from watcher.engine.lang.params import check_table
from watcher.engine.lang.paths import compile_path
from watcher.engine.lang.predicates import PREDICATE_KEYS, PredicateCompiler, Registry
from watcher.engine.lang.regex import compile_regex
from watcher.engine.lang.templates import compile_template
from watcher.engine.rule import (
    EVENT,
    CompiledPath,
    ConfidenceCondition,
    ExceptionSpec,
    Pred,
    Rule,
)
from watcher.engine.text import bound_text
from watcher.engine.yamlsrc import Doc, Path_
from watcher.events import TIERS, tier_rank, to_text
from watcher.findings import CONFIDENCE_LEVELS, SEVERITY_LEVELS

META_KEYS = (
    "id", "title", "description", "category", "severity", "tags", "references", "status",
    "enabled", "falsepositives", "events", "needs", "detect", "confidence", "confidence_when",
    "exceptions", "message", "handoff", "tests", "author", "require", "act", "ignore",
)
RULE_KEYS = META_KEYS + PREDICATE_KEYS
BUILTIN_CATEGORIES = (
    "submit_loop", "narration_loop", "repeated_tool_call", "shortcut", "stall", "error_storm",
    "sample_error", "retry_exhausted", "limit", "token_usage", "sentinel",
)
STATUSES = ("stable", "experimental")
EXCEPTION_OPS = ("equals", "in", "regex", "contains", "startswith")
TEST_KEYS = ("name", "description", "events", "file", "expect")
EXPECT_KEYS = ("rule", "count", "confidence", "severity", "status")
ID_RX = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
CATEGORY_RX = re.compile(r"^[a-z0-9]+(?:[_-][a-z0-9]+)*$")
# event fields holding agent text: a rule reading them needs at least the content tier
CONTENT_FIELDS = frozenset({"completion", "arguments", "args", "result", "error", "data",
                            "message", "input", "output", "explanation", "failure",
                            "whole"})
FULL_FIELDS = frozenset({"tool_calls", "tools", "raw"})


def _enum(value: Any, allowed: tuple[str, ...], ctx: Ctx, path: Path_, what: str) -> str | None:
    if not ctx.expect(value, str, path, what):
        return None
    if value not in allowed:
        close = difflib.get_close_matches(value, allowed, n=1, cutoff=0.5)
        ctx.error(BadValueError, path, f"{what} {value!r} is not one of {', '.join(allowed)}",
                  f"did you mean {close[0]!r}?" if close else None)
        return None
    return value


def _str_list(value: Any, ctx: Ctx, path: Path_, what: str) -> tuple[str, ...] | None:
    if isinstance(value, str):
        return (value,)
    if not ctx.expect(value, list, path, what):
        return None
    for i, v in enumerate(value):
        if not ctx.expect(v, str, path + (i,), f"{what} item"):
            return None
    return tuple(value)


def _fact_test(value: Any, ctx: Ctx, path: Path_) -> Callable[[Any], bool] | None:
    if not isinstance(value, dict):
        if isinstance(value, list):
            ctx.error(WrongTypeError, path, "a fact condition is a value or {op: value}",
                      "use {in: [...]} to test membership")
            return None
        return fact_test("eq", value)
    if not ctx.check_keys(value, path, FACT_OPS, section="condition"):
        return None
    tests: list[Callable[[Any], bool]] = []
    for op, want in value.items():
        if op in ORDER_OPS:
            if not ctx.expect(want, (int, float), path + (op,), op):
                return None
        elif op == "in" and not ctx.expect(want, list, path + (op,), "in"):
            return None
        tests.append(fact_test(op, want))
    return lambda v: all(t(v) for t in tests)


def parse_exception(item: Any, ctx: Ctx, path: Path_, extra_keys: tuple[str, ...] = ()
                    ) -> ExceptionSpec | None:
    """``{field, op, value}`` (``sample.<x>`` reads the sample context, e.g. its task)."""
    if not ctx.expect(item, dict, path, "exception"):
        return None
    if not ctx.check_keys(item, path, ("field", "op", "value", "reason") + extra_keys,
                          ["field", "op", "value"], section="exception"):
        return None
    fld = item["field"]
    if not ctx.expect(fld, str, path + ("field",), "field"):
        return None
    op = _enum(item["op"], EXCEPTION_OPS, ctx, path + ("op",), "op")
    if op is None:
        return None
    on_sample = fld == "sample" or fld.startswith("sample.")
    expr = fld[len("sample."):] if fld.startswith("sample.") else ("@" if on_sample else fld)
    cp: CompiledPath | None = compile_path(expr, ctx, path + ("field",), "field")
    if cp is None:
        return None
    value = item["value"]
    test: Callable[[Any], bool]
    if op == "in":
        if not ctx.expect(value, list, path + ("value",), "value of op 'in'"):
            return None
        sval = {str(v) for v in value}

        def test(v: Any) -> bool:
            if type(v) is str:  # the common case (a function name): one set lookup
                return v in sval
            return v is not None and (v in value or str(v) in sval)

    elif op == "regex":
        rx = compile_regex(value, ctx, path + ("value",))
        if rx is None:
            return None
        test = lambda v: v is not None and rx.search(bound_text(to_text(v))) is not None  # noqa: E731
    elif op in ("contains", "startswith"):
        if not ctx.expect(value, str, path + ("value",), f"value of op {op!r}"):
            return None
        if op == "contains":
            test = lambda v: v is not None and value in to_text(v)  # noqa: E731
        else:
            test = lambda v: v is not None and to_text(v).startswith(value)  # noqa: E731
    else:
        test = lambda v: v == value or (v is not None and str(v) == str(value))  # noqa: E731
    reason = item.get("reason", "")
    if not ctx.expect(reason, str, path + ("reason",), "reason"):
        return None
    return ExceptionSpec(fld, op, value, on_sample, cp.get, test, reason=reason)


def _parse_tests(value: Any, ctx: Ctx, path: Path_, rule_file: str) -> tuple[dict[str, Any], ...]:
    if not ctx.expect(value, list, path, "tests"):
        return ()
    out = []
    names: set[str] = set()
    for i, case in enumerate(value):
        p = path + (i,)
        if not ctx.expect(case, dict, p, "test case"):
            continue
        if not ctx.check_keys(case, p, TEST_KEYS, ["name", "expect"], section="test case"):
            continue
        name = case["name"]
        if not ctx.expect(name, str, p + ("name",), "test name"):
            continue
        if name in names:
            ctx.error(BadTestError, p + ("name",), f"duplicate test name {name!r}")
            continue
        names.add(name)
        if ("events" in case) == ("file" in case):
            ctx.error(BadTestError, p, f"test {name!r} needs exactly one of 'events' or 'file'")
            continue
        if "events" in case:
            evs = case["events"]
            if not ctx.expect(evs, list, p + ("events",), "events"):
                continue
            if any(not isinstance(x, dict) for x in evs):
                ctx.error(BadTestError, p + ("events",), "every test event must be a mapping")
                continue
        else:
            f = case["file"]
            if not ctx.expect(f, str, p + ("file",), "file"):
                continue
            target = Path(rule_file).parent / f
            if not target.is_file():
                ctx.error(BadTestError, p + ("file",), f"test file {f!r} not found",
                          "paths are relative to the rule file's directory")
                continue
        exp = case["expect"]
        if not ctx.expect(exp, list, p + ("expect",), "expect"):
            continue
        bad = False
        for j, item in enumerate(exp):
            q = p + ("expect", j)
            if not ctx.expect(item, dict, q, "expectation") or not ctx.check_keys(
                item, q, EXPECT_KEYS, section="expectation"
            ):
                bad = True
                continue
            if "count" in item and not ctx.expect(item["count"], int, q + ("count",), "count"):
                bad = True
            if "confidence" in item and _enum(item["confidence"], CONFIDENCE_LEVELS, ctx,
                                              q + ("confidence",), "confidence") is None:
                bad = True
            if "severity" in item and _enum(item["severity"], SEVERITY_LEVELS, ctx,
                                            q + ("severity",), "severity") is None:
                bad = True
        if not bad:
            out.append(dict(case, _line=ctx.doc.loc(p)[0]))
    return tuple(out)


def _typed(node: Node | None, events: frozenset[str] | None,
           registry: Registry) -> dict[str, Any]:
    """The rule's predicate specialised to each event type it reads, where that differs
    (``None``: every event of the type matches; ``never``: none does)."""
    if node is None or not events:
        return {}
    out: dict[str, Any] = {}
    for t in sorted(events):
        got = specialise(node, t)
        if got is not node:
            out[t] = lowered_or_none(got, registry.lowered)
    return out


# the plain fields of a rule, in the order they are checked: (key, kind, default, what)
# kinds: "str", "bool", "strs" (a string or a list of strings), an enum's values, and
# "category" (snake_case)
META: tuple[tuple[str, Any, Any], ...] = (
    ("title", "str", ""),
    ("category", "category", ""),
    ("severity", SEVERITY_LEVELS, "warning"),
    ("status", STATUSES, "stable"),
    ("enabled", "bool", True),
    ("description", "str", ""),
    ("handoff", "str", ""),
    ("author", "str", ""),
    ("tags", "strs", []),
    ("references", "strs", []),
    ("falsepositives", "strs", []),
)
REQUIRED = ("id", "title", "category", "severity", "detect")


def _meta(data: dict[str, Any], ctx: Ctx) -> dict[str, Any]:
    """The plain fields, checked (``None`` where an enum's value is not allowed)."""
    out: dict[str, Any] = {}
    for key, kind, default in META:
        value = data.get(key, default)
        path = (key,)
        if kind == "str" or kind == "bool":
            ctx.expect(value, str if kind == "str" else bool, path, key)
        elif kind == "category":
            if ctx.expect(value, str, path, key) and value and not CATEGORY_RX.match(value):
                ctx.error(BadValueError, path, f"category {value!r} is not snake_case",
                          "built-ins: " + ", ".join(BUILTIN_CATEGORIES))
        elif kind == "strs":
            value = _str_list(value, ctx, path, key) or ()
        else:
            value = _enum(value, kind, ctx, path, key)
        out[key] = value
    return out


def _rule_id(data: dict[str, Any], ctx: Ctx) -> None:
    rid = ctx.rule_id
    if rid is not None and not ID_RX.match(rid):
        ctx.error(BadIdError, ("id",), f"rule id {rid!r} is not kebab-case",
                  "lowercase letters, digits and single dashes, e.g. my-rule")
    elif "id" in data and rid is None:
        ctx.expect(data["id"], str, ("id",), "id")


def _detect(data: dict[str, Any], ctx: Ctx, pc: PredicateCompiler) -> tuple[Kind | None, Any]:
    """The detector kind and its compiled spec (``None`` where either is wrong)."""
    detect = data.get("detect")
    if detect is None:
        return None, None
    if isinstance(detect, str):
        detect = {detect: None}
    if not ctx.expect(detect, dict, ("detect",), "detect"):
        return None, None
    if len(detect) != 1:
        ctx.error(BadDetectorParamsError, ("detect",),
                  f"detect must hold exactly one detector, got {len(detect)}",
                  "one of: " + ", ".join(DETECTORS))
        return None, None
    name = next(iter(detect))
    kind = DETECTORS.get(name)
    if kind is None:
        ctx.error(BadValueError, ("detect", name), f"unknown detector {name!r}",
                  did_you_mean(name, list(DETECTORS), "one of: " + ", ".join(DETECTORS)),
                  at_key=True)
        return None, None
    path = ("detect", name)
    reads: set[str] = set()
    values = check_table(detect[name], kind.params, ctx, path, pc, reads)
    if values is None:
        return kind, None
    spec = kind.build(values)
    if isinstance(spec, Problem):
        ctx.error(BadDetectorParamsError, path + spec.path, spec.message, spec.hint)
        return kind, None
    pc.fields |= reads
    return kind, spec


def _events_needs(data: dict[str, Any], ctx: Ctx, reads_events: bool
                  ) -> tuple[frozenset[str] | None, str]:
    events: frozenset[str] | None = None
    if "events" in data:
        ev = _str_list(data["events"], ctx, ("events",), "events")
        if ev is not None:
            events = None if "*" in ev else frozenset(ev)
    elif reads_events:
        ctx.error(MissingFieldError, (), "rule is missing required field 'events'",
                  "list the event types it reads, e.g. events: [tool]")
    needs = "metadata"
    if "needs" in data:
        needs = _enum(data["needs"], TIERS, ctx, ("needs",), "needs") or "full"
    elif reads_events:
        ctx.error(MissingFieldError, (), "rule is missing required field 'needs'",
                  "metadata, content or full: the least text tier the rule reads")
    return events, needs


def _predicate(data: dict[str, Any], ctx: Ctx, pc: PredicateCompiler, kind: Kind | None,
               events: frozenset[str] | None) -> Node | None:
    """The rule's own event predicate (``None``: every event matches)."""
    spec = {k: v for k, v in data.items() if k in PREDICATE_KEYS}
    tv = spec.get("type")
    tlist = tv if isinstance(tv, list) else [tv]
    tset = {t for t in tlist if isinstance(t, str)}
    if tv is not None and events and len(tset) == len(tlist) and events <= tset:
        del spec["type"]  # dispatch by event type already guarantees it
    if not spec:
        return None
    if kind is not None and kind.drive != EVENT:
        ctx.error(BadDetectorParamsError, (next(iter(spec)),),
                  f"event predicates do not apply to the {kind.name} detector",
                  kind.predicate_hint, at_key=True)
        return None
    return pc.node(spec, (), "rule")


def _ignore(data: dict[str, Any], ctx: Ctx, pc: PredicateCompiler,
            kind: Kind | None) -> Pred | None:
    """``ignore:``: events the rule does not see at all (not even as a miss)."""
    if "ignore" not in data:
        return None
    if kind is not None and kind.drive != EVENT:
        ctx.error(BadDetectorParamsError, ("ignore",),
                  f"ignore applies to events, and the {kind.name} detector reads none",
                  kind.predicate_hint, at_key=True)
        return None
    node = pc.node(data["ignore"], ("ignore",), "ignore")
    return None if node is None else lower(node, pc.registry.lowered)


def _confidence(data: dict[str, Any], ctx: Ctx, kind: Kind | None) -> tuple[str, str]:
    base, reason = "medium", ""
    conf = data.get("confidence", "medium")
    if isinstance(conf, str):
        base = _enum(conf, CONFIDENCE_LEVELS, ctx, ("confidence",), "confidence") or "medium"
    elif ctx.expect(conf, dict, ("confidence",), "confidence"):
        if ctx.check_keys(conf, ("confidence",), ["base", "reason"], ["base"],
                          section="confidence"):
            base = _enum(conf["base"], CONFIDENCE_LEVELS, ctx, ("confidence", "base"),
                         "confidence.base") or "medium"
            reason = conf.get("reason", "")
            ctx.expect(reason, str, ("confidence", "reason"), "confidence.reason")
    if not reason:
        name = kind.name if kind else "rule"
        reason = f"The {name} pattern matched; {base} is this rule's base level."
    return base, reason


def _fact_tests(when: dict[str, Any], ctx: Ctx, path: Path_, kind: Kind | None
                ) -> dict[str, Callable[[Any], bool]]:
    """Tests of named facts (each must be one the detector has)."""
    tests: dict[str, Callable[[Any], bool]] = {}
    for fname, fval in when.items():
        if kind is not None and fname not in kind.facts:
            facts = sorted(kind.facts)
            close = difflib.get_close_matches(str(fname), facts, n=1)
            ctx.error(UnknownFactError, path + (fname,),
                      f"the {kind.name} detector has no fact {fname!r}",
                      f"did you mean {close[0]!r}?" if close else
                      "facts: " + ", ".join(facts), at_key=True)
            continue
        t = _fact_test(fval, ctx, path + (fname,))
        if t is not None:
            tests[str(fname)] = t
    return tests


def _conditions(data: dict[str, Any], ctx: Ctx, kind: Kind | None
                ) -> tuple[ConfidenceCondition, ...]:
    conds: list[ConfidenceCondition] = []
    cw = data.get("confidence_when", [])
    if not ctx.expect(cw, list, ("confidence_when",), "confidence_when"):
        return ()
    for i, item in enumerate(cw):
        p = ("confidence_when", i)
        if not ctx.expect(item, dict, p, "condition") or not ctx.check_keys(
            item, p, ["when", "raise", "lower", "set", "reason"], ["when", "reason"],
            section="confidence_when item",
        ):
            continue
        ops = [o for o in ("raise", "lower", "set") if o in item]
        if len(ops) != 1:
            ctx.error(BadValueError, p, "a condition needs exactly one of raise/lower/set")
            continue
        level = _enum(item[ops[0]], CONFIDENCE_LEVELS, ctx, p + (ops[0],), ops[0])
        reason = item["reason"]
        when = item["when"]
        if level is None or not ctx.expect(reason, str, p + ("reason",), "reason") or \
                not ctx.expect(when, dict, p + ("when",), "when"):
            continue
        conds.append(ConfidenceCondition(_fact_tests(when, ctx, p + ("when",), kind), ops[0],
                                         level, reason))
    return tuple(conds)


def _exceptions(data: dict[str, Any], ctx: Ctx) -> tuple[ExceptionSpec, ...]:
    excs: list[ExceptionSpec] = []
    ex = data.get("exceptions", [])
    if ctx.expect(ex, list, ("exceptions",), "exceptions"):
        for i, item in enumerate(ex):
            e = parse_exception(item, ctx, ("exceptions", i))
            if e is not None:
                excs.append(e)
    return tuple(excs)


def _tier_check(data: dict[str, Any], ctx: Ctx, needs: str, fields: set[str]) -> None:
    """A rule that reads agent text cannot claim the metadata tier."""
    if "needs" not in data or needs not in TIERS:
        return
    text = sorted(fields & CONTENT_FIELDS)
    full = sorted(fields & FULL_FIELDS)
    if full and tier_rank(needs) < tier_rank("full"):  # type: ignore[arg-type]
        ctx.error(NeedsMismatchError, ("needs",),
                  f"rule reads {', '.join(full)} (full tier) but declares needs: {needs}",
                  "set needs: full")
    elif text and needs == "metadata":
        ctx.error(NeedsMismatchError, ("needs",),
                  f"rule reads agent text ({', '.join(text)}) but declares needs: metadata",
                  "set needs: content")


def parse_rule(doc: Doc, registry: Registry, errors: list[RuleError]) -> Rule | None:
    """Validate and compile one rule document; errors go to ``errors``."""
    data = doc.data
    rid = data.get("id") if isinstance(data.get("id"), str) else None
    ctx = Ctx(doc, errors, rid)
    ctx.check_keys(data, (), RULE_KEYS, REQUIRED)
    _rule_id(data, ctx)
    meta = _meta(data, ctx)
    pc = PredicateCompiler(registry, ctx)
    kind, spec = _detect(data, ctx, pc)
    reads_events = kind is not None and kind.drive == EVENT
    events, needs = _events_needs(data, ctx, reads_events)
    node = _predicate(data, ctx, pc, kind, events)
    base, base_reason = _confidence(data, ctx, kind)
    conds = _conditions(data, ctx, kind)
    rq = data.get("require", {})
    require = _fact_tests(rq, ctx, ("require",), kind) if ctx.expect(
        rq, dict, ("require",), "require") else {}
    excs = _exceptions(data, ctx)
    ignore = _ignore(data, ctx, pc, kind)
    message = None
    if "message" in data:
        message = compile_template(data["message"], ctx, ("message",),
                                   set(kind.facts) if kind else set())
    cases = _parse_tests(data["tests"], ctx, ("tests",), doc.file) if "tests" in data else ()
    # the watchdog's action block: a mapping, kept as written (with its document, for
    # located errors) and never read here; watcher.act parses it (docs/watchdog.md)
    act = data.get("act")
    if "act" in data and not ctx.expect(act, dict, ("act",), "act"):
        act = None
    _tier_check(data, ctx, needs, pc.fields)
    if ctx.failed or kind is None or spec is None or rid is None or meta["severity"] is None:
        return None
    read = events if reads_events else frozenset()
    return Rule(
        id=rid, title=meta["title"], category=meta["category"], severity=meta["severity"],
        detect_kind=kind.name, detector=spec, events=read, node=node,
        predicate=None if node is None else lower(node, registry.lowered),
        gate=None if node is None else gate(node, registry.gates),
        typed=_typed(node, read, registry), needs=needs,
        description=meta["description"], tags=meta["tags"], references=meta["references"],
        status=meta["status"] or "stable", enabled=bool(meta["enabled"]),
        falsepositives=meta["falsepositives"], confidence_base=base,
        confidence_reason=base_reason, confidence_when=conds, require=require,
        exceptions=excs, message=message, handoff=meta["handoff"], tests=cases,
        author=meta["author"], source=doc.file, line=doc.start_line, data=data,
        fields=frozenset(pc.fields), drive=kind.drive,
        act_block=act, act_doc=doc if act is not None else None,
        ignore=ignore, calls=registry.calls,
    )
