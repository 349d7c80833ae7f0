"""watcher/engine/rulecache.py: a rule file parsed once is read back as it was parsed
(values, every position, the file named), and nothing about the cache can fail a load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.engine.util import REPO
from watcher.engine import RuleLoadErrors, load_rules, rulecache, yamlsrc

PACK = sorted((REPO / "rules").glob("*.yaml"))


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "cache"
    monkeypatch.setenv(rulecache.ENV, str(where))
    return where


def _docs(text: str, file: str) -> tuple[list[Any], list[Any]]:
    errors: list[Any] = []
    docs = yamlsrc.load_docs(text, file, errors)
    return [(d.data, d.vloc, d.kloc, d.start_line, d.file, d.lines) for d in docs], errors


def _no_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*a: Any) -> Any:
        raise AssertionError("parsed, not read from the cache")

    monkeypatch.setattr(yamlsrc, "_load_docs", refuse)


def test_the_pack_reads_back_as_it_parsed(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = {p: _docs(p.read_text(), str(p)) for p in PACK}
    assert len(list(cache.iterdir())) == len(PACK)
    _no_parsing(monkeypatch)
    for p, first in parsed.items():
        assert _docs(p.read_text(), str(p)) == first
    # the same text under another name: its own name in the documents
    again, _ = _docs(PACK[0].read_text(), "elsewhere.yaml")
    assert {d[4] for d in again} == {"elsewhere.yaml"}


def test_a_rule_error_is_located_the_same_from_the_cache(cache: Path, tmp_path: Path) -> None:
    rule = tmp_path / "mine.yaml"
    rule.write_text("id: mine\ndescription: x\ncategory: loop\nwhen:\n  typo_field: 3\n")

    def located() -> list[tuple[Any, ...]]:
        with pytest.raises(RuleLoadErrors) as exc:
            load_rules(paths=[rule], builtin=False)
        return [(e.file, e.line, e.col, str(e)) for e in exc.value.errors]

    first = located()
    assert any(line == 4 for _, line, _, _ in first)  # the unknown key, located
    # parsed without a YAML problem: kept (beside it, loading may keep its regex
    # analyses: rxcache's table)
    assert len([p for p in cache.iterdir() if p.suffix == ".rules"]) == 1
    assert located() == first


def test_a_text_with_a_problem_is_not_kept(cache: Path) -> None:
    for _ in range(2):
        _, errors = _docs("id: [unclosed\n", "bad.yaml")
        assert errors and errors[0].line == 2
    assert not cache.exists() or not list(cache.iterdir())


def test_a_damaged_entry_is_parsed_again_and_replaced(cache: Path) -> None:
    text = PACK[0].read_text()
    first, _ = _docs(text, "a.yaml")
    [entry] = list(cache.iterdir())
    raw = bytearray(entry.read_bytes())
    raw[-5] ^= 0x01  # a flipped bit in what it holds: the checksum no longer matches
    entry.write_bytes(bytes(raw))
    assert rulecache.load(text) is None
    assert _docs(text, "a.yaml")[0] == first
    assert rulecache.load(text) is not None  # written anew
    entry.write_bytes(b"short")
    assert _docs(text, "a.yaml")[0] == first


def test_a_cache_that_cannot_be_written_or_is_off_changes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = PACK[0].read_text()
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    monkeypatch.setenv(rulecache.ENV, str(blocked / "rules"))
    first, errors = _docs(text, "a.yaml")
    assert first and not errors
    monkeypatch.setenv(rulecache.ENV, "")
    assert rulecache.cache_dir() is None
    assert _docs(text, "a.yaml")[0] == first


def test_the_oldest_entries_go_past_the_limit(cache: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rulecache, "MAX_ENTRIES", 3)
    for i in range(5):
        _docs(f"id: r{i}\n", "r.yaml")
    assert len([p for p in cache.iterdir() if p.suffix == ".rules"]) == 3
    assert not [p for p in cache.iterdir() if p.name.startswith(".part-")]
