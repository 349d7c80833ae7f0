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

from watcher.engine.detectors import DETECTORS, DRIVES, EVENT_DETECTORS, FACTS_OF
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
from watcher.engine.lang.ctx import Ctx
from watcher.engine.lang.paths import compile_path
from watcher.engine.lang.predicates import PREDICATE_KEYS, PredicateCompiler, Registry, specialise
from watcher.engine.lang.regex import compile_regex
from watcher.engine.lang.templates import compile_template
from watcher.engine.rule import CompiledPath, ConfidenceCondition, ExceptionSpec, Rule
from watcher.engine.text import bound_text
from watcher.engine.yamlsrc import Doc, Path_
from watcher.events import TIERS, tier_rank, to_text
from watcher.findings import CONFIDENCE_LEVELS, SEVERITY_LEVELS

META_KEYS = (
    "id", "title", "description", "category", "severity", "tags", "references", "status",
    "enabled", "falsepositives", "events", "needs", "detect", "confidence", "confidence_when",
    "exceptions", "message", "handoff", "tests", "author", "require",
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
FACT_OPS = ("eq", "ne", "gt", "gte", "lt", "lte", "in")
ID_RX = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
CATEGORY_RX = re.compile(r"^[a-z0-9]+(?:[_-][a-z0-9]+)*$")
# event fields holding agent text: a rule reading them needs at least the content tier
CONTENT_FIELDS = frozenset({"completion", "arguments", "args", "result", "error", "data",
                            "message", "input", "output", "explanation"})
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
        return _fact_op("eq", value)
    if not ctx.check_keys(value, path, FACT_OPS, section="condition"):
        return None
    tests: list[Callable[[Any], bool]] = []
    for op, want in value.items():
        if op in ("gt", "gte", "lt", "lte"):
            if not ctx.expect(want, (int, float), path + (op,), op):
                return None
        elif op == "in" and not ctx.expect(want, list, path + (op,), "in"):
            return None
        tests.append(_fact_op(op, want))
    return lambda v: all(t(v) for t in tests)


_ORDERS: dict[str, Callable[[Any, Any], bool]] = {
    "gt": lambda a, b: a > b, "gte": lambda a, b: a >= b,
    "lt": lambda a, b: a < b, "lte": lambda a, b: a <= b}


def _fact_op(op: str, want: Any) -> Callable[[Any], bool]:
    """One fact test (``want`` already checked for ``op``)."""
    if op in _ORDERS:
        cmp = _ORDERS[op]
        return lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and cmp(v, want)
    if op == "in":
        return lambda v: any(_eq(v, x) for x in want)
    if op == "eq":
        return lambda v: _eq(v, want)
    return lambda v: not _eq(v, want)


def _eq(a: Any, b: Any) -> bool:
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    return bool(a == b)


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


def _typed(predicate: Callable[[dict[str, Any]], bool] | None, events: frozenset[str] | None,
           registry: Registry) -> dict[str, Any]:
    """The rule's predicate specialised to each event type it reads, where that differs."""
    if predicate is None or not events:
        return {}
    out: dict[str, Any] = {}
    for t in sorted(events):
        got = specialise(predicate, t, registry.shapes)
        if got is not predicate:
            out[t] = got
    return out


def parse_rule(doc: Doc, registry: Registry, errors: list[RuleError]) -> Rule | None:
    """Validate and compile one rule document; errors go to ``errors``."""
    data = doc.data
    rid = data.get("id") if isinstance(data.get("id"), str) else None
    ctx = Ctx(doc, errors, rid)
    ctx.check_keys(data, (), RULE_KEYS, ["id", "title", "category", "severity", "detect"])
    if rid is not None and not ID_RX.match(rid):
        ctx.error(BadIdError, ("id",), f"rule id {rid!r} is not kebab-case",
                  "lowercase letters, digits and single dashes, e.g. my-rule")
    elif "id" in data and rid is None:
        ctx.expect(data["id"], str, ("id",), "id")
    title = data.get("title", "")
    ctx.expect(title, str, ("title",), "title")
    category = data.get("category", "")
    if ctx.expect(category, str, ("category",), "category") and category and not \
            CATEGORY_RX.match(category):
        ctx.error(BadValueError, ("category",), f"category {category!r} is not snake_case",
                  "built-ins: " + ", ".join(BUILTIN_CATEGORIES))
    severity = _enum(data.get("severity", "warning"), SEVERITY_LEVELS, ctx, ("severity",),
                     "severity")
    status = _enum(data.get("status", "stable"), STATUSES, ctx, ("status",), "status")
    enabled = data.get("enabled", True)
    ctx.expect(enabled, bool, ("enabled",), "enabled")
    description = data.get("description", "")
    ctx.expect(description, str, ("description",), "description")
    handoff = data.get("handoff", "")
    ctx.expect(handoff, str, ("handoff",), "handoff")
    author = data.get("author", "")
    ctx.expect(author, str, ("author",), "author")
    tags = _str_list(data.get("tags", []), ctx, ("tags",), "tags") or ()
    refs = _str_list(data.get("references", []), ctx, ("references",), "references") or ()
    fps = _str_list(data.get("falsepositives", []), ctx, ("falsepositives",),
                    "falsepositives") or ()

    # detector
    detect = data.get("detect")
    kind: str | None = None
    spec: Any = None
    pc = PredicateCompiler(registry, ctx)
    if detect is not None:
        if isinstance(detect, str):
            detect = {detect: None}
        if ctx.expect(detect, dict, ("detect",), "detect"):
            if len(detect) != 1:
                ctx.error(BadDetectorParamsError, ("detect",),
                          f"detect must hold exactly one detector, got {len(detect)}",
                          "one of: " + ", ".join(DETECTORS))
            else:
                kind = next(iter(detect))
                if kind not in DETECTORS:
                    close = difflib.get_close_matches(str(kind), list(DETECTORS), n=1)
                    ctx.error(BadValueError, ("detect", kind), f"unknown detector {kind!r}",
                              f"did you mean {close[0]!r}?" if close else
                              "one of: " + ", ".join(DETECTORS), at_key=True)
                    kind = None
                else:
                    spec = DETECTORS[kind].parse(detect[kind], ctx, ("detect", kind), pc)
    # events / needs / predicate
    events: frozenset[str] | None = None
    reads_events = kind in EVENT_DETECTORS
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
    pred_spec = {k: v for k, v in data.items() if k in PREDICATE_KEYS}
    predicate: Callable[[dict[str, Any]], bool] | None = None  # None: every event matches
    tv = pred_spec.get("type")
    tlist = tv if isinstance(tv, list) else [tv]
    tset = {t for t in tlist if isinstance(t, str)}
    if tv is not None and events and len(tset) == len(tlist) and events <= tset:
        del pred_spec["type"]  # dispatch by event type already guarantees it
    if pred_spec:
        if kind is not None and not reads_events:
            ctx.error(BadDetectorParamsError, (next(iter(pred_spec)),),
                      f"event predicates do not apply to the {kind} detector",
                      "put row tests under detect.sample.row" if kind == "sample" else None,
                      at_key=True)
        else:
            compiled = pc.compile(pred_spec, (), "rule")
            if compiled is not None:
                predicate = compiled
    # confidence
    base, base_reason = "medium", ""
    conf = data.get("confidence", "medium")
    if isinstance(conf, str):
        base = _enum(conf, CONFIDENCE_LEVELS, ctx, ("confidence",), "confidence") or "medium"
    elif ctx.expect(conf, dict, ("confidence",), "confidence"):
        if ctx.check_keys(conf, ("confidence",), ["base", "reason"], ["base"],
                          section="confidence"):
            base = _enum(conf["base"], CONFIDENCE_LEVELS, ctx, ("confidence", "base"),
                         "confidence.base") or "medium"
            base_reason = conf.get("reason", "")
            ctx.expect(base_reason, str, ("confidence", "reason"), "confidence.reason")
    if not base_reason:
        base_reason = f"The {kind or 'rule'} pattern matched; {base} is this rule's base level."
    facts = set(FACTS_OF[kind]) if kind else set()
    conds: list[ConfidenceCondition] = []
    cw = data.get("confidence_when", [])
    if ctx.expect(cw, list, ("confidence_when",), "confidence_when"):
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
            tests: dict[str, Callable[[Any], bool]] = {}
            for fname, fval in when.items():
                if kind and fname not in facts:
                    close = difflib.get_close_matches(str(fname), sorted(facts), n=1)
                    ctx.error(UnknownFactError, p + ("when", fname),
                              f"the {kind} detector has no fact {fname!r}",
                              f"did you mean {close[0]!r}?" if close else
                              "facts: " + ", ".join(sorted(facts)), at_key=True)
                    continue
                t = _fact_test(fval, ctx, p + ("when", fname))
                if t is not None:
                    tests[fname] = t
            conds.append(ConfidenceCondition(tests, ops[0], level, reason))
    require: dict[str, Callable[[Any], bool]] = {}
    rq = data.get("require", {})
    if ctx.expect(rq, dict, ("require",), "require"):
        for fname, fval in rq.items():
            if kind and fname not in facts:
                close = difflib.get_close_matches(str(fname), sorted(facts), n=1)
                ctx.error(UnknownFactError, ("require", fname),
                          f"the {kind} detector has no fact {fname!r}",
                          f"did you mean {close[0]!r}?" if close else
                          "facts: " + ", ".join(sorted(facts)), at_key=True)
                continue
            t = _fact_test(fval, ctx, ("require", fname))
            if t is not None:
                require[str(fname)] = t
    # exceptions, message, tests
    excs: list[ExceptionSpec] = []
    ex = data.get("exceptions", [])
    if ctx.expect(ex, list, ("exceptions",), "exceptions"):
        for i, item in enumerate(ex):
            e = parse_exception(item, ctx, ("exceptions", i))
            if e is not None:
                excs.append(e)
    message = None
    if "message" in data:
        message = compile_template(data["message"], ctx, ("message",),
                                   facts if kind else set())
    cases = _parse_tests(data["tests"], ctx, ("tests",), doc.file) if "tests" in data else ()
    # tier check: a rule that reads agent text cannot claim the metadata tier
    if "needs" in data and needs in TIERS:
        text = sorted(pc.fields & CONTENT_FIELDS)
        full = sorted(pc.fields & FULL_FIELDS)
        if full and tier_rank(needs) < tier_rank("full"):  # type: ignore[arg-type]
            ctx.error(NeedsMismatchError, ("needs",),
                      f"rule reads {', '.join(full)} (full tier) but declares needs: {needs}",
                      "set needs: full")
        elif text and needs == "metadata":
            ctx.error(NeedsMismatchError, ("needs",),
                      f"rule reads agent text ({', '.join(text)}) but declares needs: metadata",
                      "set needs: content")
    if ctx.failed or kind is None or spec is None or rid is None or severity is None:
        return None
    return Rule(
        id=rid, title=title, category=category, severity=severity, detect_kind=kind,
        detector=spec, predicate=predicate, events=events if reads_events else frozenset(),
        gate=pc.registry.gates.get(predicate) if predicate is not None else None,
        typed=_typed(predicate, events if reads_events else frozenset(), pc.registry),
        needs=needs, description=description, tags=tags, references=refs,
        status=status or "stable", enabled=bool(enabled), falsepositives=fps,
        confidence_base=base, confidence_reason=base_reason, confidence_when=tuple(conds),
        require=require,
        exceptions=tuple(excs), message=message, handoff=handoff, tests=cases, author=author,
        source=doc.file, line=doc.start_line, data=data, fields=frozenset(pc.fields),
        drive=DRIVES[kind],
    )
