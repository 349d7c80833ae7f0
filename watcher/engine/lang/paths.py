"""JMESPath at load time: each expression compiled once into plain getters and tests.

A JMESPath expression made of fields, multiselects, ``==``/``!=``, order comparisons and
boolean operators becomes dict lookups (:func:`_fast`), and a ``where`` of them one
generated function (:class:`_Gen`) or, compiled, one native call (:class:`FieldTests`);
anything else falls back to the compiled JMESPath search, which raises
:class:`~watcher.engine.rule.ExprFailed` where JMESPath fails on the data (a function
given the wrong type): the engine then lets the event not count for the rule and
reports it, rather than reading the failure as ``null``. The getters are what the
engine calls per event; building them is all that happens here.
"""

from __future__ import annotations

from typing import Any, Final

import jmespath
import jmespath.exceptions

from watcher.engine.errors import BadJmespathError
from watcher.engine.lang.ctx import Ctx
from watcher.engine.lang.facts import ORDERS
from watcher.engine.rule import CompiledPath, ExprFailed, Getter, Pred
from watcher.engine.yamlsrc import Path_


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
    if kind == "comparator" and ast["value"] in ORDERS:
        pair = _fast_pair(kids)
        if pair is None:
            return None
        lo, hi = pair
        op = ORDERS[ast["value"]]

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


_PATH_CACHE: dict[str, CompiledPath] = {}


def _type_reason(exc: jmespath.exceptions.JMESPathTypeError) -> str:
    """Why a JMESPath function failed, naming types only (the value is agent data)."""
    expected = " or ".join(str(t) for t in exc.expected_types or ())
    return f"{exc.function_name}() was given a {exc.actual_type}, not a {expected}"


def compile_path(expr: Any, ctx: Ctx, path: Path_, what: str = "expression") -> CompiledPath | None:
    """Compile (and cache) a JMESPath expression, reporting W105 on failure."""
    if not ctx.expect(expr, str, path, what):
        return None
    cached = _PATH_CACHE.get(expr)
    if cached is not None:
        return cached
    try:
        out = _compile(expr)
    except jmespath.exceptions.JMESPathError as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        ctx.error(BadJmespathError, path, f"invalid JMESPath in {what}: {msg}",
                  "quote string literals with '...' and JSON literals with `...`")
        return None
    except (RecursionError, MemoryError, SyntaxError):
        # the JMESPath parser and the passes below recurse once per level of nesting
        ctx.error(BadJmespathError, path, f"JMESPath in {what} nested too deep to compile",
                  "flatten it: split one deep expression into an all: of simpler ones")
        return None
    _PATH_CACHE[expr] = out
    return out


def _compile(expr: str) -> CompiledPath:
    compiled = jmespath.compile(expr)
    fast = _fast(compiled.parsed)
    if fast is not None:
        getter = fast
    else:
        search = compiled.search

        def getter(d: Any) -> Any:
            try:
                return search(d)
            except jmespath.exceptions.JMESPathTypeError as exc:
                raise ExprFailed(expr, _type_reason(exc)) from None
            except (jmespath.exceptions.JMESPathError, TypeError, ValueError,
                    RecursionError) as exc:
                raise ExprFailed(expr, type(exc).__name__) from None
    test = _gen_test(compiled.parsed)
    if test is None:
        test = lambda d, g=getter: truthy(g(d))  # type: ignore[misc]  # noqa: E731
    return CompiledPath(expr, getter, frozenset(_fields(compiled.parsed)), fast is not None,
                        test, _plain_fields(compiled.parsed))


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
