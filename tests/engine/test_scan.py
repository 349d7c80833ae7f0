"""The shared RE2 scan must never hide a match Python's ``re`` would find.

The scan is only a prefilter (``re`` confirms every hit), so over-matching costs
time and under-matching loses findings. These tests compare it with ``re`` over
the built-in pack's patterns and deliberately awkward ones, on ASCII and
non-ASCII text (the control channel's truncation adds a non-ASCII ``…``).
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from watcher.engine import Engine, load_rules
from watcher.engine.scan import Scanner, Untranslatable, prefilter_pattern
from watcher.events import normalise
from watcher.findings import SampleRef
from watcher.resources import bundled_dir

TRICKY = [
    r"\bcat\s", r"\w+\.py\b", r"[^\s]{3}x", r"\S+@\S+", r"\d{2,}", r"\D\W", r"^foo",
    r"bar$", r"(?m)^baz$", r"(?s)a.b", r"a.b", r"(?i)[a-z]{3}k", r"(?i)kis", r"[^a-z]x",
    r"(?i)[^a-z]x", r"(\w)\1", r"foo(?=bar)", r"(?<!x)yz", r"(?:ab){2,40}c", r"a{20}",
    r"x{3,}?y", r"\Bin\B", r"\Aone", r"two\Z", r"[\u00e9-\u00ff]", r"caf\u00e9",
    r"(?i)stra\u00dfe", r"[\w-]{2,30}", r"\s\s", r"(?P<q>['\"]).{0,9}(?P=q)",
    r"(?a)\w\b", r"(?x) a  b # comment", r"[^\W\d]", r"(a)?(?(1)b|c)", r"…",
    r"\b\u00e9", r"\u00e9\b", r"\w\b\s", r"\B\u00e9",
]

ALPHABET = ("abcikxyzIKSABCfoobarbazcatpy._-/\\'\"@ \t\n\x0b\x1c\u00a0\u2028"
            "0123\u0663\u00e9\u00ff\u017f\u212a\u0130\u0131\u2026\u00dfXYZ")


def pack_patterns() -> list[tuple[str, int]]:
    import yaml

    lib = yaml.safe_load((bundled_dir("rules") / "library.yaml").read_text())
    pats = [p for v in lib["lists"].values() for p in v if isinstance(p, str)]
    return [(p, f) for p in pats for f in (0, re.IGNORECASE)]


def all_patterns() -> list[tuple[str, int]]:
    return pack_patterns() + [(p, f) for p in TRICKY for f in (0, re.IGNORECASE)]


PATTERNS = all_patterns()
SCANNER = Scanner()
for _p, _f in PATTERNS:
    SCANNER.add(_p, _f)
COMPILED = [re.compile(p, f) for p, f in PATTERNS]


def misses(text: str) -> list[str]:
    hits = SCANNER.hits(text)
    if hits is None:
        return []
    return [PATTERNS[i][0] for i, rx in enumerate(COMPILED)
            if rx.search(text) is not None and i not in hits]


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=ALPHABET, max_size=60))
def test_scan_never_misses_on_random_text(text: str) -> None:
    assert misses(text) == []


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(PATTERNS), st.text(alphabet=ALPHABET, max_size=12),
       st.text(alphabet=ALPHABET, max_size=12))
def test_scan_never_misses_around_a_real_match(pat: tuple[str, int], pre: str,
                                               post: str) -> None:
    """Texts built around a string the pattern matches (random text rarely matches)."""
    seeds = ["cat expected_output.txt", "pytest -k 'not slow'", "rm tests/test_a.py",
             "grep -r flag /", "if x == 'test_case':", "sed -i s/a/b/ tests/x.py",
             "final answer", "echo 'exit 0' > run.sh", "Traceback (most recent call last)",
             "foo", "bar", "aa", "cafe", "café", "strasse", "kis", "ſ", "K"]
    for seed in seeds:
        text = pre + seed + post
        assert misses(text) == [], (pat, text)


def test_scan_reports_what_the_pack_matches_and_little_else() -> None:
    scanner = Scanner()
    ids = {scanner.add(p, f): (p, f) for p, f in pack_patterns()}
    text = "cat /srv/expected_output.json | head"
    hits = scanner.hits(text)
    assert hits is not None and hits  # ASCII text: the scan answers
    matched = {i for i, (p, f) in ids.items() if re.search(p, text, f)}
    assert matched <= hits
    assert len(hits) < len(ids) / 4  # a prefilter that passes everything is no prefilter


def test_truncated_text_is_scanned_not_skipped() -> None:
    """Content-tier text ends in the server's '…': the loose set still answers."""
    scanner = Scanner()
    i = scanner.add(r"\bcat\s+\S*expected", re.IGNORECASE)
    assert scanner.hits("cat expected_output.txt and more…") == frozenset({i})
    assert scanner.hits("nothing to see here…") == frozenset()


