"""watcher/median.py gives what statistics.median gives (it replaced it to keep the
statistics module out of every start-up)."""

from __future__ import annotations

import random
import statistics

import pytest

from watcher.median import median


def test_median_is_statistics_median() -> None:
    rng = random.Random(7)
    for n in range(1, 60):
        ints = [rng.randint(-50, 50) for _ in range(n)]
        floats = [rng.uniform(0, 1e6) for _ in range(n)]
        for values in (ints, floats, ints + floats):
            got, want = median(values), statistics.median(values)
            assert got == want and type(got) is type(want), values
    assert median(iter([3.0, 1.0])) == 2.0  # any iterable, as the report passes one


def test_no_values_raise_as_statistics_does() -> None:
    with pytest.raises(ValueError):
        median([])
    with pytest.raises(ValueError):
        statistics.median([])
