"""The literal prefilter in front of rule regexes never changes a match result."""

from __future__ import annotations

import re

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from watcher.engine.lang.regex import combine as _combine
from watcher.engine.lang.regex import required_clauses, required_literals
from watcher.engine.rx import Pattern
from watcher.resources import bundled_dir


def _pack_patterns() -> list[str]:
    pats: list[str] = []
    for path in sorted(bundled_dir("rules").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict):
                for values in (doc.get("lists") or {}).values():
                    pats += [v for v in values if isinstance(v, str)]
    return pats


def _valid(p: str) -> bool:
    try:
        re.compile(p)
        return True
    except re.error:
        return False


PATTERNS = [p for p in _pack_patterns() if _valid(p)]


def test_known_shapes() -> None:
    assert required_literals(r"\b(cat|less|head)\s") == {"cat", "less", "head"}
    assert required_literals(r"expected[_-]?(output|answer)s?") == {"expected"}
    assert required_literals(r"a.*b") is None
    assert required_literals(r"foo|b") is None  # one branch has no 2-char literal
    assert required_literals(r"(?i)Foo") is None
    assert required_literals(r"(?:x+)?foo") == {"foo"}


def test_every_clause_a_match_needs_is_kept() -> None:
    # code holds `return` on every other line: the regex should run only where the
    # test-named string and the comparison are there too
    hard = r"\bif\s.{0,80}==\s*['\"](?:test|expected)\w*['\"]:.{0,40}?\breturn\s+\d"
    assert required_clauses(hard) == (frozenset({"return"}), frozenset({"test", "expected"}),
                                      frozenset({"if"}), frozenset({"=="}))
    assert required_clauses(r"a.*b") == ()
    assert required_clauses(r"(?:foo|ba)r+ baz") == (frozenset({" baz"}),
                                                     frozenset({"foo", "ba"}))
    # an optional part requires nothing; a branch without a literal voids its clause
    assert required_clauses(r"(?:abc)?de(?:fg|h)") == (frozenset({"de"}),)
    combined = _combine([Pattern(hard)], 0)
    assert combined("    return 1\n" * 50) is None
    assert combined("if x == 'test_1': return 2") is not None


def test_the_pack_has_prefilterable_patterns() -> None:
    assert PATTERNS
    assert sum(required_literals(p) is not None for p in PATTERNS) >= len(PATTERNS) // 2


_alphabet = st.sampled_from(list("abcdefghijklmnopqrstuvwxyzTSIK0123456789 _-./()|&;'\"\nſıK"))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_prefiltered_search_equals_plain_search(data: st.DataObject) -> None:
    pattern = data.draw(st.sampled_from(PATTERNS))
    lits = sorted(set().union(*required_clauses(pattern)) or {"x"})
    pieces = st.one_of(st.text(_alphabet, max_size=6), st.sampled_from(lits))
    text = "".join(data.draw(st.lists(pieces, max_size=12)))
    compiled = Pattern(pattern)  # on RE2, as the engine runs it
    assert (_combine([compiled], 0)(text) is None) == (compiled.search(text) is None)
    # a case-insensitive rule: the engine lower-cases (and folds ı, ſ) the text and
    # drops IGNORECASE where it can; the result must equal the plain IGNORECASE search
    folded = text.lower().translate({0x131: "i", 0x17F: "s"})
    flags = re.IGNORECASE if any(ch.isupper() for ch in pattern) else 0
    fast = _combine([Pattern(pattern, flags)], flags, lowered=True)
    assert (fast(folded) is None) == (re.search(pattern, text, re.IGNORECASE) is None)
