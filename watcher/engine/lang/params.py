"""Detector parameter tables, read twice: validated into values, and described as schema.

Each detector kind declares its parameters (:mod:`watcher.engine.detectors.params`);
:func:`check_table` validates a ``detect`` block against them with located errors and
compiles the values (paths into getters, predicates into closures, windows), and
:func:`table_schema` describes the same table as JSON Schema. One declaration drives
both, so the published schema cannot drift from what the loader accepts.

Validation order is the table's: a parameter marked ``stop`` ends the block at its
first bad value; the others are all checked and the block fails at the end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from watcher.engine.detectors.base import Window
from watcher.engine.detectors.params import (
    BOOL,
    INT,
    NAMES,
    NUMBER,
    NUMBER_MAP,
    PATH,
    PRED,
    PREDS,
    STR,
    TABLE,
    WINDOW,
    Param,
    Table,
)
from watcher.engine.errors import BadDetectorParamsError
from watcher.engine.lang.ctx import Ctx
from watcher.engine.lang.paths import compile_path
from watcher.engine.yamlsrc import Path_

if TYPE_CHECKING:
    from watcher.engine.lang.predicates import PredicateCompiler

WINDOW_EVENTS_MAX = 10_000


class _Fail:
    """A parameter that failed: ``stop`` ends the block whatever the parameter says."""

    def __init__(self, stop: bool) -> None:
        self.stop = stop


_FAIL = _Fail(False)
_STOP = _Fail(True)


def check_table(value: Any, table: Table, ctx: Ctx, path: Path_, pc: PredicateCompiler,
                reads: set[str]) -> dict[str, Any] | None:
    """The validated values of ``value`` (every parameter of ``table``, absent ones at
    their defaults), or ``None`` after reporting why not. Fields that ``reads`` paths
    read are added to ``reads``."""
    if value is None and table.null_is_empty:
        value = {}
    if not ctx.expect(value, dict, path, table.what):
        return None
    if not ctx.check_keys(value, path, table.names, table.required, section=table.section):
        return None
    if table.one_of and not any(k in value for k in table.one_of):
        ctx.error(BadDetectorParamsError, path,
                  f"{table.section} needs " + " or ".join(repr(k) for k in table.one_of))
        return None
    out: dict[str, Any] = {}
    failed = False
    for p in table.params:
        if p.name not in value:
            if p.type == PATH and p.default is not None:
                got = _check(p, p.default, ctx, path + (p.name,), pc, reads, value)
            else:
                got = p.default
        else:
            got = _check(p, value[p.name], ctx, path + (p.name,), pc, reads, value)
        if isinstance(got, _Fail):
            if got.stop or p.stop:
                return None
            failed = True
            got = None
        out[p.name] = got
    return None if failed else out


def _check(p: Param, value: Any, ctx: Ctx, path: Path_, pc: PredicateCompiler,
           reads: set[str], mapping: dict[str, Any]) -> Any:
    what = p.label
    t = p.type
    if t == INT or t == NUMBER:
        if not ctx.expect(value, int if t == INT else (int, float), path, what):
            return _FAIL
        if not _within(p, value):
            ctx.error(BadDetectorParamsError, path, p.message or _bounds(p), p.hint)
            return _FAIL
        return value
    if t == BOOL or t == STR:
        if not ctx.expect(value, bool if t == BOOL else str, path, what):
            return _FAIL
        if p.requires is not None and value and p.requires[0] not in mapping:
            ctx.error(BadDetectorParamsError, path, p.requires[1], p.requires[2])
            return _FAIL
        return value
    if t == PATH:
        cp = compile_path(value, ctx, path, what)
        if cp is None:
            return _FAIL
        if p.reads:
            reads |= cp.fields
        return cp
    if t == PRED:
        pred = pc.compile(value, path, what)
        return _FAIL if pred is None else pred
    if t == PREDS:
        if not ctx.expect(value, list, path, what):
            return _STOP
        if not _within(p, len(value)):
            ctx.error(BadDetectorParamsError, path, p.message or _bounds(p), p.hint)
            return _STOP
        preds = [pc.compile(s, path + (i,), p.item_what.format(n=i + 1) or what)
                 for i, s in enumerate(value)]
        return _FAIL if any(x is None for x in preds) else preds
    if t == WINDOW:
        window = parse_window(value, ctx, path, what)
        return _FAIL if window is None else window
    if t == NAMES:
        if not ctx.expect(value, list, path, what):
            return _FAIL
        for i, name in enumerate(value):
            if name not in p.choices:
                ctx.error(BadDetectorParamsError, path + (i,), p.message.format(value=name),
                          p.hint)
                return _FAIL
        return value
    if t == NUMBER_MAP:
        if not ctx.expect(value, dict, path, what):
            return _FAIL
        if p.choices and not ctx.check_keys(value, path, p.choices, section=what):
            return _FAIL
        for k, v in value.items():
            if not ctx.expect(v, (int, float), path + (k,), f"{what}.{k}"):
                return _FAIL
            if p.gt is not None and v <= p.gt:
                ctx.error(BadDetectorParamsError, path + (k,), p.message or _bounds(p))
                return _FAIL
        return value
    if t == TABLE:
        assert p.table is not None
        if value is True and p.true_is_empty:
            value = {}
        got = check_table(value, p.table, ctx, path, pc, reads)
        return _FAIL if got is None else got
    raise ValueError(f"unknown parameter type {t!r}")  # a declaration error: ours


def _within(p: Param, v: float) -> bool:
    return (p.lo is None or v >= p.lo) and (p.hi is None or v <= p.hi) and (
        p.gt is None or v > p.gt)


def _bounds(p: Param) -> str:
    if p.gt is not None:
        return f"{p.label} must be > {p.gt:g}"
    return f"{p.label} must be between {p.lo} and {p.hi}"


def parse_window(value: Any, ctx: Ctx, path: Path_, what: str = "window") -> Window | None:
    """``{events: N}``, ``{seconds: S}`` or both; a bare integer means events."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = {"events": value}
    if not ctx.expect(value, dict, path, what):
        return None
    if not ctx.check_keys(value, path, ["events", "seconds"], section=what):
        return None
    if not value:
        ctx.error(BadDetectorParamsError, path, f"{what} needs 'events' or 'seconds'")
        return None
    ev = value.get("events")
    sec = value.get("seconds")
    if ev is not None and (not ctx.expect(ev, int, path + ("events",), f"{what}.events")):
        return None
    if sec is not None and not ctx.expect(sec, (int, float), path + ("seconds",),
                                          f"{what}.seconds"):
        return None
    if ev is not None and not 1 <= ev <= WINDOW_EVENTS_MAX:
        ctx.error(BadDetectorParamsError, path + ("events",),
                  f"{what}.events must be 1..{WINDOW_EVENTS_MAX}")
        return None
    if sec is not None and sec <= 0:
        ctx.error(BadDetectorParamsError, path + ("seconds",), f"{what}.seconds must be > 0")
        return None
    return Window(ev, float(sec) if sec is not None else None)


