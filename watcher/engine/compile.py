"""Compile rule data into fast callables: getters, predicates, regexes, templates.

Everything here runs once at load time, so the event hot path only calls plain
closures: a JMESPath expression made of fields, multiselects, ``==``/``!=`` and
boolean operators is turned into dict lookups; anything else falls back to the
compiled JMESPath search. Regexes are checked for backtracking-prone shapes and
run over bounded text only, because agent text is untrusted and unbounded.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

import jmespath
import jmespath.exceptions

from watcher.engine.errors import (
    BadJmespathError,
    BadRegexError,
    BadTemplateError,
    CatastrophicRegexError,
    MissingFieldError,
    RuleError,
    UnknownKeyError,
    UnknownReferenceError,
    WrongTypeError,
)
from watcher.engine.scan import RULE_SCAN_MIN_PATTERNS, Scanner
from watcher.engine.scan import available as scan_available
from watcher.engine.scanmatch import text_hits
from watcher.engine.yamlsrc import Doc, Path_

try:  # Python 3.11+: the private parser module moved
    from re import _constants as _sre_c  # type: ignore[attr-defined]
    from re import _parser as _sre_p  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover
    import sre_constants as _sre_c  # type: ignore[no-redef]
    import sre_parse as _sre_p  # type: ignore[no-redef]

Getter = Callable[[Any], Any]
Pred = Callable[[dict[str, Any]], bool]

HEAD_BYTES: Final = 4096
TAIL_BYTES: Final = 4096


# --------------------------------------------------------------------------- context


class Ctx:
    """Collects located errors while one document is validated."""

    def __init__(self, doc: Doc, errors: list[RuleError], rule_id: str | None = None) -> None:
        self.doc = doc
        self.errors = errors
        self.rule_id = rule_id
        self.failed = False

    def error(self, cls: type[RuleError], path: Path_, msg: str, hint: str | None = None,
              at_key: bool = False) -> None:
        line, col = self.doc.loc(path, at_key=at_key)
        self.failed = True
        self.errors.append(cls(msg, file=self.doc.file, line=line, col=col,
                               rule_id=self.rule_id, source_line=self.doc.source_line(line),
                               hint=hint))

    def expect(self, value: Any, types: type | tuple[type, ...], path: Path_, what: str) -> bool:
        """Type check (bool is not an int here)."""
        ok = isinstance(value, types) and not (
            isinstance(value, bool) and bool not in _as_tuple(types)
        )
        if not ok:
            self.error(WrongTypeError, path,
                       f"{what} must be {_type_names(types)}, got {_type_name(value)}")
        return ok

    def check_keys(self, mapping: dict[str, Any], path: Path_, allowed: Iterable[str],
                   required: Iterable[str] = (), section: str = "rule") -> bool:
        allowed = list(allowed)
        ok = True
        for key in mapping:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
                hint = f"did you mean {close[0]!r}?" if close else (
                    "allowed keys: " + ", ".join(sorted(allowed)))
                self.error(UnknownKeyError, path + (key,), f"unknown key {key!r} in {section}",
                           hint, at_key=True)
                ok = False
        for key in required:
            if key not in mapping:
                self.error(MissingFieldError, path, f"{section} is missing required field {key!r}")
                ok = False
        return ok


def _as_tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "a boolean",
               list: "a list", dict: "a mapping", type(None): "null"}


def _type_names(types: type | tuple[type, ...]) -> str:
    return " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in _as_tuple(types))


def _type_name(value: Any) -> str:
    return _TYPE_NAMES.get(type(value), type(value).__name__)


# --------------------------------------------------------------------------- JMESPath


def truthy(value: Any) -> bool:
    """JMESPath truthiness: ``0`` is true, empty strings/lists/objects are false.

    The plain types are told by class first: comparing with ``[]`` and ``{}`` makes
    an empty list and dict per call, and every bare-field ``where`` asks this.
    """
    cls = type(value)
    if cls is str or cls is list or cls is dict:
        return len(value) > 0
    if cls is bool:
        return value is True
    if cls is int or cls is float:
        return True
    return not (value is None or value == "" or value == [] or value == {})


def _jp_equals(x: Any, y: Any) -> bool:
    if isinstance(x, bool) != isinstance(y, bool) and (
        isinstance(x, (int, float)) and isinstance(y, (int, float))
    ):
        return False
    return bool(x == y)


_ORDER: dict[str, Callable[[Any, Any], bool]] = {
    "lt": lambda a, b: a < b, "lte": lambda a, b: a <= b,
    "gt": lambda a, b: a > b, "gte": lambda a, b: a >= b,
}


def _is_num(x: Any) -> bool:
    cls = type(x)
    if cls is int or cls is float:
        return True
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _fast_pair(kids: list[dict[str, Any]]) -> tuple[Getter, Getter] | None:
    """Fast getters for both operands of a binary node, or ``None`` if either has none."""
    a, b = _fast(kids[0]), _fast(kids[1])
    return None if a is None or b is None else (a, b)


def _fast(ast: dict[str, Any]) -> Getter | None:
    """A plain-Python equivalent of a simple JMESPath AST, or ``None``."""
    kind = ast["type"]
    kids = ast.get("children") or []
    if kind == "field":
        name = ast["value"]
        return lambda d: d.get(name) if isinstance(d, dict) else None
    if kind == "current":
        return lambda d: d
    if kind == "literal":
        value = ast["value"]
        return lambda d: value
    if kind == "subexpression":  # a.b.c parses as one node with three children
        parts = [_fast(k) for k in kids]
        if any(p is None for p in parts):
            return None
        chain = tuple(parts)

        def sub(d: Any) -> Any:
            v = d
            for step in chain:
                v = step(v)  # type: ignore[misc]
                if v is None:
                    return None
            return v

        return sub
    if kind == "multi_select_list":
        parts = [_fast(k) for k in kids]
        if any(p is None for p in parts):
            return None
        if all(k["type"] == "field" for k in kids):  # e.g. [function, arguments] (hot path)
            names = tuple(k["value"] for k in kids)

            def fields_of(d: Any) -> Any:
                if isinstance(d, dict):
                    return list(map(d.get, names))
                return None if d is None else [None] * len(names)

            return fields_of
        fns = tuple(parts)
        return lambda d: None if d is None else [f(d) for f in fns]  # type: ignore[misc]
    if kind == "comparator" and ast["value"] in ("eq", "ne"):
        pair = _fast_pair(kids)
        if pair is None:
            return None
        left, right = pair
        if ast["value"] == "eq":
            return lambda d: _jp_equals(left(d), right(d))
        return lambda d: not _jp_equals(left(d), right(d))
    if kind == "comparator" and ast["value"] in _ORDER:
        pair = _fast_pair(kids)
        if pair is None:
            return None
        lo, hi = pair
        op = _ORDER[ast["value"]]

        def order(d: Any) -> Any:
            a, b = lo(d), hi(d)
            if _is_num(a) and _is_num(b) or (isinstance(a, str) and isinstance(b, str)):
                return op(a, b)
            return None

        return order
    if kind in ("and_expression", "or_expression"):
        pair = _fast_pair(kids)
        if pair is None:
            return None
        first, then = pair
        if kind == "and_expression":
            def and_(d: Any) -> Any:
                v = first(d)
                return then(d) if truthy(v) else v
            return and_

        def or_(d: Any) -> Any:
            v = first(d)
            return v if truthy(v) else then(d)
        return or_
    if kind == "not_expression":
        inner = _fast(kids[0])
        if inner is None:
            return None
        return lambda d: not truthy(inner(d))
    return None


def _plain_fields(ast: dict[str, Any]) -> tuple[str, ...] | None:
    """``(name,)`` for ``name``, the names for ``[a, b, ...]`` of plain fields; else None."""
    if ast["type"] == "field":
        return (ast["value"],)
    if ast["type"] == "multi_select_list" and all(
            c["type"] == "field" for c in ast["children"]):
        return tuple(c["value"] for c in ast["children"])
    return None


def _fields(ast: dict[str, Any]) -> set[str]:
    """Top-level field names an expression reads (for tier checks)."""
    out: set[str] = set()
    if ast["type"] == "field":
        out.add(ast["value"])
    elif ast["type"] == "subexpression":
        out |= _fields(ast["children"][0])
        return out
    for child in ast.get("children") or []:
        if isinstance(child, dict):
            out |= _fields(child)
    return out


@dataclass
class CompiledPath:
    """A JMESPath expression: source text, fast getter, fields it reads."""

    source: str
    get: Getter
    fields: frozenset[str]
    fast: bool
    test: Pred | None = None  # JMESPath truthiness of ``get``, generated as one function
    # the plain field names of ``name`` or ``[a, b, ...]``: keys made of fields can be
    # prepared field by field, and rules keyed on the same field share the work
    parts: tuple[str, ...] | None = None


_PATH_CACHE: dict[str, CompiledPath] = {}


def compile_path(expr: Any, ctx: Ctx, path: Path_, what: str = "expression") -> CompiledPath | None:
    """Compile (and cache) a JMESPath expression, reporting W105 on failure."""
    if not ctx.expect(expr, str, path, what):
        return None
    cached = _PATH_CACHE.get(expr)
    if cached is not None:
        return cached
    try:
        compiled = jmespath.compile(expr)
    except jmespath.exceptions.JMESPathError as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        ctx.error(BadJmespathError, path, f"invalid JMESPath in {what}: {msg}",
                  "quote string literals with '...' and JSON literals with `...`")
        return None
    fast = _fast(compiled.parsed)
    if fast is not None:
        getter = fast
    else:
        search = compiled.search

        def getter(d: Any) -> Any:
            try:
                return search(d)
            except (jmespath.exceptions.JMESPathError, TypeError, ValueError):
                return None
    test = _gen_test(compiled.parsed)
    if test is None:
        test = lambda d, g=getter: truthy(g(d))  # type: ignore[misc]  # noqa: E731
    out = CompiledPath(expr, getter, frozenset(_fields(compiled.parsed)), fast is not None,
                       test, _plain_fields(compiled.parsed))
    _PATH_CACHE[expr] = out
    return out


_SIMPLE_LITERALS = (str, int, float, bool, type(None))


class _Gen:
    """Generates one Python function for a JMESPath predicate (``where:``).

    A ``where`` of fields, literals, ``==``/``!=``, ``&&``, ``||`` and ``!`` becomes a
    single expression, e.g. ``d.get('stop_reason') != 'tool_calls' and not
    _T(d.get('has_error'))``: the nested closures it replaces cost a call per node per
    event, and predicates run for every rule on every event. Semantics are JMESPath's:
    only truthiness matters in a predicate, and equality keeps ``_jp_equals`` unless one
    side is a string literal (where it is plain ``==``).
    """

    def __init__(self) -> None:
        self.ns: dict[str, Any] = {"_T": truthy, "_EQ": _jp_equals}
        self.n = 0

    def name(self, value: Any) -> str:
        self.n += 1
        key = f"_k{self.n}"
        self.ns[key] = value
        return key

    def val(self, ast: dict[str, Any], d: str) -> str | None:
        kind = ast["type"]
        kids = ast.get("children") or []
        if kind == "field":
            return f"({d}.get({ast['value']!r}) if {d}.__class__ is dict else None)"
        if kind == "current":
            return d
        if kind == "literal":
            v = ast["value"]
            return repr(v) if isinstance(v, _SIMPLE_LITERALS) else self.name(v)
        if kind == "subexpression":  # a.b.c parses as one node with three children
            out = self.val(kids[0], d)
            for kid in kids[1:]:
                if out is None:
                    return None
                self.n += 1
                tmp = f"_v{self.n}"
                step = self.val(kid, tmp)
                if step is None:
                    return None
                out = f"(None if ({tmp} := {out}) is None else {step})"
            return out
        fast = _fast(ast)
        if fast is None:
            return None
        return f"{self.name(fast)}({d})"

    def test(self, ast: dict[str, Any], d: str = "d") -> str | None:
        kind = ast["type"]
        kids = ast.get("children") or []
        if kind == "comparator" and ast["value"] in ("eq", "ne"):
            left, right = self.val(kids[0], d), self.val(kids[1], d)
            if left is None or right is None:
                return None
            plain = any(k["type"] == "literal" and isinstance(k["value"], str) for k in kids)
            if ast["value"] == "eq":
                return f"({left} == {right})" if plain else f"_EQ({left}, {right})"
            return f"({left} != {right})" if plain else f"(not _EQ({left}, {right}))"
        if kind in ("and_expression", "or_expression"):
            left, right = self.test(kids[0], d), self.test(kids[1], d)
            if left is None or right is None:
                return None
            return f"({left} {'and' if kind == 'and_expression' else 'or'} {right})"
        if kind == "not_expression":
            inner = self.test(kids[0], d)
            return None if inner is None else f"(not {inner})"
        v = self.val(ast, d)
        return None if v is None else f"_T({v})"


# the field tests a ``where`` of ``&&``-joined simple atoms is made of (see FieldTests)
# (Final: compiled, each is a constant, not a module-dictionary lookup per test)
_TRUTHY: Final = 0
_FALSY: Final = 1
_EQ_STR: Final = 2
_NE_STR: Final = 3
_LT: Final = 4
_LTE: Final = 5
_GT: Final = 6
_GTE: Final = 7
_ORDER_OPS = {"lt": _LT, "lte": _LTE, "gt": _GT, "gte": _GTE}
_FLIPPED = {"lt": "gt", "lte": "gte", "gt": "lt", "gte": "lte"}


class FieldTests:
    """A ``where`` that is a conjunction of tests of top-level fields, run in one call.

    ``has_error``, ``function == 'submit'``, ``stop_reason != 'tool_calls' && !has_error``
    and ``tokens >= `150000``` are most of the ``where`` clauses rules write, and
    predicates run for every rule on every event. A generated lambda (see ``_Gen``) is
    interpreted: a frame per call, and a call out for each field read. Compiled, these
    run as one native call that reads the fields straight from the event.
    Semantics are JMESPath's, as ``_Gen``'s: truthiness for a bare field, plain ``==``
    against a string literal, and an order comparison holds only between numbers
    (``bool`` is not one).
    """

    def __init__(self, atoms: list[tuple[int, str, Any]]) -> None:
        self.ops = [a[0] for a in atoms]
        self.names = [a[1] for a in atoms]
        self.values = [a[2] for a in atoms]

    def __call__(self, d: Any) -> bool:
        if not isinstance(d, dict):
            d = {}  # every field reads as null
        ev: dict[str, Any] = d
        names = self.names
        values = self.values
        ops = self.ops
        for i in range(len(ops)):
            v = ev.get(names[i])
            op = ops[i]
            if op == _TRUTHY:
                if not truthy(v):
                    return False
            elif op == _FALSY:
                if truthy(v):
                    return False
            elif op == _EQ_STR:
                if not v == values[i]:
                    return False
            elif op == _NE_STR:
                if v == values[i]:
                    return False
            else:
                if not _is_num(v):
                    return False
                lit = values[i]
                if op == _LT:
                    ok = v < lit
                elif op == _LTE:
                    ok = v <= lit
                elif op == _GT:
                    ok = v > lit
                else:
                    ok = v >= lit
                if not ok:
                    return False
        return True


def _atoms(ast: dict[str, Any], out: list[tuple[int, str, Any]]) -> bool:
    """Append the field tests of ``ast`` to ``out``; ``False``: not that shape."""
    kind = ast["type"]
    kids = ast.get("children") or []
    if kind == "and_expression":
        return _atoms(kids[0], out) and _atoms(kids[1], out)
    if kind == "field":
        out.append((_TRUTHY, ast["value"], None))
        return True
    if kind == "not_expression" and kids[0]["type"] == "field":
        out.append((_FALSY, kids[0]["value"], None))
        return True
    if kind != "comparator" or len(kids) != 2:
        return False
    op = ast["value"]
    a, b = kids
    if a["type"] == "literal" and b["type"] == "field":  # `1` < x is x > `1`
        a, b = b, a
        op = _FLIPPED.get(op, op)
    if a["type"] != "field" or b["type"] != "literal":
        return False
    lit = b["value"]
    if op in ("eq", "ne") and isinstance(lit, str):
        out.append((_EQ_STR if op == "eq" else _NE_STR, a["value"], lit))
        return True
    if op in _ORDER_OPS and _is_num(lit):
        out.append((_ORDER_OPS[op], a["value"], lit))
        return True
    return False


def _field_tests(ast: dict[str, Any]) -> FieldTests | None:
    atoms: list[tuple[int, str, Any]] = []
    try:
        if not _atoms(ast, atoms):
            return None
    except (KeyError, TypeError, IndexError):
        return None
    return FieldTests(atoms)


# whether this module runs compiled (mypyc): FieldTests pays off only as native code;
# interpreted, one generated expression is cheaper than its loop
COMPILED_HERE: Final = not __file__.endswith(".py")


def _gen_test(ast: dict[str, Any]) -> Pred | None:
    if COMPILED_HERE:
        tests = _field_tests(ast)
        if tests is not None:
            return tests
    gen = _Gen()
    try:
        src = gen.test(ast)
    except (KeyError, TypeError):
        return None
    if src is None:
        return None
    return eval(f"lambda d: bool({src})", gen.ns)  # noqa: S307 - generated from the AST


# --------------------------------------------------------------------------- regex safety

_REPEATS = {_sre_c.MAX_REPEAT, _sre_c.MIN_REPEAT}
if hasattr(_sre_c, "POSSESSIVE_REPEAT"):
    _REPEATS.add(_sre_c.POSSESSIVE_REPEAT)
_ASCII = [chr(i) for i in range(32, 127)] + ["\t", "\n", "é", "λ"]


def _charset(items: list[tuple[Any, Any]]) -> set[str]:
    negate = False
    out: set[str] = set()
    for op, av in items:
        if op == _sre_c.NEGATE:
            negate = True
        elif op == _sre_c.LITERAL:
            out.add(chr(av))
        elif op == _sre_c.RANGE:
            out |= {c for c in _ASCII if av[0] <= ord(c) <= av[1]}
        elif op == _sre_c.CATEGORY:
            out |= _category(av)
    return set(_ASCII) - out if negate else out


def _category(cat: Any) -> set[str]:
    name = str(cat).upper()
    tests: dict[str, Callable[[str], bool]] = {
        "DIGIT": str.isdigit, "SPACE": str.isspace, "WORD": lambda c: c.isalnum() or c == "_",
    }
    for key, test in tests.items():
        if key in name:
            neg = "NOT" in name
            return {c for c in _ASCII if test(c) != neg}
    return set(_ASCII)


def _first_chars(items: list[tuple[Any, Any]]) -> set[str]:
    """Characters that can start a match of a parsed (sub)pattern (over-approximated)."""
    for op, av in items:
        if op == _sre_c.AT:
            continue
        if op == _sre_c.LITERAL:
            return {chr(av)}
        if op == _sre_c.NOT_LITERAL or op == _sre_c.ANY:
            return set(_ASCII) - ({chr(av)} if op == _sre_c.NOT_LITERAL else set())
        if op == _sre_c.IN:
            return _charset(av)
        if op == _sre_c.CATEGORY:
            return _category(av)
        if op == _sre_c.SUBPATTERN:
            return _first_chars(list(av[-1]))
        if op == _sre_c.BRANCH:
            out: set[str] = set()
            for b in av[1]:
                out |= _first_chars(list(b))
            return out
        if op in _REPEATS:
            lo, _hi, sub = av
            if lo == 0:
                return set(_ASCII)
            return _first_chars(list(sub))
        return set(_ASCII)
    return set()


def _danger(items: Any, in_repeat: bool) -> str | None:
    for op, av in items:
        if op in _REPEATS:
            lo, hi, sub = av
            variable = hi != lo
            if in_repeat and variable:
                return "a quantifier nested inside another quantifier (like (a+)+ or (.*)*)"
            found = _danger(sub, in_repeat or hi > 1)
            if found:
                return found
        elif op == _sre_c.SUBPATTERN:
            found = _danger(av[-1], in_repeat)
            if found:
                return found
        elif op == _sre_c.BRANCH:
            branches = [list(b) for b in av[1]]
            if in_repeat and any(not b for b in branches):
                return ("an optional alternative inside a quantifier (like (a|aa)+, which "
                        "Python reads as (a(|a))+)")
            if in_repeat:
                firsts = [_first_chars(b) for b in branches]
                for i in range(len(firsts)):
                    for j in range(i + 1, len(firsts)):
                        if firsts[i] & firsts[j]:
                            return ("alternatives that can match the same text inside a "
                                    "quantifier (like (a|ab)+)")
            for b in branches:
                found = _danger(b, in_repeat)
                if found:
                    return found
        elif op in (_sre_c.ASSERT, _sre_c.ASSERT_NOT):
            found = _danger(av[1], in_repeat)
            if found:
                return found
    return None


def compile_regex(pattern: Any, ctx: Ctx, path: Path_, flags: int = 0) -> re.Pattern[str] | None:
    """Compile a rule regex, rejecting syntax errors (W106) and risky shapes (W107)."""
    if not ctx.expect(pattern, str, path, "regex"):
        return None
    try:
        compiled = re.compile(pattern, flags)
    except re.error as exc:
        ctx.error(BadRegexError, path, f"invalid regex: {exc}",
                  "Python 're' syntax; escape literal ( [ . * + ? with a backslash")
        return None
    try:
        parsed = _sre_p.parse(pattern, flags)
    except Exception:  # pragma: no cover - compile succeeded, parse should too
        return compiled
    danger = _danger(parsed, False)
    if danger:
        ctx.error(CatastrophicRegexError, path,
                  f"regex may backtrack catastrophically: {danger}",
                  "make the inner part unambiguous, e.g. (ab)+ instead of (a+b?)+, "
                  "or drop the outer quantifier")
        return None
    return compiled


def bound_text(text: str) -> str:
    """The part of agent text a regex may scan: first and last 4 KB."""
    if len(text) <= HEAD_BYTES + TAIL_BYTES:
        return text
    return text[:HEAD_BYTES] + "\n...\n" + text[-TAIL_BYTES:]  # ASCII: see engine.scan


_str_lower: Final = str.lower  # called as an object, so compiled code runs CPython's own


def lower(text: str) -> str:
    """``text.lower()`` exactly as CPython does it.

    Compiled by mypyc, ``text.lower()`` maps characters one by one and lower-cases a
    final capital sigma to σ where CPython gives ς; compiled and pure engines must read
    the same text.
    """
    return text.lower() if text.isascii() else _str_lower(text)


CUT_MARK: Final = "..."  # how the engine reads the control channel's truncation mark "…"


def unmark(text: str) -> str:
    """``text`` with the control channel's truncation mark (the "…" ending a cut text)
    read as "...".

    The one non-ASCII character would make an ASCII text a two-byte string, which
    every ``lower()``, ``split()`` and scan of it then handles at several times the
    cost; rules see the mark as "..." (so ``foo$`` still does not match a cut text).
    """
    if text[-1:] == "…":  # compiled, cheaper than endswith (a cached one-char string)
        return text[:-1] + CUT_MARK
    return text


_EXTRA_FOLDS: Final = {0x131: "i", 0x17F: "s"}


def cache_key(kind: str, *parts: object) -> str:
    """A per-event cache key: a string, whose hash Python keeps, where a tuple of the
    same parts is hashed anew (element by element) on every lookup. ``repr`` keeps
    distinct parts distinct."""
    return kind + repr(parts)


def _load_fold() -> Callable[[str], str] | None:
    """The C fold (``watcher/engine/_fold.c``), when it was built; else ``None``."""
    try:
        from watcher.engine._fold import collapse_ws as fold
    except ImportError:
        return None
    return fold  # type: ignore[no-any-return]


# ``INSPECT_WATCH_PURE=1`` builds neither it nor the compiled engine
_FOLD: Final = _load_fold()


def collapse_ws(text: str) -> str:
    """``" ".join(text.split())``: runs of whitespace as one space, none at the ends
    (what ``normalize_whitespace`` text tests, templates and repeat keys read).

    The C fold does it in one pass over the text's bytes: code and command output
    are full of newlines and indentation, and splitting them into a string per word
    only to join them again cost a tenth of the engine's time on tool calls.

    Without it: most tool arguments (one-line commands, JSON) are collapsed already;
    telling so by a few substring tests costs a third of splitting them into words
    and joining them again, and returns the text itself (its hash, once computed, is
    kept). The tests: no ASCII whitespace but the space (what ``split()`` splits on
    besides it), no run of spaces, no space at either end; the non-ASCII kinds go the
    long way.
    """
    if _FOLD is not None:
        return _FOLD(text)
    if (text.isascii() and "\n" not in text and "  " not in text and text[:1] != " "
            and text[-1:] != " " and "\t" not in text and "\r" not in text
            and "\x0b" not in text and "\x0c" not in text and "\x1c" not in text
            and "\x1d" not in text and "\x1e" not in text and "\x1f" not in text):
        return text
    return " ".join(text.split())


# --------------------------------------------------------------------------- templates

_TEMPLATE_TOKEN = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}|\{[^}]*\}?|\}")


@dataclass
class Template:
    """A message template: literal text and ``{fact}`` fields, nothing else."""

    source: str
    parts: tuple[tuple[bool, str], ...]  # (is_field, text)

    @property
    def fields(self) -> set[str]:
        return {t for is_field, t in self.parts if is_field}

    def render(self, facts: dict[str, Any]) -> str:
        out: list[str] = []
        for is_field, text in self.parts:
            if not is_field:
                out.append(text)
                continue
            value = facts.get(text)
            if value is None:
                out.append("?")
            elif isinstance(value, float):
                out.append(f"{value:.1f}" if value != int(value) else str(int(value)))
            else:
                s = collapse_ws(str(value))
                out.append(s if len(s) <= 200 else s[:199] + "…")
        return "".join(out)


def compile_template(source: Any, ctx: Ctx, path: Path_, known: set[str]) -> Template | None:
    """Parse a safe template; unknown fields and stray braces are W113 errors."""
    if not ctx.expect(source, str, path, "message"):
        return None
    parts: list[tuple[bool, str]] = []
    pos = 0
    ok = True
    for m in _TEMPLATE_TOKEN.finditer(source):
        if m.start() > pos:
            parts.append((False, source[pos:m.start()]))
        tok = m.group(0)
        if tok == "{{":
            parts.append((False, "{"))
        elif tok == "}}":
            parts.append((False, "}"))
        elif m.group(1):
            name = m.group(1)
            if name not in known:
                close = difflib.get_close_matches(name, sorted(known), n=1)
                ctx.error(BadTemplateError, path, f"unknown template field {{{name}}}",
                          f"did you mean {{{close[0]}}}?" if close else
                          "available: " + ", ".join("{" + k + "}" for k in sorted(known)))
                ok = False
            parts.append((True, name))
        else:
            ctx.error(BadTemplateError, path, f"unsupported template syntax {tok!r}",
                      "only {name} fields; write {{ and }} for literal braces")
            ok = False
        pos = m.end()
    if pos < len(source):
        parts.append((False, source[pos:]))
    return Template(source, tuple(parts)) if ok else None


# --------------------------------------------------------------------------- predicates

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
                                        f"{{list: NAME}}, got {_type_name(value)}")
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
                s = s.translate(_EXTRA_FOLDS)
            return s

        ckey = (cp.source, icase, nws)
        source = _Source(ckey, get, prep)
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
                    search = _combine(compiled, flags, lowered=icase)
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


# The last event's prepared texts, keyed by (field, ignore_case, normalize_whitespace).
# Replaced as a whole tuple, so a reader always sees texts of the event it holds.
_TEXT_CACHE: Final[list[tuple[Any, dict[Any, Any]]]] = [(None, {})]


def event_texts(e: dict[str, Any]) -> dict[Any, Any]:
    """The prepared texts (and scan hits) of event ``e``, shared by every rule that
    tests it; a new event replaces the last one's."""
    cur = _TEXT_CACHE[0]
    if cur[0] is not e:
        cur = (e, {})
        _TEXT_CACHE[0] = cur
    return cur[1]


