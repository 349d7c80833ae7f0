"""The median of a few numbers, as :func:`statistics.median` gives it.

Three call sites (outlier rules, a task's finished samples, the report's outliers)
needed nothing else of :mod:`statistics`, whose import (fractions, decimal, random)
was 2 ms of every start-up.
"""

from __future__ import annotations

from collections.abc import Iterable


def median(values: Iterable[float]) -> float:
    """The middle value, or the mean of the two middle values (``ValueError`` when there
    are none, as ``statistics.median`` raises its subclass of it)."""
    data = sorted(values)
    n = len(data)
    if n == 0:
        raise ValueError("no median for empty data")
    if n % 2 == 1:
        return data[n // 2]
    i = n // 2
    return (data[i - 1] + data[i]) / 2
