"""Predicates at load time: predicate mappings compiled into the closures rules run.

``type``, ``where``, text tests (``field`` with ``regex``/``contains``/``any_of``/
``all_of``/``equals``), ``macro`` references and the ``all``/``any``/``not``
combinators compile into plain callables over an event. Text tests read their text
through a shared :class:`~watcher.engine.gate.TextSource`; a predicate whose patterns
the shared RE2 scan can rule out gets a :class:`~watcher.engine.gate.Gate`, and
:func:`specialise` answers its type tests for each event type it is dispatched on.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from watcher.engine.errors import MissingFieldError, UnknownReferenceError, WrongTypeError
from watcher.engine.gate import Gate, TextSource
from watcher.engine.lang.ctx import Ctx, type_name
from watcher.engine.lang.paths import compile_path
from watcher.engine.lang.regex import combine, compile_regex
from watcher.engine.rule import Pred, never
from watcher.engine.scan import RULE_SCAN_MIN_PATTERNS, Scanner
from watcher.engine.scan import available as scan_available
from watcher.engine.text import EXTRA_FOLDS, collapse_ws, event_texts, lower
from watcher.engine.yamlsrc import Doc, Path_

PREDICATE_KEYS = (
    "type", "where", "field", "regex", "contains", "any_of", "all_of", "equals",
    "ignore_case", "normalize_whitespace", "macro", "all", "any", "not",
)
TEXT_TESTS = ("regex", "contains", "any_of", "all_of", "equals")


@dataclass
class Registry:
    """Named value lists and named predicates (macros) shared by a rule set."""

    lists: dict[str, tuple[list[str], Doc, Path_]]
    macros: dict[str, tuple[dict[str, Any], Doc, Path_]]

    def __post_init__(self) -> None:
        self._compiled: dict[str, Pred | None] = {}
        self._fields: dict[str, set[str]] = {}
        self._busy: set[str] = set()
        # one RE2 scan per kind of prepared text, shared by every rule that tests it
        self.scanners: dict[tuple[str, bool, bool], Scanner] = {}
        # predicates that can only hold where the shared scan reports one of their
        # patterns (see Gate), by predicate
        self.gates: dict[Any, Gate] = {}
        # how type tests and combinators were built, by predicate (see specialise)
        self.shapes: dict[Any, tuple[str, Any]] = {}


class PredicateCompiler:
    """Compiles predicate mappings; tracks which event fields they read."""

    def __init__(self, registry: Registry, ctx: Ctx) -> None:
        self.registry = registry
        self.ctx = ctx
        self.fields: set[str] = set()
        self.types: set[str] = set()

    def compile(self, spec: Any, path: Path_, section: str = "predicate") -> Pred | None:
        ctx = self.ctx
        if not ctx.expect(spec, dict, path, section):
            return None
        if not ctx.check_keys(spec, path, PREDICATE_KEYS, section=section):
            return None
        checks: list[Pred] = []
        ok = True

        def add(p: Pred | None) -> None:
            nonlocal ok
            if p is None:
                ok = False
            else:
                checks.append(p)

        if "type" in spec:
            add(self._type(spec["type"], path + ("type",)))
        if "macro" in spec:
            names = spec["macro"] if isinstance(spec["macro"], list) else [spec["macro"]]
            for i, name in enumerate(names):
                p = path + ("macro",) + ((i,) if isinstance(spec["macro"], list) else ())
                add(self.macro(name, p))
        if "where" in spec:
            where = spec["where"]
            if isinstance(where, dict):
                if ctx.check_keys(where, path + ("where",), ["macro"], ["macro"],
                                  section="where"):
                    add(self.macro(where["macro"], path + ("where", "macro")))
                else:
                    ok = False
            else:
                cp = compile_path(where, ctx, path + ("where",), "where")
                if cp is None:
                    ok = False
                else:
                    self.fields |= cp.fields
                    add(cp.test)
        if any(t in spec for t in TEXT_TESTS):
            add(self._text(spec, path))
        elif "field" in spec:
            ctx.error(MissingFieldError, path + ("field",),
                      "'field' given without a text test",
                      "add one of: " + ", ".join(TEXT_TESTS))
            ok = False
        for key in ("ignore_case", "normalize_whitespace"):
            if key in spec:
                ctx.expect(spec[key], bool, path + (key,), key)
        for comb in ("all", "any"):
            if comb in spec:
                if not ctx.expect(spec[comb], list, path + (comb,), comb):
                    ok = False
                    continue
                subs = [self.compile(s, path + (comb, i), comb) for i, s in enumerate(spec[comb])]
                if any(s is None for s in subs):
                    ok = False
                    continue
                both = _conjoin(subs) if comb == "all" else _disjoin(subs)  # type: ignore[arg-type]
                self._shape(both, comb, subs)
                self._gate(both, subs, comb == "all")  # type: ignore[arg-type]
                add(both)
        if "not" in spec:
            inner = self.compile(spec["not"], path + ("not",), "not")
            if inner is None:
                ok = False
            else:
                negated = _negate(inner)
                self._shape(negated, "not", inner)
                add(negated)
        if not ok:
            return None
        pred = _conjoin(checks)
        self._shape(pred, "all", checks)
        self._gate(pred, checks, True)
        return pred

    def _shape(self, pred: Pred, kind: str, parts: Any) -> None:
        """Record how ``pred`` was built (see :func:`specialise`); a combinator of one
        part is that part itself."""
        if kind == "not" or len(parts) > 1:
            self.registry.shapes.setdefault(pred, (kind, parts))

    def _gate(self, pred: Pred, parts: list[Pred], conjunction: bool) -> None:
        """Give ``pred`` a :class:`Gate` derived from its parts' gates, where one holds.

        A conjunction is gated by its first gated part, together with every other part
        gated by the same scan (all their pattern sets must be hit); a disjunction only
        when every part is gated by the same scan (by the union of their first sets).
        """
        gates = self.registry.gates
        if pred in gates:
            return
        got = [gates.get(p) for p in parts]
        gate: Gate | None = None
        if conjunction:
            first = next((g for g in got if g is not None), None)
            if first is not None:
                needs = [n for g in got if g is not None and g.key == first.key
                         for n in g.needs]
                gate = Gate(first.source, tuple(dict.fromkeys(needs)))
        elif got and all(g is not None and g.key == got[0].key for g in got):  # type: ignore[union-attr]
            head = got[0]
            assert head is not None
            gate = Gate(head.source, (frozenset().union(*(g.needs[0] for g in got
                                                          if g is not None)),))
        if gate is not None:
            gates[pred] = gate

    def _type(self, value: Any, path: Path_) -> Pred | None:
        types = value if isinstance(value, list) else [value]
        for i, t in enumerate(types):
            if not self.ctx.expect(t, str, path + ((i,) if isinstance(value, list) else ()),
                                   "type"):
                return None
        wanted = frozenset(types)
        self.types |= wanted
        pred: Pred
        if len(wanted) == 1:
            only = next(iter(wanted))
            pred = lambda e: e.get("type") == only  # noqa: E731
        else:
            pred = lambda e: e.get("type") in wanted  # noqa: E731
        self.registry.shapes[pred] = ("type", wanted)
        return pred

    def macro(self, name: Any, path: Path_) -> Pred | None:
        reg = self.registry
        if not self.ctx.expect(name, str, path, "macro name"):
            return None
        if name not in reg.macros:
            close = difflib.get_close_matches(name, sorted(reg.macros), n=1)
            self.ctx.error(UnknownReferenceError, path, f"unknown macro {name!r}",
                           f"did you mean {close[0]!r}?" if close else
                           "define it in a document with a top-level 'macros:' mapping")
            return None
        if name in reg._busy:
            self.ctx.error(UnknownReferenceError, path, f"macro {name!r} refers to itself",
                           "macros may not be recursive")
            return None
        if name in reg._compiled:
            self.fields |= reg._fields.get(name, set())
            return reg._compiled[name]
        spec, doc, mpath = reg.macros[name]
        reg._busy.add(name)
        try:
            sub = PredicateCompiler(reg, Ctx(doc, self.ctx.errors, self.ctx.rule_id))
            pred = sub.compile(spec, mpath, f"macro {name!r}")
        finally:
            reg._busy.discard(name)
        reg._compiled[name] = pred
        reg._fields[name] = sub.fields
        self.fields |= sub.fields
        if pred is None:
            self.ctx.failed = True
        return pred

    def strings(self, value: Any, path: Path_, what: str) -> list[str] | None:
        """A string, a list of strings, or ``{list: NAME}`` resolved from the registry."""
        ctx = self.ctx
        if isinstance(value, str):
            return [value]
        if isinstance(value, dict):
            if not ctx.check_keys(value, path, ["list"], ["list"], section=what):
                return None
            name = value["list"]
            if not ctx.expect(name, str, path + ("list",), "list name"):
                return None
            if name not in self.registry.lists:
                close = difflib.get_close_matches(name, sorted(self.registry.lists), n=1)
                ctx.error(UnknownReferenceError, path + ("list",), f"unknown list {name!r}",
                          f"did you mean {close[0]!r}?" if close else
                          "define it in a document with a top-level 'lists:' mapping")
                return None
            return list(self.registry.lists[name][0])
        if isinstance(value, list):
            out = []
            for i, v in enumerate(value):
                if not ctx.expect(v, str, path + (i,), f"{what} item"):
                    return None
                out.append(v)
            return out
        ctx.error(WrongTypeError, path, f"{what} must be a string, a list of strings or "
                                        f"{{list: NAME}}, got {type_name(value)}")
        return None

    def _text(self, spec: dict[str, Any], path: Path_) -> Pred | None:
        ctx = self.ctx
        if "field" not in spec:
            ctx.error(MissingFieldError, path, "text test without 'field'",
                      "say which text to test, e.g. field: completion")
            return None
        cp = compile_path(spec["field"], ctx, path + ("field",), "field")
        if cp is None:
            return None
        self.fields |= cp.fields
        icase = spec.get("ignore_case") is True
        nws = spec.get("normalize_whitespace") is True
        get = cp.get

        def prep(s: str) -> str:
            if nws:
                s = collapse_ws(s)
            # lower() plus the two extra ASCII case equivalents of `re` (ı ~ i, ſ ~ s):
            # lower-cased text then matches exactly as IGNORECASE would
            if not icase:
                return s
            s = lower(s)
            if "\u0131" in s or "\u017f" in s:  # rare: translate() is slow per character
                s = s.translate(EXTRA_FOLDS)
            return s

        ckey = (cp.source, icase, nws)
        source = TextSource(ckey, get, prep)
        tests: list[Callable[[str], bool]] = []
        scanned: list[tuple[int, Callable[[str], Any]]] = []  # (scanner index, search)
        ok = True
        if "regex" in spec:
            pats = self.strings(spec["regex"], path + ("regex",), "regex")
            if pats is None:
                ok = False
            else:
                compiled = []
                for i, p in enumerate(pats):
                    rp = path + ("regex",) + ((i,) if isinstance(spec["regex"], list) else ())
                    c = compile_regex(p, ctx, rp, re.IGNORECASE if icase else 0)
                    if c is None:
                        ok = False
                    else:
                        compiled.append(c)
                if ok:
                    # the text is lowercased already; IGNORECASE makes `re` several times
                    # slower, so keep it only where a pattern has upper-case letters
                    # (which may be escapes such as \S or \W whose meaning must not change)
                    flags = re.IGNORECASE if icase and any(
                        c.isupper() for c in "".join(c.pattern for c in compiled)) else 0
                    compiled = [re.compile(c.pattern, flags) if c.flags & re.IGNORECASE
                                and not flags else c for c in compiled]
                    search = combine(compiled, flags, lowered=icase)
                    tests.append(lambda t, s=search: s(t) is not None)  # type: ignore[misc]
                    if scan_available():
                        scanner = self.registry.scanners.setdefault(
                            ckey, Scanner(RULE_SCAN_MIN_PATTERNS))
                        scanned = [(scanner.add(c.pattern, c.flags), c.search)
                                   for c in compiled]
        for key in ("contains", "any_of", "all_of", "equals"):
            if key not in spec:
                continue
            needles = self.strings(spec[key], path + (key,), key)
            if needles is None:
                ok = False
                continue
            ns = tuple(prep(n) for n in needles)
            if key == "any_of" and len(ns) > 3:  # one C-level scan
                rx = re.compile("|".join(re.escape(n) for n in ns))
                tests.append(lambda t, s=rx.search: s(t) is not None)  # type: ignore[misc]
            elif key == "equals":
                nset = frozenset(ns)
                tests.append(lambda t, n=nset: t in n)  # type: ignore[misc]
            elif key == "all_of" or (key == "contains" and len(ns) > 1):
                tests.append(lambda t, n=ns: all(x in t for x in n))  # type: ignore[misc]
            else:
                tests.append(lambda t, n=ns: any(x in t for x in n))  # type: ignore[misc]
        if not ok:
            return None

        first = tests[0] if len(tests) == 1 else None
        if scanned:
            # the regex test (tests[0]) asks the shared scan first, then `re` only for
            # the patterns the scan reported; texts it cannot answer for use `re` alone
            source.scanner = self.registry.scanners[ckey]
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

        if scanned:
            self.registry.gates[text_pred] = Gate(source, (frozenset(i for i, _ in scanned),))
        return text_pred


def _negate(f: Pred) -> Pred:
    """``not:`` of a compiled predicate."""
    return lambda e: not f(e)


def specialise(pred: Pred, etype: str, shapes: dict[Any, tuple[str, Any]]) -> Pred | None:
    """``pred`` for events of type ``etype`` only: its type tests answered, combinators
    simplified. ``None``: every such event matches.

    The engine dispatches each event to the rules that read its type, so a type test
    inside a rule (``is_submit_call`` is ``type: tool`` and a ``where``) is decided
    before the event arrives; answering it at table-building time saves a call for it
    and, mostly, one for the conjunction around it, on every event.
    """
    got = _specialise(pred, etype, shapes)
    if got is True:
        return None
    if got is False:
        return never
    return got


def _specialise(pred: Pred, etype: str, shapes: dict[Any, tuple[str, Any]]) -> Pred | bool:
    shape = shapes.get(pred)
    if shape is None:
        return pred
    kind, data = shape
    if kind == "type":
        return etype in data
    if kind == "not":
        inner = _specialise(data, etype, shapes)
        if inner is True or inner is False:
            return not inner
        return pred if inner is data else _negate(inner)
    parts = [_specialise(p, etype, shapes) for p in data]
    decided = kind == "any"  # a part with this answer decides the combinator
    if any(p is decided for p in parts):
        return decided
    rest: list[Pred] = [p for p in parts if p is not (not decided)]  # type: ignore[misc]
    if not rest:
        return not decided
    if len(rest) == len(data) and all(a is b for a, b in zip(rest, data, strict=True)):
        return pred
    return _conjoin(rest) if kind == "all" else _disjoin(rest)


def _conjoin(checks: list[Pred]) -> Pred:
    if not checks:
        return lambda e: True
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
        return lambda e: False
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
