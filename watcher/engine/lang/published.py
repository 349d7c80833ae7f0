"""The JSON Schema of rule-file documents, for editors (``inspect-watch rules schema``).

Generated from the same declarations the loader validates with: the rule's plain
fields (``schema.META``), the predicate keys, each detector kind's parameter table and
the value sets of levels, tiers and operators. A document is a rule or a library
(``lists:`` / ``macros:``). The schema catches what a schema can (names, types,
enums, bounds, required keys); what needs the whole rule set (macro and list names,
facts of the detector, templates, regex and JMESPath syntax) the loader reports.
"""

from __future__ import annotations

from typing import Any

from watcher.engine.calls import CLASSIFIERS
from watcher.engine.detectors import DETECTORS
from watcher.engine.lang.facts import FACT_OPS
from watcher.engine.lang.params import WINDOW_SCHEMA, table_schema
from watcher.engine.lang.predicates import TEXT_TESTS
from watcher.engine.lang.schema import (
    BUILTIN_CATEGORIES,
    CATEGORY_RX,
    EXCEPTION_OPS,
    EXPECT_KEYS,
    ID_RX,
    META,
    REQUIRED,
)
from watcher.engine.rule import EVENT
from watcher.engine.shell import EFFECTS
from watcher.events import TIERS
from watcher.findings import CONFIDENCE_LEVELS, SEVERITY_LEVELS

PRED = "#/$defs/predicate"
WINDOW = "#/$defs/window"
STRINGS: dict[str, Any] = {"oneOf": [
    {"type": "string"}, {"type": "array", "items": {"type": "string"}},
    {"type": "object", "additionalProperties": False, "required": ["list"],
     "properties": {"list": {"type": "string", "description": "A list of the rule set."}}}]}
STR_OR_LIST: dict[str, Any] = {"oneOf": [{"type": "string"},
                                         {"type": "array", "items": {"type": "string"}}]}


def _predicate_properties() -> dict[str, Any]:
    text = {k: {"$ref": "#/$defs/strings"} for k in TEXT_TESTS}
    return {
        "type": {**STR_OR_LIST, "description": "The event type, or one of several."},
        "where": {"oneOf": [
            {"type": "string", "format": "jmespath"},
            {"type": "object", "additionalProperties": False, "required": ["macro"],
             "properties": {"macro": {"type": "string"}}}],
            "description": "A JMESPath expression over the event, true when truthy."},
        "field": {"type": "string", "format": "jmespath",
                  "description": "The text a text test reads (JMESPath)."},
        **text,
        "ignore_case": {"type": "boolean"},
        "normalize_whitespace": {"type": "boolean"},
        "macro": {**STR_OR_LIST, "description": "Named predicates of the rule set."},
        "all": {"type": "array", "items": {"$ref": PRED}},
        "any": {"type": "array", "items": {"$ref": PRED}},
        "not": {"$ref": PRED},
    }


def _text_needs_field() -> dict[str, Any]:
    """A text test names its field; a field needs a text test."""
    return {
        "dependentRequired": {k: ["field"] for k in TEXT_TESTS},
        "dependentSchemas": {"field": {"anyOf": [{"required": [k]} for k in TEXT_TESTS]}},
    }


def _fact_tests() -> dict[str, Any]:
    ops: dict[str, Any] = {op: {} for op in FACT_OPS}
    for op in ("gt", "gte", "lt", "lte"):
        ops[op] = {"type": "number"}
    ops["in"] = {"type": "array"}
    return {"type": "object", "description": "Facts of the detector and their tests.",
            "additionalProperties": {"anyOf": [
                {"type": ["string", "number", "boolean", "null"]},
                {"type": "object", "additionalProperties": False, "properties": ops}]}}


