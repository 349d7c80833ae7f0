"""Rule regexes on RE2 (watcher.engine.rx): Python's meaning, in linear time."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import unicodedata
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from watcher.engine.rx import _UNANCHORED, Pattern, Unsupported, translate
from watcher.resources import bundled_dir

REPO = Path(__file__).resolve().parents[2]


def _pack_patterns() -> list[str]:
    pats: list[str] = []
    for path in sorted(bundled_dir("rules").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict):
                for values in (doc.get("lists") or {}).values():
                    pats += [v for v in values if isinstance(v, str)]
    return [p for p in pats if _valid(p)]


def _valid(p: str) -> bool:
    try:
        re.compile(p)
        return True
    except re.error:
        return False


PATTERNS = _pack_patterns()
BOUNDARY = re.compile(r"\\[bB]")


def test_classes_are_pythons_on_every_assigned_code_point() -> None:
    """\\w, \\d and \\s mean what they mean to Python in Unicode text (RE2's own are
    ASCII); characters this Python's Unicode database does not know yet (Cn) aside."""
    chars = "".join(chr(i) for i in range(0x110000)
                    if not 0xD800 <= i <= 0xDFFF and unicodedata.category(chr(i)) != "Cn")
    for cls in (r"\w", r"\d", r"\s"):
        assert Pattern(cls + "+").sub("", chars) == re.sub(cls + "+", "", chars), cls


_TEXT = st.text(st.sampled_from(list(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-./()|&;:'\"\n\t\\*>$@{}"
    "…—€→\u00a0\u3000")), max_size=40)
_NON_ASCII_WORDS = st.sampled_from(["é", "λ", "ſ", "ı", "K", "\u0663", "中"])


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_pack_patterns_match_where_python_does(data: st.DataObject) -> None:
    """Every regex of the built-in pack, as the engine runs it (plain, and on lower-cased
    text for ignore_case rules), finds a match exactly where ``re`` does. Text with
    non-ASCII word characters only for patterns without \\b or \\B (see rx: RE2's
    word boundaries are ASCII)."""
    pattern = data.draw(st.sampled_from(PATTERNS))
    pieces = [_TEXT, st.sampled_from(sorted(_literals(pattern)) or ["x"])]
    if not BOUNDARY.search(pattern):
        pieces.append(_NON_ASCII_WORDS)
    text = "".join(data.draw(st.lists(st.one_of(*pieces), max_size=8)))
    assert (Pattern(pattern).search(text) is None) == (re.search(pattern, text) is None)
    folded = text.lower().translate({0x131: "i", 0x17F: "s"})
    flags = re.IGNORECASE if any(ch.isupper() for ch in pattern) else 0
    assert (Pattern(pattern, flags).search(folded) is None) == (
        re.search(pattern, text, re.IGNORECASE) is None)


def _literals(pattern: str) -> set[str]:
    """Words of the pattern, so generated texts reach its matches."""
    return set(re.findall(r"[A-Za-z_]{2,}", pattern.replace("\\b", " ").replace("\\s", " ")))


@pytest.mark.parametrize(("pattern", "text", "found"), [
    ("done$", "done\n", True),  # Python's $ matches before a final newline
    ("done$", "done\n\n", False),
    (r"done\Z", "done\n", False),
    ("(?m)^b$", "a\nb\nc", True),
    ("a.c", "a\nc", False),
    ("(?s)a.c", "a\nc", True),
    ("(?i)k", "\u212a", True),  # the Kelvin sign folds to k, as in re
    ("(?i)i", "\u0131", True),  # and dotless i to i
    ("(?i)[^i]", "\u0131", False),
    ("(?i)[a-z]", "\u0130", True),
    (r"[^\D]", "\u0663", True),  # an Arabic-Indic digit is a decimal digit
    (r"\W", "é", False),
    (r"x{3}y", "xxxy", True),
    (r"x{3}y", "xxy", False),
    (r"a+?b", "aab", True),
    ("(?x) a b  # spaced out", "ab", True),
])
def test_semantics_are_pythons(pattern: str, text: str, found: bool) -> None:
    assert (re.search(pattern, text) is not None) is found
    assert (Pattern(pattern).search(text) is not None) is found


