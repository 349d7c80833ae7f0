"""Predicates at load time: predicate mappings compiled into a node tree.

``type``, ``where``, text tests (``field`` with ``regex``/``contains``/``any_of``/
``all_of``/``equals``), ``macro`` references and the ``all``/``any``/``not``
combinators become :mod:`~watcher.engine.lang.nodes`; the rule schema then
specialises, gates and lowers the tree. Text tests read their text through a
:class:`~watcher.engine.gate.TextSource` and register their regexes with the shared
RE2 scan of that text (one per kind of prepared text, for the whole rule set).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from watcher.engine.errors import MissingFieldError, UnknownReferenceError, WrongTypeError
from watcher.engine.gate import Gate, TextSource
from watcher.engine.lang.ctx import Ctx, did_you_mean, type_name
from watcher.engine.lang.nodes import (
    FALSE,
    TRUE,
    Node,
    Not,
    Text,
    TypeIs,
    Where,
    conjunction,
    disjunction,
    lower,
)
from watcher.engine.lang.paths import compile_path
from watcher.engine.lang.regex import combine, compile_regex
from watcher.engine.rule import Pred
from watcher.engine.rx import Pattern
from watcher.engine.scan import RULE_SCAN_MIN_PATTERNS, Scanner
from watcher.engine.yamlsrc import MAX_DEPTH, Doc, Path_

PREDICATE_KEYS = (
    "type", "where", "field", "regex", "contains", "any_of", "all_of", "equals",
    "ignore_case", "normalize_whitespace", "macro", "all", "any", "not",
)
TEXT_TESTS = ("regex", "contains", "any_of", "all_of", "equals")


@dataclass
class Registry:
    """Named value lists and named predicates (macros) shared by a rule set, and what
    the rule set's predicates share: their scans, lowered closures and gates."""

    lists: dict[str, tuple[list[str], Doc, Path_]]
    macros: dict[str, tuple[dict[str, Any], Doc, Path_]]

    def __post_init__(self) -> None:
        self._compiled: dict[str, Node | None] = {}
        self._fields: dict[str, set[str]] = {}
        self._busy: set[str] = set()
        self._depth = 0  # predicate levels being compiled, through macros (MAX_DEPTH)
        # one RE2 scan per kind of prepared text, shared by every rule that tests it
        self.scanners: dict[tuple[str, bool, bool], Scanner] = {}
        # by node: its closure (a macro's is made once) and its gate (see nodes.gate)
        self.lowered: dict[Node, Pred] = {}
        self.gates: dict[Node, Gate | None] = {}
        # the effects and failure signatures of the rule set's library documents
        # (engine.calls.CallFacts), set by the loader once they are all read
        self.calls: Any = None

    @property
    def macro_nodes(self) -> dict[str, Node]:
        """The macros compiled so far (those some rule used), by name."""
        return {k: v for k, v in self._compiled.items() if v is not None}