def _detect() -> dict[str, Any]:
    bare = [k.name for k in DETECTORS.values() if k.params.null_is_empty]
    kinds: list[dict[str, Any]] = [{"enum": bare}] if bare else []
    for k in DETECTORS.values():
        kinds.append({"type": "object", "additionalProperties": False, "required": [k.name],
                      "properties": {k.name: table_schema(k.params, PRED, WINDOW)},
                      "description": k.doc})
    return {"oneOf": kinds, "description": "Exactly one detector and its parameters."}


def _reads_events() -> dict[str, Any]:
    """Rules of event-driven detectors must say which events and tier they read."""
    event_kinds = [k.name for k in DETECTORS.values() if k.drive == EVENT]
    return {"if": {"required": ["detect"], "properties": {"detect": {"anyOf": [
        {"enum": event_kinds}, {"type": "object", "anyOf": [
            {"required": [k]} for k in event_kinds]}]}}},
            "then": {"required": ["events", "needs"]}}


def _meta_properties() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, kind, default in META:
        if kind == "str":
            out[key] = {"type": "string"}
        elif kind == "bool":
            out[key] = {"type": "boolean", "default": default}
        elif kind == "strs":
            out[key] = STR_OR_LIST
        elif kind == "category":
            out[key] = {"type": "string", "pattern": f"^(?:{CATEGORY_RX.pattern[1:-1]})?$",
                        "examples": list(BUILTIN_CATEGORIES)}
        else:
            out[key] = {"enum": list(kind), "default": default}
    return out


def _effects_schema() -> dict[str, Any]:
    """``effects:`` of a library document (docs/rules.md, "Call effects")."""
    effect = {"enum": list(EFFECTS)}
    words = {"type": "array", "items": {"type": ["string", "boolean"]}}
    table = {"type": "object", "additionalProperties": effect}
    entry = {
        "type": "object", "additionalProperties": False, "required": ["tool"],
        "properties": {
            "tool": STR_OR_LIST, "effect": effect, "argument": STR_OR_LIST,
            "values": table, "otherwise": effect, "classify": {"enum": list(CLASSIFIERS)},
            "reason": {"type": "string"}},
        "oneOf": [{"required": [k]} for k in ("effect", "values", "classify")]}
    return {
        "type": "object", "additionalProperties": False,
        "description": "What tool calls may change: none, read, write or unknown.",
        "properties": {
            "tools": {"type": "array", "items": entry},
            "shell": {"type": "object", "additionalProperties": False, "properties": {
                "none": words, "read": words, "write": words,
                "flags": {"type": "object", "additionalProperties": table},
                "subcommands": {"type": "object", "additionalProperties": table},
                "wrappers": {"type": "object", "additionalProperties": {
                    "type": "integer", "minimum": 0, "maximum": 8}},
                "execs": {"type": "object", "additionalProperties": words},
                "valued": {"type": "object", "additionalProperties": words}}},
            "sql": {"type": "object", "additionalProperties": False, "properties": {
                "none": words, "read": words, "write": words}}}}


def _failures_schema() -> dict[str, Any]:
    """``failures:`` of a library document (docs/rules.md, "Failure signatures")."""
    props: dict[str, Any] = {"id": {"type": "string"}, "regex": {"type": "string"},
                             "note": {"type": "string"}}
    item: dict[str, Any] = {"type": "object", "additionalProperties": False,
                            "required": ["id", "regex"], "properties": props}
    wrapper = {**item, "properties": {**props, "end": {"type": "string"}}}
    sig = {**item, "properties": {**props, "at": {"enum": ["first", "start", "last"]},
                                  "with": {"type": "string"}}}
    return {
        "type": "object", "additionalProperties": False,
        "description": "When a tool's output says it failed.",
        "properties": {
            "wrappers": {"type": "array", "items": wrapper},
            "signatures": {"type": "array", "items": sig},
            "lines": {"type": "integer", "minimum": 1, "maximum": 50},
            "error_fields": {"type": "array", "items": {"type": "string"}},
            "failing_exit_codes": {"type": "array", "items": {"type": "integer"}},
            "failing_exit_from": {"type": "integer"}}}


