"""Whitespace folding (``collapse_ws`` is exactly ``" ".join(text.split())``) and the
``cosmetic`` key normaliser (the C one is exactly the Python passes).

Pure runs test the Python fallback; the compiled run (tests/test_compiled.py runs
this suite on the built wheel) tests the C fold in ``watcher/engine/_fold.c``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from watcher.engine import text as text_mod
from watcher.engine.detectors import keys
from watcher.engine.text import collapse_ws

# every character str.split() splits on in ASCII, the non-ASCII kinds, and letters
_CHARS = st.sampled_from(list(" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f") + ["\x85", "\u2003", "\u3000",
                                                                     "a", "b", "é", "…", "λ"])


@settings(max_examples=500, deadline=None)
@given(st.lists(_CHARS, max_size=40).map("".join))
def test_collapse_ws_is_split_and_join(text: str) -> None:
    assert collapse_ws(text) == " ".join(text.split())


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_collapse_ws_on_any_text(text: str) -> None:
    assert collapse_ws(text) == " ".join(text.split())


# ASCII only, long enough for the C fold's eight-byte steps and their edges: every
# whitespace kind, control characters that split() keeps inside a word, and letters
_ASCII_CHARS = st.sampled_from(list(" \t\n\r\x0b\x0c\x1c\x1f\x00\x01\x1b") + ["a", "bc", "d e"])


@settings(max_examples=1500, deadline=None)
@given(st.lists(_ASCII_CHARS, max_size=80).map("".join))
def test_collapse_ws_on_long_ascii_runs(text: str) -> None:
    assert collapse_ws(text) == " ".join(text.split())


@settings(max_examples=1000, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=90))
def test_lower_is_cpythons(text: str) -> None:
    assert text_mod.lower(text) == str.lower(text)


@pytest.mark.parametrize("text", ["", " ", "a", "a b", "  a  b  ", "x\n\ty", "é  x",
                                  "a\u2003b", "def f():\n    return 1\n" * 400])
def test_collapse_ws_examples(text: str) -> None:
    assert collapse_ws(text) == " ".join(text.split())


def test_c_fold_when_built() -> None:
    fold = text_mod._FOLD
    if fold is None:
        # pytest imports the package it finds first: the checkout's sources, which are never
        # compiled, whatever `pip install .` built and installed beside them
        where = Path(text_mod.__file__).resolve().parent.parent
        what = ("the sources in place, never compiled" if (where.parent / "setup.py").exists()
                else "a pure-Python install")
        pytest.skip(f"no C fold in the watcher package imported here ({where}: {what}); "
                    "tests/test_compiled.py runs this test on the built wheel")
    text = "already folded text"
    assert fold(text) is text  # nothing to fold: the text itself, its hash kept
    long = "a long line of words, each with one space between them, " * 3
    line = long.strip()  # past eight-byte steps, nothing to fold
    assert fold(line) is line
    assert fold(long + "\n") == long.strip()  # the gap at the very end
    low = text_mod._LOWER_ASCII
    assert low is not None  # built with the fold
    assert low(long) is long  # no capital: the text itself
    assert low("Mixed CASE text, Past EIGHT bytes") == "mixed case text, past eight bytes"
    with pytest.raises(TypeError, match="ASCII"):
        low("é")
    assert fold("x" * 5000 + "  y") == "x" * 5000 + " y"  # past the stack buffer
    with pytest.raises(TypeError, match="needs str"):
        fold(b"bytes")  # type: ignore[arg-type]


# the characters the cosmetic passes read, spaces (also in runs), and a few others
_COSMETIC_CHARS = st.sampled_from(list(" \"'`\\/;}],{ab\n\t") + ["  ", "é", "…"])


@settings(max_examples=1500, deadline=None)
@given(st.lists(_COSMETIC_CHARS, max_size=24).map("".join), st.booleans())
def test_cosmetic_is_the_python_passes(text: str, fold_first: bool) -> None:
    """The C normaliser (ASCII text, when built) gives what the Python passes give:
    on folded text (as after ``whitespace``) and on any text, told or not told that it
    is folded."""
    for t in (collapse_ws(text), text):
        for folded in ((True, False) if fold_first else (False,)):
            assert keys._cosmetic(t, folded) == keys._cosmetic_py(t, folded)


@pytest.mark.parametrize("text,want", [
    # a tool's arguments as the key reads them: the agent's quoting goes, its spaces stay
    ('{"cmd": "ls -la \\"/srv/out/\\""}', "{cmd:ls -la /srv/out}"),
    ("{\"cmd\": \"ls  -la '/srv/out'\"}", "{cmd:ls -la /srv/out}"),
    ('{"cmd": "ls -la /srv/out "}', "{cmd:ls -la /srv/out}"),  # a value's edge
    ('{"cmd": "cat a.py; "}', "{cmd:cat a.py}"),
    ("a / b", "a b"),  # the slash goes, and the two spaces it leaves are one
    ('x \\"y\\" z', "x y z"),
    ("echo 'a,b' /", "echo a,b"),
    ("grep 'a, b' f", "grep a, b f"),  # a change inside a quoted value stays:
    ("grep 'a,b' f", "grep a,b f"),  # these two differ
    ("' a'", "a"),  # a quote dropped at the start leaves no space there
    # the passes take bare double quotes as JSON's (normalise_step reads a text that is
    # not JSON apart: see below)
    ('ls -la "/srv/out"', "ls -la/srv/out"),
])
def test_cosmetic_examples(text: str, want: str) -> None:
    assert keys._cosmetic(text) == want == keys._cosmetic_py(text)


@pytest.mark.parametrize("text,want", [
    # a string field read as it is (a user's key such as arguments.cmd): every double
    # quote is the agent's, and goes with its spaces kept, as a single quote does
    ('ls -la "/srv/out/"', "ls -la /srv/out"),
    ('ls -la \\"/srv/out\\"', "ls -la /srv/out"),
    ('grep "a b" "f"', "grep a b f"),
    ('[ -f "/tmp/x" ] && echo "ok"', "[ -f /tmp/x ] && echo ok"),  # a shell test
    # JSON (key_text of a mapping or a list): its bare quotes are its structure
    ('{"cmd": "ls -la \\"/srv/out/\\""}', "{cmd:ls -la /srv/out}"),
    ('["bash", {"cmd": "ls"}]', "[bash, {cmd:ls}]"),  # as before
])
def test_cosmetic_step_reads_plain_text_quotes_as_the_agents(text: str, want: str) -> None:
    """Until 2026-12-03 a plain text key's bare double quotes were taken as JSON's:
    `ls -la "/srv/out"` read `ls -la/srv/out`, never the same as `ls -la /srv/out`."""
    assert keys.normalise_step(text, "cosmetic") == want
    assert keys.normalise_text(text.replace("-la", "-LA"), ("case", "cosmetic")) == want


def test_c_cosmetic_when_built() -> None:
    c = keys._COSMETIC_C
    if c is None:
        pytest.skip("no C normaliser in the watcher package imported here; "
                    "tests/test_compiled.py runs this test on the built wheel")
    text = "plain text already"
    assert c(text, True) is text  # nothing to drop: the text itself
    big = 'echo "x" ; ls /a/ ' * 600  # past the stack buffer, and its run of spaces path
    assert c(big, False) == keys._cosmetic_py(big, False)
    assert c("a  b  'c'", True) == keys._cosmetic_py("a  b  'c'", True)  # told, not folded
    with pytest.raises(ValueError, match="ASCII"):
        c("é", True)
    with pytest.raises(TypeError):
        c(b"bytes", True)  # type: ignore[arg-type]
