"""Detector parameters as data: what each detector kind accepts, declared beside it.

A kind declares its parameters as a :class:`Table`; the rule schema
(:mod:`watcher.engine.lang.params`) reads the table twice: to validate and compile a
rule's ``detect`` block into located errors and values, and to publish the JSON
Schema editors use (``inspect-watch rules schema``). Nothing here validates, so the
run-time detectors depend on no load-time code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# parameter types (what lang/params.py knows how to check, compile and describe)
INT = "int"  # an integer within [lo, hi]
NUMBER = "number"  # a number within [lo, hi], above ``gt`` when set
BOOL = "bool"
STR = "str"
PATH = "path"  # a JMESPath expression, compiled into a getter
PRED = "pred"  # a predicate mapping, compiled
PREDS = "preds"  # a list of predicates, between lo and hi of them
WINDOW = "window"  # {events: N, seconds: S} (a bare integer means events)
NAMES = "names"  # a list of names out of ``choices``
NUMBER_MAP = "number_map"  # a mapping of names (out of ``choices`` if given) to numbers
TABLE = "table"  # a nested mapping of its own parameters


@dataclass(frozen=True)
class Param:
    """One parameter of a detector (or of a nested table)."""

    name: str
    type: str
    doc: str = ""
    required: bool = False
    default: Any = None  # used when absent (and checked like a given value)
    lo: float | None = None  # inclusive bounds of numbers, or of a list's length
    hi: float | None = None
    gt: float | None = None  # exclusive lower bound of numbers
    choices: tuple[str, ...] = ()
    # a bad value ends the block's validation at once (later parameters are not
    # checked); otherwise the others are checked too and the block fails at the end
    stop: bool = False
    reads: bool = True  # a path's fields count toward the rule's ``needs`` tier
    what: str = ""  # the name errors use (default: ``name``)
    message: str = ""  # the error for a value out of bounds or choices
    hint: str | None = None
    item_what: str = ""  # predicates of a list: "step {n}"
    requires: tuple[str, str, str] | None = None  # (key, message, hint) when true
    table: Table | None = None  # TABLE: its parameters
    true_is_empty: bool = False  # TABLE: ``true`` means the table with its defaults

    @property
    def label(self) -> str:
        return self.what or self.name


@dataclass(frozen=True)
class Table:
    """A mapping of parameters: a detector's block, or a nested table."""

    section: str  # how errors name it: "detect.repeat", "cycles"
    what: str  # how type errors name it: "repeat"
    params: tuple[Param, ...]
    doc: str = ""
    # at least one of these keys (checked before the parameters)
    one_of: tuple[str, ...] = ()
    null_is_empty: bool = False  # ``detect: match`` (no parameters) is ``{}``

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.params]

    @property
    def required(self) -> list[str]:
        return [p.name for p in self.params if p.required]


@dataclass(frozen=True)
class Problem:
    """A check across parameters that failed: reported at ``path`` (W108)."""

    path: tuple[Any, ...]
    message: str
    hint: str | None = None


@dataclass(frozen=True)
class Kind:
    """A detector kind, declared in its module and listed in the registry.

    ``drive`` says what feeds it (``rule.EVENT``, ``CLOCK`` or ``ROW``); ``facts``
    what its findings know (``confidence_when``, ``require`` and templates may name
    them); ``build`` turns validated parameter values into the spec, or a
    :class:`Problem`; ``predicate_hint`` is said to a rule that puts event
    predicates on a kind that reads no events.
    """

    name: str
    drive: str
    facts: frozenset[str]
    params: Table
    build: Callable[[dict[str, Any]], Any]
    doc: str = ""
    predicate_hint: str | None = None