def rule_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one document of a rule file."""
    level = {"enum": list(CONFIDENCE_LEVELS)}
    condition = {
        "type": "object", "additionalProperties": False, "required": ["when", "reason"],
        "properties": {"when": {"$ref": "#/$defs/facts"}, "raise": level, "lower": level,
                       "set": level, "reason": {"type": "string"}},
        "oneOf": [{"required": [op]} for op in ("raise", "lower", "set")]}
    exception = {
        "type": "object", "additionalProperties": False, "required": ["field", "op", "value"],
        "properties": {"field": {"type": "string", "description":
                                 "JMESPath over the event; sample.<x> reads the sample."},
                       "op": {"enum": list(EXCEPTION_OPS)}, "value": {},
                       "reason": {"type": "string"}}}
    expected: dict[str, Any] = {k: {} for k in EXPECT_KEYS}
    expected.update(count={"type": "integer"}, confidence=level,
                    severity={"enum": list(SEVERITY_LEVELS)})
    expectation = {"type": "object", "additionalProperties": False, "properties": expected}
    case = {
        "type": "object", "additionalProperties": False, "required": ["name", "expect"],
        "properties": {"name": {"type": "string"}, "description": {"type": "string"},
                       "events": {"type": "array", "items": {"type": "object"}},
                       "file": {"type": "string"},
                       "expect": {"type": "array", "items": expectation}},
        "oneOf": [{"required": ["events"]}, {"required": ["file"]}]}
    rule: dict[str, Any] = {
        "type": "object", "additionalProperties": False, "required": list(REQUIRED),
        "properties": {
            "id": {"type": "string", "pattern": ID_RX.pattern},
            **_meta_properties(),
            "events": {**STR_OR_LIST, "description": "Event types the rule reads; * for all."},
            "needs": {"enum": list(TIERS), "description": "The least text tier it reads."},
            "detect": {"$ref": "#/$defs/detect"},
            "confidence": {"oneOf": [level, {
                "type": "object", "additionalProperties": False, "required": ["base"],
                "properties": {"base": level, "reason": {"type": "string"}}}]},
            "confidence_when": {"type": "array", "items": condition},
            "require": {"$ref": "#/$defs/facts"},
            "exceptions": {"type": "array", "items": exception},
            "message": {"type": "string", "description": "Text with {fact} fields."},
            "tests": {"type": "array", "items": case},
            "act": {"type": "object", "description":
                    "The watchdog's action block (docs/watchdog.md); the rule engine "
                    "keeps it as written and does not interpret it."},
            "ignore": {"$ref": PRED, "description":
                       "Events the rule does not see at all: neither a match nor a miss, "
                       "and no place in its windows."},
            **_predicate_properties(),
        },
        **_text_needs_field(),
        "allOf": [_reads_events()],
    }
    library = {
        "type": "object", "additionalProperties": False, "minProperties": 1,
        "properties": {
            "lists": {"type": "object", "additionalProperties": {
                "type": "array", "items": {"type": "string"}}},
            "macros": {"type": "object", "additionalProperties": {"$ref": PRED}},
            "effects": _effects_schema(), "failures": _failures_schema()}}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "inspect-watch rule document",
        "description": "One YAML document of an inspect-watch rule file: a rule, or a "
                       "library of lists, macros, effects and failures (docs/rules.md).",
        "oneOf": [{"$ref": "#/$defs/rule"}, {"$ref": "#/$defs/library"}],
        "$defs": {
            "rule": rule, "library": library, "detect": _detect(), "facts": _fact_tests(),
            "predicate": {"type": "object", "additionalProperties": False,
                          "properties": _predicate_properties(), **_text_needs_field()},
            "strings": STRINGS, "window": WINDOW_SCHEMA,
        },
    }