class PredicateCompiler:
    """Compiles predicate mappings into nodes; tracks which event fields they read."""

    def __init__(self, registry: Registry, ctx: Ctx) -> None:
        self.registry = registry
        self.ctx = ctx
        self.fields: set[str] = set()
        self.types: set[str] = set()

    def compile(self, spec: Any, path: Path_, section: str = "predicate") -> Pred | None:
        """The closure of a predicate mapping (``None`` after reporting errors)."""
        node = self.node(spec, path, section)
        return None if node is None else lower(node, self.registry.lowered)

    def node(self, spec: Any, path: Path_, section: str = "predicate") -> Node | None:
        """The node tree of a predicate mapping: its keys, all of them holding.

        At most :data:`MAX_DEPTH` levels deep, counted through macros: compiling, the
        passes and the lowered closures recurse once per level."""
        reg = self.registry
        if reg._depth >= MAX_DEPTH:
            self.ctx.error(UnknownReferenceError, path,
                           f"predicates nested more than {MAX_DEPTH} deep (through macros)",
                           "let a macro name fewer macros in turn, or flatten all:/any:/not:")
            return None
        reg._depth += 1
        try:
            return self._node(spec, path, section)
        finally:
            reg._depth -= 1

    def _node(self, spec: Any, path: Path_, section: str) -> Node | None:
        ctx = self.ctx
        if not ctx.expect(spec, dict, path, section):
            return None
        if not ctx.check_keys(spec, path, PREDICATE_KEYS, section=section):
            return None
        parts: list[Node] = []
        ok = True

        def add(n: Node | None) -> None:
            nonlocal ok
            if n is None:
                ok = False
            else:
                parts.append(n)

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
                    add(Where(cp))
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
                subs = [self.node(s, path + (comb, i), comb) for i, s in enumerate(spec[comb])]
                got: list[Node] = [s for s in subs if s is not None]
                if len(got) < len(subs):
                    ok = False
                elif not got:  # all: [] holds, any: [] does not
                    add(TRUE if comb == "all" else FALSE)
                else:
                    add(conjunction(got) if comb == "all" else disjunction(got))
        if "not" in spec:
            inner = self.node(spec["not"], path + ("not",), "not")
            add(None if inner is None else Not(inner))
        if not ok:
            return None
        return conjunction(parts) if parts else TRUE

    def _type(self, value: Any, path: Path_) -> Node | None:
        types = value if isinstance(value, list) else [value]
        for i, t in enumerate(types):
            if not self.ctx.expect(t, str, path + ((i,) if isinstance(value, list) else ()),
                                   "type"):
                return None
        wanted = frozenset(types)
        self.types |= wanted
        return TypeIs(wanted)

    def macro(self, name: Any, path: Path_) -> Node | None:
        reg = self.registry
        if not self.ctx.expect(name, str, path, "macro name"):
            return None
        if name not in reg.macros:
            self.ctx.error(UnknownReferenceError, path, f"unknown macro {name!r}",
                           did_you_mean(name, reg.macros, "define it in a document with a "
                                        "top-level 'macros:' mapping"))
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
            node = sub.node(spec, mpath, f"macro {name!r}")
        finally:
            reg._busy.discard(name)
        reg._compiled[name] = node
        reg._fields[name] = sub.fields
        self.fields |= sub.fields
        if node is None:
            self.ctx.failed = True
        return node

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
                ctx.error(UnknownReferenceError, path + ("list",), f"unknown list {name!r}",
                          did_you_mean(name, self.registry.lists, "define it in a document "
                                       "with a top-level 'lists:' mapping"))
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

    def _text(self, spec: dict[str, Any], path: Path_) -> Node | None:
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
        ckey = (cp.source, icase, nws)
        source = TextSource(ckey, cp.get)
        ok = True
        regexes: list[Any] = []
        search = None
        scanned: list[tuple[int, Any]] = []  # (scanner index, search)
        if "regex" in spec:
            pats = self.strings(spec["regex"], path + ("regex",), "regex")
            if pats is None:
                ok = False
            else:
                for i, p in enumerate(pats):
                    rp = path + ("regex",) + ((i,) if isinstance(spec["regex"], list) else ())
                    c = compile_regex(p, ctx, rp, re.IGNORECASE if icase else 0)
                    if c is None:
                        ok = False
                    else:
                        regexes.append(c)
                if ok:
                    # the text is lowercased already: keep IGNORECASE only where a pattern
                    # has upper-case letters (which may be escapes such as \S or \W whose
                    # meaning must not change), so most searches need no case folding
                    flags = re.IGNORECASE if icase and any(
                        c.isupper() for c in "".join(c.pattern for c in regexes)) else 0
                    regexes = [Pattern(c.pattern, flags) if c.flags & re.IGNORECASE
                               and not flags else c for c in regexes]
                    search = combine(regexes, flags, lowered=icase)
                    scanner = self.registry.scanners.setdefault(
                        ckey, Scanner(RULE_SCAN_MIN_PATTERNS))
                    scanned = [(scanner.add(c.pattern, c.flags), c.search) for c in regexes]
                    source.scanner = scanner
        needles: list[tuple[str, tuple[str, ...]]] = []
        for key in ("contains", "any_of", "all_of", "equals"):
            if key not in spec:
                continue
            got = self.strings(spec[key], path + (key,), key)
            if got is None:
                ok = False
                continue
            needles.append((key, tuple(source.prep(n) for n in got)))
        if not ok:
            return None
        return Text(source, tuple(regexes), search, tuple(scanned), tuple(needles))
