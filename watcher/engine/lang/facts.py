"""The fact-test language: ``count: {gte: 4}``, ``exit_code: {in: [1, 2]}``, ``tool: bash``.

A rule's confidence conditions (:mod:`.schema`), the action policy's ``when``
(:mod:`watcher.act.policy`) and the order comparisons of rule paths (:mod:`.paths`)
test values the same way; this is the one place that says how, so that a rule and the
policy that acts on its finding can never disagree on whether ``True`` equals ``1``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

FACT_OPS = ("eq", "ne", "gt", "gte", "lt", "lte", "in")
# the operators that compare numbers (their value must be one)
ORDER_OPS = ("gt", "gte", "lt", "lte")
ORDERS: dict[str, Callable[[Any, Any], bool]] = {
    "gt": lambda a, b: a > b, "gte": lambda a, b: a >= b,
    "lt": lambda a, b: a < b, "lte": lambda a, b: a <= b}


def fact_eq(a: Any, b: Any) -> bool:
    """Equality where a boolean equals only a boolean (``True`` is not ``1``)."""
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    return bool(a == b)


def fact_test(op: str, want: Any) -> Callable[[Any], bool]:
    """One fact test (``want`` already checked for ``op``): an order holds only for a
    number (never a boolean), ``in`` for a member of ``want``, ``eq``/``ne`` by
    :func:`fact_eq`."""
    if op in ORDERS:
        cmp = ORDERS[op]
        return lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and cmp(v, want)
    if op == "in":
        return lambda v: any(fact_eq(v, x) for x in want)
    if op == "eq":
        return lambda v: fact_eq(v, want)
    return lambda v: not fact_eq(v, want)
