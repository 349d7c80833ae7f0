"""The detector kinds: one module each, declared there, registered here.

A kind module declares a :class:`~watcher.engine.detectors.params.Kind`: its name, what
drives it (events, the clock or sample rows), its facts, its parameters (a table the
rule schema validates, compiles and publishes) and how its spec is built. Adding a
kind is a new module, its name in the import and in ``KINDS`` below, and its path
in setup.py's ``COMPILED`` (docs/ENGINE.md).
"""

from __future__ import annotations

from watcher.engine.detectors import (
    absence,
    idle,
    match,
    repeat,
    sample,
    sequence,
    threshold,
    unseen,
)
from watcher.engine.detectors.base import RuleState, whole_value
from watcher.engine.detectors.params import Kind
from watcher.engine.rule import EVENT

KINDS: tuple[Kind, ...] = tuple(m.KIND for m in (
    match, repeat, threshold, sequence, absence, idle, sample, unseen))

DETECTORS: dict[str, Kind] = {k.name: k for k in KINDS}
EVENT_DETECTORS: frozenset[str] = frozenset(k.name for k in KINDS if k.drive == EVENT)
FACTS_OF: dict[str, frozenset[str]] = {k.name: k.facts for k in KINDS}

__all__ = ["DETECTORS", "EVENT_DETECTORS", "FACTS_OF", "KINDS", "Kind", "RuleState",
           "whole_value"]