def test_untranslatable_patterns_always_pass_to_re() -> None:
    with pytest.raises(Untranslatable):
        prefilter_pattern("(")
    scanner = Scanner()
    scanner.add("a(")  # not even valid: the compile step rejects it, the scan must not care
    j = scanner.add("zz")
    hits = scanner.hits("no match here")
    assert hits == frozenset({0})
    assert j not in hits


def test_lone_surrogates_fall_back_to_re() -> None:
    scanner = Scanner()
    scanner.add("x")
    assert scanner.hits("a\ud800b") is None


def _rules_on_answer_key_read() -> set[str]:
    """Rules of the built-in pack that fire on one call reading an expected-output file."""
    engine = Engine(load_rules(builtin=True, user_dir=False))
    watch = engine.open_sample(SampleRef(task="t", task_id="t", eval_id="e", model="m",
                                         sample_id="1", epoch=1, attempt=1))
    event = normalise({"event": "tool", "uuid": "u1", "timestamp": 1.0, "function": "bash",
                       "arguments": {"cmd": "cat /srv/expected_output.json"},
                       "result": "42", "error": None})
    return {f.rule for f in watch.feed(event)}


def test_a_scan_that_gives_up_hands_over_to_re() -> None:
    """RE2 answers "no match" and "the DFA ran out of memory" with the same empty
    list; the always-matching sentinel tells them apart, so a failed scan is never
    read as "nothing matched" (which would hide a finding)."""
    scanner = Scanner()
    i = scanner.add(r"\bcat\s")
    assert scanner.hits("cat x") == frozenset({i})
    assert scanner.hits("dog x") == frozenset()
    assert scanner._sets is not None
    for s in scanner._sets:
        s.match = lambda data: []  # what Set.Match returns when its DFA bails out
    assert scanner.hits("cat x") is None
    assert scanner.hits("cat \u00e9") is None


def test_a_scanner_with_few_patterns_leaves_every_text_to_re() -> None:
    """A call into RE2 costs more than a rule's literal-guarded ``re`` search when only
    a few patterns share the text, so such a scanner answers ``None`` (ask ``re``)
    until enough patterns join it."""
    scanner = Scanner(min_patterns=3)
    i = scanner.add(r"\bcat\s")
    scanner.add(r"\bgrep\s")
    assert scanner.hits("cat x") is None
    assert scanner._sets is None
    scanner.add(r"\bhead\s")
    assert scanner.hits("cat x") == frozenset({i})
    assert scanner.hits("dog x") == frozenset()


def test_rules_still_match_when_every_scan_gives_up(monkeypatch: pytest.MonkeyPatch) -> None:
    from watcher.engine import scan

    real_init = scan._Set.__init__

    def failing(self: scan._Set, *args: object, **kwargs: object) -> None:
        real_init(self, *args, **kwargs)  # type: ignore[arg-type]
        self.match = lambda data: []

    monkeypatch.setattr(scan._Set, "__init__", failing)
    assert "shortcut-read-answer-key" in _rules_on_answer_key_read()


def test_rules_share_one_scan_per_prepared_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """Six shortcut rules test the lower-cased arguments: one scan serves them all."""
    from watcher.engine import scan

    calls: list[bytes] = []
    real_init = scan._Set.__init__

    def counting(self: scan._Set, *args: object, **kwargs: object) -> None:
        real_init(self, *args, **kwargs)  # type: ignore[arg-type]
        match = self.match
        if match is not None:
            def counted(data: bytes) -> list[int]:
                calls.append(data)
                return match(data)  # type: ignore[no-any-return]
            self.match = counted

    # the RE2 sets are built on the first scan (after this patch); every scan calls match
    monkeypatch.setattr(scan._Set, "__init__", counting)
    assert "shortcut-read-answer-key" in _rules_on_answer_key_read()
    assert len(calls) == len(set(calls))  # each prepared text scanned once
    assert 0 < len(calls) <= 3