# --------------------------------------------------------------------------- JSON Schema

WINDOW_SCHEMA: dict[str, Any] = {
    "description": "A window of events, seconds or both; a bare integer means events.",
    "oneOf": [
        {"type": "integer", "minimum": 1, "maximum": WINDOW_EVENTS_MAX},
        {"type": "object", "additionalProperties": False, "minProperties": 1,
         "properties": {
             "events": {"type": "integer", "minimum": 1, "maximum": WINDOW_EVENTS_MAX},
             "seconds": {"type": "number", "exclusiveMinimum": 0}}},
    ],
}


def table_schema(table: Table, pred_ref: str, window_ref: str) -> dict[str, Any]:
    """``table`` as a JSON Schema object (predicates and windows by reference)."""
    out: dict[str, Any] = {
        "type": ["object", "null"] if table.null_is_empty else "object",
        "additionalProperties": False,
        "properties": {p.name: _param_schema(p, pred_ref, window_ref) for p in table.params},
    }
    if table.doc:
        out["description"] = table.doc
    if table.required:
        out["required"] = table.required
    if table.one_of:
        out["anyOf"] = [{"required": [k]} for k in table.one_of]
    return out


def _param_schema(p: Param, pred_ref: str, window_ref: str) -> dict[str, Any]:
    t = p.type
    s: dict[str, Any]
    if t == INT or t == NUMBER:
        s = {"type": "integer" if t == INT else "number"}
        if p.lo is not None:
            s["minimum"] = p.lo
        if p.hi is not None:
            s["maximum"] = p.hi
        if p.gt is not None:
            s["exclusiveMinimum"] = p.gt
    elif t == BOOL:
        s = {"type": "boolean"}
    elif t == STR:
        s = {"type": "string"}
    elif t == PATH:
        s = {"type": "string", "format": "jmespath"}
    elif t == PRED:
        s = {"$ref": pred_ref}
    elif t == PREDS:
        s = {"type": "array", "items": {"$ref": pred_ref}}
        if p.lo is not None:
            s["minItems"] = int(p.lo)
        if p.hi is not None:
            s["maxItems"] = int(p.hi)
    elif t == WINDOW:
        s = {"$ref": window_ref}
    elif t == NAMES:
        s = {"type": "array", "items": {"enum": list(p.choices)}}
    elif t == NUMBER_MAP:
        num: dict[str, Any] = {"type": "number"}
        if p.gt is not None:
            num["exclusiveMinimum"] = p.gt
        s = {"type": "object", "additionalProperties": num}
        if p.choices:
            s["propertyNames"] = {"enum": list(p.choices)}
    elif t == TABLE:
        assert p.table is not None
        s = table_schema(p.table, pred_ref, window_ref)
        if p.true_is_empty:
            s = {"oneOf": [{"const": True}, s]}
    else:
        raise ValueError(f"unknown parameter type {t!r}")
    if p.doc:
        s["description"] = p.doc
    if p.default is not None and t != TABLE:
        s["default"] = list(p.default) if isinstance(p.default, tuple) else p.default
    return s