def test_word_boundaries_are_ascii() -> None:
    """The one documented difference: RE2 reads é as no word character at \\b."""
    assert re.search(r"\bx", "éx") is None
    assert Pattern(r"\bx").search("éx") is not None
    assert Pattern(r"\bx").search("ex") is None and Pattern(r"\bx").search("-x") is not None


@pytest.mark.parametrize("pattern", [
    "a(?=b)", "a(?!b)", "(?<=a)b", "(?<!a)b", r"(a)\1", "(a)?(?(1)b|c)", "a*+", "(?>ab)",
    "a{1001}", "a$b", "(a$)*", "(?ai)k",
])
def test_what_re2_cannot_take_is_refused(pattern: str) -> None:
    with pytest.raises(Unsupported):
        translate(pattern)


def test_sub_is_re_sub() -> None:
    rx = r"(?:[A-Za-z]:)?(?:[\w.~-]*/)+[\w.-]*"
    for text in ["cat /srv/a.txt and C:x/y", "no paths", "é/λ/中 x", "a/" * 50]:
        assert Pattern(rx).sub("<path>", text) == re.sub(rx, "<path>", text)


SLOW = [
    # (pattern, a text it matches, 8 KB that re takes minutes to reject)
    ("^a*a*a*a*a*a*Z", "a" * 7999 + "Z", "a" * 8000),
    (".*foo.*bar.*baz", "foo bar " * 999 + "baz", "foo bar " * 1000),
    (r"x\s*\s*\s*\s*$", "x" + " " * 7999, "x" + " " * 7998 + "y"),
]


def test_slow_patterns_finish_on_8kb_of_agent_text(tmp_path: Path) -> None:
    """Issue 23 item 4: each pattern passes validation, and a rule using it judges 8 KB
    of tool arguments at once: the match found, the near miss not (``re`` took minutes on
    each near miss). Run as ``rules test`` in a subprocess: a hang is a timeout."""
    docs = []
    for i, (pattern, hit, miss) in enumerate(SLOW):
        # the parsed arguments are whole (display texts are cut to 256 characters)
        docs.append({
            "id": f"slow-{i}", "title": "slow", "category": "shortcut", "severity": "info",
            "events": ["tool"], "needs": "content", "field": "args.text",
            "regex": pattern, "detect": "match",
            "tests": [{"name": "match", "events": [{"function": "bash",
                                                     "arguments": {"text": hit}}],
                       "expect": [{"count": 1}]},
                      {"name": "near miss", "events": [{"function": "bash",
                                                         "arguments": {"text": miss}}] * 3,
                       "expect": []}]})
    path = tmp_path / "slow.yaml"
    path.write_text(yaml.safe_dump_all(docs, width=10**6))
    code = textwrap.dedent("""
        import sys
        from watcher.rules_cli import rules
        rules(["test", sys.argv[1]])
    """)
    got = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, timeout=300, cwd=REPO,
                         env={"PATH": "/usr/bin:/bin", "XDG_CONFIG_HOME": str(tmp_path)})
    assert got.returncode == 0, got.stdout + got.stderr
    assert "6 passed, 0 failed" in got.stdout


_ASCII_TEXT = st.text(st.sampled_from(list(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-./()|&;:'\"\n\t\\*>$@{}"
    "\x1c\x1f\x0b")), max_size=40)


def _both(p: Pattern, text: str) -> tuple[object, object]:
    """A text's answer from the ASCII program and from the UTF-8 one."""
    ascii = p._amatch or p._ascii_match()  # (a built-in pattern's: built on first use)
    assert ascii is not None
    data = text.encode("ascii")
    utf8 = p._utf8_match()
    return (ascii(_UNANCHORED, data, 0, len(data))[0],
            utf8(_UNANCHORED, data, 0, len(data))[0])


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_ascii_programs_match_ascii_text_as_utf8_ones_do(data: st.DataObject) -> None:
    """A pattern's Latin-1 program for ASCII texts finds the same match (the same span)
    as its UTF-8 program, for every pack pattern, plain and case-insensitive."""
    pattern = data.draw(st.sampled_from(PATTERNS))
    pieces = [_ASCII_TEXT, st.sampled_from(sorted(_literals(pattern)) or ["x"])]
    text = "".join(data.draw(st.lists(st.one_of(*pieces), max_size=8)))
    for flags in (0, re.IGNORECASE):
        a, u = _both(Pattern(pattern, flags), text)
        assert a == u, (pattern, flags, text)
        assert (Pattern(pattern, flags).search(text) is None) == (
            re.search(pattern, text, flags) is None)