class _Source:
    """One kind of prepared text: a field read, made text, bounded and prepared
    (folded whitespace, lower case) as a text test says; cached per event."""

    def __init__(self, key: tuple[str, bool, bool], get: Getter,
                 prep: Callable[[str], str]) -> None:
        self.key = key
        self.get = get
        self.prep = prep
        self.tkey = cache_key("text", *key)
        self.hkey = cache_key("hits", *key)
        self.scanner: Scanner | None = None  # the shared scan of this text, if any

    def text(self, e: dict[str, Any], cache: dict[Any, Any]) -> str:
        t: str | None = cache.get(self.tkey)
        if t is None:
            v = self.get(e)
            t = "" if v is None else self.prep(bound_text(unmark(v) if isinstance(v, str)
                                                          else _to_text(v)))
            cache[self.tkey] = t
        return t

    def hits(self, t: str, cache: dict[Any, Any]) -> frozenset[int] | None:
        """:meth:`scan` of this event's prepared text ``t``, made once per event for
        every rule that tests it (``cache`` is :func:`event_texts`)."""
        hits = cache.get(self.hkey, False)
        if hits is False:
            hits = cache[self.hkey] = self.scan(t)
        return hits  # type: ignore[no-any-return]

    def scan(self, t: str) -> frozenset[int] | None:
        """``self.scanner.hits(t)`` without its interpreted frame (see scanmatch)."""
        sc = self.scanner
        if sc is None:
            return None
        sets = sc._sets if sc._built == len(sc.patterns) else sc.ready()
        return None if sets is None else text_hits(sets, t)


