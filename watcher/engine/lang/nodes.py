"""Predicates as a small tree, its passes, and the one step that lowers it to closures.

The compiler (:mod:`watcher.engine.lang.predicates`) turns a predicate mapping into
nodes: :class:`TypeIs`, :class:`Where`, :class:`Text`, :class:`All`, :class:`AnyOf`,
:class:`Not` and the constants :data:`TRUE` / :data:`FALSE`. Passes work on nodes:
:func:`specialise` answers type tests for one event type, :func:`gate` finds the
shared-scan condition a predicate needs. :func:`lower` makes the closures the engine
calls per event (flattened, specialised shapes, shared scans, literal prefilters);
:func:`evaluate` is the plain reading of the same tree, the reference the property
tests hold the lowered closures to (tests/engine/test_nodes.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from watcher.engine.gate import Gate, TextSource
from watcher.engine.rule import CompiledPath, Pred, never
from watcher.engine.text import event_texts

Search = Callable[[str], Any]  # a regex search: a match (anything but None) or None


class Node:
    """A predicate over one event (or one samples-listing row)."""


@dataclass(frozen=True, eq=False)
class Const(Node):
    value: bool


TRUE = Const(True)
FALSE = Const(False)


@dataclass(frozen=True, eq=False)
class TypeIs(Node):
    """``type:``: the event's type is one of ``types``."""

    types: frozenset[str]


@dataclass(frozen=True, eq=False)
class Where(Node):
    """``where:``: a JMESPath expression is truthy."""

    path: CompiledPath


@dataclass(frozen=True, eq=False)
class Text(Node):
    """A text test: the prepared text of ``source`` holds for every one of its tests.

    ``regexes`` must all be searched as one (any of them matching); ``search`` is that
    alternation, prefiltered; ``scanned`` pairs each regex with its index in the shared
    scan of this text (empty when the text is not scanned). ``needles`` are
    ``(op, texts)`` of ``contains`` (all), ``any_of``, ``all_of`` and ``equals``, in
    the form the prepared text takes.
    """

    source: TextSource
    regexes: tuple[Any, ...]
    search: Search | None
    scanned: tuple[tuple[int, Search], ...]
    needles: tuple[tuple[str, tuple[str, ...]], ...]


@dataclass(frozen=True, eq=False)
class All(Node):
    parts: tuple[Node, ...]


@dataclass(frozen=True, eq=False)
class AnyOf(Node):
    parts: tuple[Node, ...]


@dataclass(frozen=True, eq=False)
class Not(Node):
    part: Node


def conjunction(parts: list[Node]) -> Node:
    """``All`` of ``parts``, where one part is that part itself."""
    return parts[0] if len(parts) == 1 else All(tuple(parts))


def disjunction(parts: list[Node]) -> Node:
    return parts[0] if len(parts) == 1 else AnyOf(tuple(parts))


# --------------------------------------------------------------------------- the reference


def evaluate(node: Node, e: dict[str, Any]) -> bool:
    """Whether ``node`` holds for ``e``, read straight off the tree (the reference)."""
    if isinstance(node, Const):
        return node.value
    if isinstance(node, TypeIs):
        return e.get("type") in node.types
    if isinstance(node, Where):
        assert node.path.test is not None
        return bool(node.path.test(e))
    if isinstance(node, Text):
        t = node.source.text(e, event_texts(e))
        if not t:
            return False
        if node.regexes and not any(rx.search(t) is not None for rx in node.regexes):
            return False
        for op, texts in node.needles:
            if op == "equals":
                ok = t in texts
            elif op == "any_of":
                ok = any(n in t for n in texts)
            else:  # contains, all_of
                ok = all(n in t for n in texts)
            if not ok:
                return False
        return True
    if isinstance(node, All):
        return all(evaluate(p, e) for p in node.parts)
    if isinstance(node, AnyOf):
        return any(evaluate(p, e) for p in node.parts)
    if isinstance(node, Not):
        return not evaluate(node.part, e)
    raise TypeError(f"not a predicate node: {node!r}")


# --------------------------------------------------------------------------- passes


def specialise(node: Node, etype: str) -> Node:
    """``node`` for events of type ``etype`` only: its type tests answered, combinators
    simplified (``TRUE``: every such event matches; the node itself if nothing changed).

    The engine dispatches each event to the rules that read its type, so a type test
    inside a rule (``is_submit_call`` is ``type: tool`` and a ``where``) is decided
    before the event arrives; answering it at table-building time saves a call for it
    and, mostly, one for the conjunction around it, on every event.
    """
    if isinstance(node, TypeIs):
        return TRUE if etype in node.types else FALSE
    if isinstance(node, Not):
        inner = specialise(node.part, etype)
        if isinstance(inner, Const):
            return FALSE if inner.value else TRUE
        return node if inner is node.part else Not(inner)
    if isinstance(node, (All, AnyOf)):
        parts = [specialise(p, etype) for p in node.parts]
        decided = TRUE if isinstance(node, AnyOf) else FALSE  # a part deciding it all
        if any(p is decided for p in parts):
            return decided
        rest = [p for p in parts if not isinstance(p, Const)]
        if not rest:
            return FALSE if decided is TRUE else TRUE
        if len(rest) == len(node.parts) and all(
                a is b for a, b in zip(rest, node.parts, strict=True)):
            return node
        return conjunction(rest) if isinstance(node, All) else disjunction(rest)
    return node