@pytest.mark.parametrize(("pattern", "text", "found"), [
    ("é", "e", False),  # a non-ASCII literal never matches ASCII text
    ("[é]", "e", False),
    ("[^é]", "e", True),
    ("[^\u2026]", "&", True),  # (U+2026's low byte is "&": it must not become a literal)
    ("\u2026", "&", False),
    ("[a\u2026]", "&", False),
    ("[\u00e0-\u00ff]x", "x", False),
    ("[\u0020-\u00ff]", "~", True),
    ("(?i)k", "K", True),
    ("(?i)[^k]", "K", False),
    (r"\s", "\x1c", True),  # Python's \s includes the ASCII separators
    (r"(?a)\s", "\x1c", False),
    (r"\w+\d", "ab1", True),
    (r"[^\W]", "_", True),
])
def test_ascii_programs_mean_what_python_means(pattern: str, text: str, found: bool) -> None:
    assert (re.search(pattern, text) is not None) is found
    p = Pattern(pattern)
    assert p._amatch is not None  # answered by the ASCII program
    assert (p.search(text) is not None) is found
    assert (_both(p, text)[0][0] >= 0) is found  # type: ignore[index]


def test_utf8_programs_are_built_when_a_non_ascii_text_comes() -> None:
    """Loading a pattern builds only its ASCII program (a tenth of the cost); the UTF-8
    one comes with the first text outside ASCII, and answers as Python does there."""
    p = Pattern(r"\w+:\s*line \d+")
    assert p._match is None and p.search("foo: line 3") is not None
    assert p._match is None and p._test is None and p._atest  # (search asks a set)
    assert p.search("λ: line \u0663") is not None and p._test
    big = Pattern(r"(?:\w{0,40}x){20}")  # a large program: checked for RE2 at once
    assert big._match is not None


def test_every_pack_regex_has_an_ascii_program() -> None:
    from watcher.engine import load_rules

    built: list[Pattern] = []
    original = Pattern.__init__

    def init(self: Pattern, *a: object, **k: object) -> None:
        original(self, *a, **k)  # type: ignore[arg-type]
        built.append(self)

    Pattern.__init__ = init  # type: ignore[method-assign]
    try:
        load_rules(builtin=True, user_dir=False)
    finally:
        Pattern.__init__ = original  # type: ignore[method-assign]
    assert built and all(p.ascii is not None for p in built)
    for p in built:  # (built when an ASCII text first needs it: re2_known.KNOWN_ASCII)
        p.search("an ASCII text")
        assert p._atest  # its set, searched (RE2 built it)
        assert p._amatch is not None or p._ascii_match() is not None


# observed by replacing rx._known_utf8, which a compiled rx does not look up again (the
# main suite runs these on the sources; test_compiled runs tests/engine on the wheel)
_SOURCES_ONLY = pytest.mark.skipif(
    not __import__("watcher.engine.rx", fromlist=["x"]).__file__.endswith(".py"),
    reason="rx is compiled: its module functions cannot be replaced")


@_SOURCES_ONLY
def test_the_known_utf8_programs_are_the_built_in_packs() -> None:
    """re2_known.KNOWN_UTF8 names exactly the patterns the built-in pack would build at
    once (each of which RE2 builds); a built-in regex changed without writing the list
    anew fails here."""
    from tests.engine.re2_known import pack_utf8_patterns
    from watcher.engine.re2_known import KNOWN_UTF8
    from watcher.engine.rx import utf8_digest

    patterns = pack_utf8_patterns()
    assert patterns  # (the pack has such patterns: the test_tamper alternation)
    assert {utf8_digest(t) for t in patterns} == KNOWN_UTF8, (
        "write the list anew: python -m tests.engine.re2_known")


