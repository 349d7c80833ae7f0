"""Run-time text helpers: what every event's text goes through before a rule reads it.

Bounded views of agent text (:func:`bound_text`), CPython-exact lower-casing, the
whitespace fold (C when built), the truncation mark read as "...", and the per-event
caches that let every rule testing the same text share one preparation of it.
Nothing here parses rules: :mod:`watcher.engine.lang` does that, once, at load time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

HEAD_BYTES: Final = 4096
TAIL_BYTES: Final = 4096


def bound_text(text: str) -> str:
    """The part of agent text a regex may scan: first and last 4 KB."""
    if len(text) <= HEAD_BYTES + TAIL_BYTES:
        return text
    return text[:HEAD_BYTES] + "\n...\n" + text[-TAIL_BYTES:]  # ASCII: see engine.scan


_str_lower: Final = str.lower  # called as an object, so compiled code runs CPython's own


def c_text_function(name: str) -> Any:
    """Function ``name`` of the C text helpers (``watcher/engine/_fold.c``), when they
    were built (``INSPECT_WATCH_PURE=1`` builds neither them nor the compiled engine);
    else ``None``. Each caller types what it takes."""
    try:
        from watcher.engine import _fold  # type: ignore[attr-defined]
    except ImportError:
        return None
    return getattr(_fold, name, None)


_LOWER_ASCII: Final[Callable[[str], str] | None] = c_text_function("lower_ascii")


def lower(text: str) -> str:
    """``text.lower()`` exactly as CPython does it.

    Compiled by mypyc, ``text.lower()`` maps characters one by one and lower-cases a
    final capital sigma to σ where CPython gives ς; compiled and pure engines must read
    the same text. ASCII text takes the C one where it was built: eight bytes a step,
    and the text itself when it has no capital (its hash kept); mypyc's loop was 4 %
    of the engine's instructions on tool calls.
    """
    if text.isascii():
        return _LOWER_ASCII(text) if _LOWER_ASCII is not None else text.lower()
    return _str_lower(text)


CUT_MARK: Final = "..."  # how the engine reads the control channel's truncation mark "…"


def unmark(text: str) -> str:
    """``text`` with the control channel's truncation mark (the "…" ending a cut text)
    read as "...".

    The one non-ASCII character would make an ASCII text a two-byte string, which
    every ``lower()``, ``split()`` and scan of it then handles at several times the
    cost; rules see the mark as "..." (so ``foo$`` still does not match a cut text).
    """
    if text[-1:] == "…":  # compiled, cheaper than endswith (a cached one-char string)
        return text[:-1] + CUT_MARK
    return text


# the two extra ASCII case equivalents of `re` (ı ~ i, ſ ~ s), applied after lower()
EXTRA_FOLDS: Final = {0x131: "i", 0x17F: "s"}


def cache_key(kind: str, *parts: object) -> str:
    """A per-event cache key: a string, whose hash Python keeps, where a tuple of the
    same parts is hashed anew (element by element) on every lookup. ``repr`` keeps
    distinct parts distinct."""
    return kind + repr(parts)


_FOLD: Final[Callable[[str], str] | None] = c_text_function("collapse_ws")


def collapse_ws(text: str) -> str:
    """``" ".join(text.split())``: runs of whitespace as one space, none at the ends
    (what ``normalize_whitespace`` text tests, templates and repeat keys read).

    The C fold does it in one pass over the text's bytes: code and command output
    are full of newlines and indentation, and splitting them into a string per word
    only to join them again cost a tenth of the engine's time on tool calls.

    Without it: most tool arguments (one-line commands, JSON) are collapsed already;
    telling so by a few substring tests costs a third of splitting them into words
    and joining them again, and returns the text itself (its hash, once computed, is
    kept). The tests: no ASCII whitespace but the space (what ``split()`` splits on
    besides it), no run of spaces, no space at either end; the non-ASCII kinds go the
    long way.
    """
    if _FOLD is not None:
        return _FOLD(text)
    if (text.isascii() and "\n" not in text and "  " not in text and text[:1] != " "
            and text[-1:] != " " and "\t" not in text and "\r" not in text
            and "\x0b" not in text and "\x0c" not in text and "\x1c" not in text
            and "\x1d" not in text and "\x1e" not in text and "\x1f" not in text):
        return text
    return " ".join(text.split())


# The last event's prepared texts, keyed by (field, ignore_case, normalize_whitespace).
# Replaced as a whole tuple, so a reader always sees texts of the event it holds.
_TEXT_CACHE: Final[list[tuple[Any, dict[Any, Any]]]] = [(None, {})]


def event_texts(e: dict[str, Any]) -> dict[Any, Any]:
    """The prepared texts (and scan hits) of event ``e``, shared by every rule that
    tests it; a new event replaces the last one's."""
    cur = _TEXT_CACHE[0]
    if cur[0] is not e:
        cur = (e, {})
        _TEXT_CACHE[0] = cur
    return cur[1]