class Gate:
    """A necessary condition of a predicate, answered by the shared RE2 scan.

    The predicate can only hold where its prepared text is not empty and the scan of
    that text reports, for each set in ``needs``, one of its patterns (or cannot
    answer). The engine asks the gate before the predicate: on most events the scan,
    made once for every rule testing that text, rules out a rule's patterns, and the
    predicate (its combinators, type and field tests) need not run at all.
    """

    def __init__(self, source: _Source, needs: tuple[frozenset[int], ...]) -> None:
        self.source = source
        self.key = source.key
        self.needs = needs

    def useful(self) -> bool:
        """Whether the text is scanned at all (a scanner of few patterns never is)."""
        sc = self.source.scanner
        return sc is not None and scan_available() and len(sc.patterns) >= sc.min_patterns

    def open(self, e: dict[str, Any]) -> bool:
        """Whether the predicate may hold for ``e`` (``False``: it cannot)."""
        cache = event_texts(e)
        src = self.source
        t = src.text(e, cache)
        if not t:
            return False
        hits = src.hits(t, cache)
        if hits is None:  # no scan, or one that could not answer
            return True
        for need in self.needs:
            if need.isdisjoint(hits):
                return False
        return True


def _combine(compiled: list[re.Pattern[str]], flags: int,
             lowered: bool = False) -> Callable[[str], Any]:
    """One search for a list of regexes (an alternation), when they combine cleanly.

    The search is guarded by a literal prefilter where the pattern allows one (see
    :func:`required_literals`): most agent text contains none of a rule's keywords,
    and a substring test is an order of magnitude cheaper than a regex scan.
    ``lowered`` says the text is already lower-case, so case-insensitive literals can
    be tested in lower case.
    """
    if len(compiled) == 1:
        combined = compiled[0]
    else:
        try:
            combined = re.compile("|".join(f"(?:{c.pattern})" for c in compiled), flags)
        except re.error:  # e.g. duplicate group names: fall back to one search each
            searches = tuple(c.search for c in compiled)
            return lambda t: next((m for m in (s(t) for s in searches) if m is not None), None)
    search = combined.search
    lits = required_literals(combined.pattern, lowered=lowered,
                             ignore_case=bool(combined.flags & re.IGNORECASE))
    if not lits:
        return search
    needles = tuple(sorted(lits, key=len, reverse=True))
    return lambda t: search(t) if any(n in t for n in needles) else None


