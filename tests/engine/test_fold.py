"""Whitespace folding: ``collapse_ws`` is exactly ``" ".join(text.split())``.

Pure runs test the Python fallback; the compiled run (tests/test_compiled.py runs
this suite on the built wheel) tests the C fold in ``watcher/engine/_fold.c``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from watcher.engine import text as text_mod
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
    assert fold("x" * 5000 + "  y") == "x" * 5000 + " y"  # past the stack buffer
    with pytest.raises(TypeError, match="needs str"):
        fold(b"bytes")  # type: ignore[arg-type]