def gate(node: Node, cache: dict[Node, Gate | None]) -> Gate | None:
    """A :class:`Gate` of ``node``: a condition it cannot hold without, that the shared
    scan answers (``None`` where there is none).

    A text test whose regexes are scanned is gated by its patterns; a conjunction by
    its first gated part, together with every other part gated by the same scan (all
    their pattern sets must be hit); a disjunction only when every part is gated by the
    same scan (by the union of their first sets). ``cache`` holds the answers by node.
    """
    if node in cache:
        return cache[node]
    got: Gate | None = None
    if isinstance(node, Text):
        if node.scanned:
            got = Gate(node.source, (frozenset(i for i, _ in node.scanned),))
    elif isinstance(node, All):
        gates = [gate(p, cache) for p in node.parts]
        first = next((g for g in gates if g is not None), None)
        if first is not None:
            needs = [n for g in gates if g is not None and g.key == first.key
                     for n in g.needs]
            got = Gate(first.source, tuple(dict.fromkeys(needs)))
    elif isinstance(node, AnyOf):
        gates = [gate(p, cache) for p in node.parts]
        head = gates[0]
        if head is not None and all(g is not None and g.key == head.key for g in gates):
            got = Gate(head.source, (frozenset().union(
                *(g.needs[0] for g in gates if g is not None)),))
    cache[node] = got
    return got


# --------------------------------------------------------------------------- lowering


def lower(node: Node, cache: dict[Node, Pred]) -> Pred:
    """The closure the engine calls for ``node`` (made once per node: ``cache``)."""
    got = cache.get(node)
    if got is None:
        got = cache[node] = _lower(node, cache)
    return got


def lowered_or_none(node: Node, cache: dict[Node, Pred]) -> Pred | None:
    """:func:`lower`, with ``None`` for ``TRUE`` (no test at all) and :func:`never`
    for ``FALSE`` (what the dispatch table holds for decided predicates)."""
    if isinstance(node, Const):
        return None if node.value else never
    return lower(node, cache)


def _always(e: dict[str, Any]) -> bool:
    return True


def _lower(node: Node, cache: dict[Node, Pred]) -> Pred:
    if isinstance(node, Const):
        return _always if node.value else never
    if isinstance(node, TypeIs):
        wanted = node.types
        if len(wanted) == 1:
            only = next(iter(wanted))
            return lambda e: e.get("type") == only
        return lambda e: e.get("type") in wanted
    if isinstance(node, Where):
        assert node.path.test is not None
        return node.path.test
    if isinstance(node, Text):
        return _lower_text(node)
    if isinstance(node, All):
        return _conjoin([lower(p, cache) for p in node.parts])
    if isinstance(node, AnyOf):
        return _disjoin([lower(p, cache) for p in node.parts])
    if isinstance(node, Not):
        inner = lower(node.part, cache)
        return lambda e: not inner(e)
    raise TypeError(f"not a predicate node: {node!r}")


def _lower_text(node: Text) -> Pred:
    """One call per event: the prepared text (cached for every rule reading it), the
    shared scan's answer where there is one, then the tests it leaves."""
    tests: list[Callable[[str], bool]] = []
    if node.search is not None:
        search = node.search
        tests.append(lambda t: search(t) is not None)
    for op, ns in node.needles:
        if op == "any_of" and len(ns) > 3:  # one C-level scan
            rx = re.compile("|".join(re.escape(n) for n in ns))
            tests.append(lambda t, s=rx.search: s(t) is not None)  # type: ignore[misc]
        elif op == "equals":
            nset = frozenset(ns)
            tests.append(lambda t, n=nset: t in n)  # type: ignore[misc]
        elif op == "all_of" or (op == "contains" and len(ns) > 1):
            tests.append(lambda t, n=ns: all(x in t for x in n))  # type: ignore[misc]
        else:
            tests.append(lambda t, n=ns: any(x in t for x in n))  # type: ignore[misc]
    source = node.source
    first = tests[0] if len(tests) == 1 else None
    scanned = node.scanned
    if scanned:
        # the regex test (tests[0]) asks the shared scan first, then the regexes only for
        # the patterns the scan reported; texts it cannot answer for use the search alone
        plain = tests[0]
        rest = tuple(tests[1:])

        def regex_test(t: str, cache: dict[Any, Any]) -> bool:
            hits = source.hits(t, cache)
            if hits is None:
                return plain(t)
            if not hits:
                return False
            return any(i in hits and s(t) is not None for i, s in scanned)

    def text_pred(e: dict[str, Any]) -> bool:
        cache = event_texts(e)
        t = source.text(e, cache)
        if not t:
            return False
        if scanned:
            return regex_test(t, cache) and all(test(t) for test in rest)
        if first is not None:
            return first(t)
        return all(test(t) for test in tests)

    return text_pred


def _conjoin(checks: list[Pred]) -> Pred:
    if not checks:
        return _always
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:
        a, b = checks
        return lambda e: a(e) and b(e)
    if len(checks) == 3:
        a, b, c = checks
        return lambda e: a(e) and b(e) and c(e)
    fns = tuple(checks)
    return lambda e: all(f(e) for f in fns)


def _disjoin(checks: list[Pred]) -> Pred:
    if not checks:
        return never
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:
        a, b = checks
        return lambda e: bool(a(e) or b(e))
    if len(checks) == 3:
        a, b, c = checks
        return lambda e: bool(a(e) or b(e) or c(e))
    fns = tuple(checks)
    return lambda e: any(f(e) for f in fns)