def required_literals(pattern: str, *, lowered: bool = False,
                      ignore_case: bool = False) -> frozenset[str] | None:
    """Strings of which every match of ``pattern`` contains at least one, or ``None``.

    Derived from the parsed pattern: a run of literal characters, or for an
    alternation the union over its branches. ``None`` when some match could avoid
    every literal of two or more characters (then no prefilter is safe). A
    case-insensitive pattern (or group) has usable literals only when the text is
    ``lowered``: they are then returned in lower case.
    """
    try:
        import re._parser as sre_parse  # type: ignore[import-not-found]
        from re import _constants as c  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - other Python versions
        return None
    try:
        parsed = sre_parse.parse(pattern)
    except (re.error, RecursionError, ValueError):
        return None
    if parsed.state.flags & c.SRE_FLAG_VERBOSE:
        return None
    if (ignore_case or parsed.state.flags & c.SRE_FLAG_IGNORECASE) and not lowered:
        return None
    # under a case-insensitive match of lower-cased text, a literal is found lower-cased
    # (ASCII only: a few non-ASCII letters fold to more than one character)
    fold = bool(ignore_case or parsed.state.flags & c.SRE_FLAG_IGNORECASE)

    def lit(ch: int, folding: bool) -> str | None:
        s = chr(ch)
        if not folding:
            return s
        return s.lower() if s.isascii() else None

    def seq(items: Any, folding: bool) -> frozenset[str] | None:
        best: frozenset[str] | None = None

        def consider(cand: frozenset[str] | None) -> None:
            nonlocal best
            if cand and min(map(len, cand)) >= 2 and (
                    best is None or min(map(len, cand)) > min(map(len, best))):
                best = cand

        run: list[str] = []
        for op, av in items:
            ch = lit(av, folding) if op is c.LITERAL else None
            if ch is not None:
                run.append(ch)
                continue
            consider(frozenset({"".join(run)}) if run else None)
            run = []
            consider(node(op, av, folding))
        consider(frozenset({"".join(run)}) if run else None)
        return best

    def node(op: Any, av: Any, folding: bool) -> frozenset[str] | None:
        if op is c.SUBPATTERN:
            _group, add_flags, del_flags, sub = av
            if add_flags & c.SRE_FLAG_IGNORECASE:
                if not lowered:
                    return None
                folding = True
            if del_flags & c.SRE_FLAG_IGNORECASE:
                folding = False
            return seq(sub, folding)
        if op is c.BRANCH:
            out: set[str] = set()
            for alt in av[1]:
                got = seq(alt, folding)
                if not got:
                    return None
                out |= got
            return frozenset(out)
        if op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT) and av[0] >= 1:
            return seq(av[2], folding)
        if op is c.ATOMIC_GROUP:
            return seq(av, folding)
        return None

    return seq(parsed, fold)


def _negate(f: Pred) -> Pred:
    """``not:`` of a compiled predicate."""
    return lambda e: not f(e)


def never(e: dict[str, Any]) -> bool:
    return False


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


def _to_text(v: Any) -> str:
    from watcher.events import to_text

    return to_text(v)


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