@_SOURCES_ONLY
def test_a_known_utf8_program_waits_and_another_is_built_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from watcher.engine import Engine, load_rules, rx

    # the pack's patterns built at once when not known, as the pack makes them
    made: list[tuple[str, int, str, str]] = []

    def unknown(translated: str) -> bool:
        me = sys._getframe(1).f_locals["self"]
        made.append((me.pattern, me.flags, translated, me.ascii))
        return False

    monkeypatch.setattr(rx, "_known_utf8", unknown)
    monkeypatch.setattr(rx, "_known_ascii", lambda ascii: False)  # (built at load)
    Engine(load_rules(paths=[], builtin=True), [])
    monkeypatch.undo()
    assert made
    for pattern, flags, translated, ascii in made:
        known = rx.Pattern(pattern, flags, translated, ascii)
        assert known._match is None  # built when a text outside ASCII first needs it
        assert known._test is None
        assert known.search("é") is None and known._test  # (search asks a set)
        # a library's list redefined: another pattern, built at once as before
        changed = rx.Pattern(pattern, flags, translated + "|zzz", ascii + "|zzz")
        assert changed._match is not None


@_SOURCES_ONLY
def test_the_known_ascii_programs_are_the_built_in_packs() -> None:
    """re2_known.KNOWN_ASCII names exactly the ASCII programs of the built-in pack (each
    of which RE2 builds); a built-in regex changed without writing the list anew fails
    here."""
    from tests.engine.re2_known import pack_ascii_patterns
    from watcher.engine.re2_known import KNOWN_ASCII
    from watcher.engine.rx import utf8_digest

    assert {utf8_digest(t) for t in pack_ascii_patterns()} == KNOWN_ASCII, (
        "write the list anew: python -m tests.engine.re2_known")


@_SOURCES_ONLY
def test_a_known_ascii_program_waits_until_a_text_needs_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A built-in pattern's ASCII program is built when an ASCII text is first searched,
    and answers as one built at load does; a pattern the pack does not make (a user's,
    or a library list redefined) is built when its rule loads, as before, so one RE2
    cannot build is refused then."""
    import sys

    from watcher.engine import Engine, load_rules, rx

    made: list[tuple[str, int, str, str]] = []

    def unknown(ascii: str) -> bool:
        me = sys._getframe(1).f_locals["self"]
        made.append((me.pattern, me.flags, me.translated, ascii))
        return False

    monkeypatch.setattr(rx, "_known_ascii", unknown)
    Engine(load_rules(paths=[], builtin=True), [])
    monkeypatch.undo()
    assert len(made) > 50
    texts = ["", "ls -la", "cat tests/test_x.py", "final answer: 42", "Traceback (most recent "
             "call last):\n  File \"x.py\", line 3\nValueError: bad", "pytest -q tests/"]
    for pattern, flags, translated, ascii in made:
        known = rx.Pattern(pattern, flags, translated, ascii)
        assert known._amatch is None and known._match is None  # nothing built yet
        assert known._atest is None and known._test is None
        other = rx.Pattern(pattern, flags, translated + "|zzzz", ascii + "|zzzz")
        assert other._amatch is not None  # not the pack's: built at once
        with monkeypatch.context() as m:
            m.setattr(rx, "_known_ascii", lambda ascii: False)
            eager = rx.Pattern(pattern, flags, translated, ascii)  # as at load before
        assert eager._amatch is not None
        for text in texts:
            assert known.search(text) == eager.search(text), (pattern, text)
        assert known._atest and known._match is None and known._test is None



def test_search_asks_a_set_and_its_program_where_the_set_cannot_answer() -> None:
    """search() asks a one-pattern set (no reverse program to build); an empty answer
    (the set's scan failed: RE2 says so only that way) and a set RE2 would not build are
    answered by the program's own match, the same way."""
    p = Pattern(r"\bsed\s+-i[^\n]{0,200}(\btests?/|conftest\.py)")
    asked: list[bytes] = []
    program = p._amatch or p._ascii_match()
    p._amatch = lambda *a: (asked.append(a[1]), program(*a))[1]
    hit, miss = "sed -i s/a/b/ tests/test_x.py", "sed -i s/a/b/ src/x.py"
    assert p.search(hit) is not None and p.search(miss) is None
    assert p._atest and not asked  # answered by the set alone
    p._atest = lambda data: []  # a failed scan
    assert p.search(hit) is not None and p.search(miss) is None
    assert asked == [hit.encode(), miss.encode()]  # ... answered by the program
    q = Pattern("é[^\n]{0,50}x")
    q._test = False  # a set RE2 would not build
    assert q.search("é and x") is not None and q.search("é and y") is None
    assert q._match is not None
