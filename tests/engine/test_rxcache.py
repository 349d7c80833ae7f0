"""watcher/engine/rxcache.py: a regex analysis made once is read back in the next run, a
regex refused is refused again, and nothing about the table can fail a load."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from watcher.engine import load_rules, rulecache, rxcache
from watcher.engine.lang.ctx import Ctx
from watcher.engine.lang.regex import compile_regex
from watcher.engine.rxcache import persistent
from watcher.engine.yamlsrc import Doc

CALLS: list[object] = []


@persistent("test-square")
def square(x: int) -> int:
    CALLS.append(x)
    return x * x


@persistent("test-refuse")
def refuse(x: str) -> str:
    CALLS.append(x)
    raise ValueError(x)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    where = tmp_path / "cache"
    monkeypatch.setenv(rulecache.ENV, str(where))
    rxcache.reset()
    CALLS.clear()
    yield where
    rxcache.reset()  # the next test reads its own directory's table


def _next_run() -> None:
    """What a new process sees: the table written, nothing in memory."""
    rxcache.flush()
    rxcache.reset()


def test_an_answer_is_read_back_in_the_next_run(cache: Path) -> None:
    assert square(3) == 9 and square(3) == 9
    assert CALLS == [3]
    _next_run()
    assert [p.suffix for p in cache.iterdir()] == [".regex"]
    assert square(3) == 9 and square(re.IGNORECASE) == 4  # a flag is kept as its int
    assert CALLS == [3, re.IGNORECASE]
    _next_run()
    assert square(re.IGNORECASE) == 4 and CALLS == [3, re.IGNORECASE]


def test_a_raise_is_never_kept(cache: Path) -> None:
    for _ in range(2):
        with pytest.raises(ValueError):
            refuse("a")
        _next_run()
    assert CALLS == ["a", "a"]


def test_a_torn_or_unreadable_table_is_passed_over(cache: Path) -> None:
    square(5)
    _next_run()
    (table,) = cache.iterdir()
    table.write_bytes(table.read_bytes()[:-3])  # torn: the checksum no longer holds
    assert square(5) == 25 and CALLS == [5, 5]
    _next_run()
    assert square(5) == 25 and CALLS == [5, 5]  # written anew


def test_turned_off_it_still_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(rulecache.ENV, "")
    rxcache.reset()
    CALLS.clear()
    assert square(7) == 49
    _next_run()
    assert square(7) == 49 and CALLS == [7, 7]


@pytest.mark.parametrize("regex, code", [(r"(a+)+$", "W107"), (r"(?<=a+)b", "W106"),
                                         (r"(?<=a)b", "W122")])
def test_a_refused_regex_is_refused_on_every_load(cache: Path, regex: str, code: str) -> None:
    for _ in range(2):
        errors: list = []  # type: ignore[type-arg]
        ctx = Ctx(Doc(data={}, file="r.yaml", lines=[""]), errors)
        assert compile_regex(regex, ctx, ()) is None
        assert [e.code for e in errors] == [code]
        _next_run()


def test_a_second_load_of_the_pack_computes_nothing(cache: Path) -> None:
    from watcher.engine import rx

    load_rules(user_dir=False)
    assert rxcache.computed > 100  # the pack's regexes: validated, translated, ...
    _next_run()
    before = rxcache.computed
    load_rules(user_dir=False)
    assert rxcache.computed == before  # every analysis read from the table
    table = rxcache._load()
    translations = [(args, dict(*kw), v) for (kind, args, *kw), v in table.items()
                    if kind == "translate"]
    assert len(translations) > 100
    for args, kwargs, value in translations:  # and each is what translating gives
        assert rx.translate.__wrapped__(*args, **kwargs) == value


def test_every_module_that_keeps_answers_names_the_table() -> None:
    engine = Path(rxcache.__file__).parent  # (the package tested: sources or a build)
    users = {str(p.relative_to(engine)) for p in engine.parent.rglob("*.py")
             if "@persistent(" in p.read_text()}
    assert users == set(rxcache.MODULES)
