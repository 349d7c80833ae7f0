"""Key text: how repeat and unseen rules read the fields they compare.

A key is read from the event's whole values, normalised step by step (whitespace,
case, numbers, paths) and cached for the current event under every prefix of its
normalisers, so rules reading the same field through the same first steps share the
work.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

from watcher.engine.detectors.base import key_text, whole_value
from watcher.engine.rx import Pattern
from watcher.engine.text import c_text_function, cache_key, collapse_ws, lower, unmark
from watcher.events import Event

NUM: Final = re.compile(r"\d+(?:\.\d+)?")
# on RE2: in `re` this pattern is quadratic in a long word without a slash
_PATHRX: Final = Pattern(r"(?:[A-Za-z]:)?(?:[\w.~-]*/)+[\w.-]*")
NORMALISERS = ("whitespace", "case", "numbers", "paths", "cosmetic")
# what the `cosmetic` normaliser drops (plain string operations: it runs on every tool
# call of the near-identical rules): the agent's quoting (an escaped double quote, a
# single quote, a backtick: the spaces beside them stay, so `ls '/srv/out'` and
# `ls /srv/out` are one command), bare double quotes with the spaces beside them (in
# a JSON-rendered key such as a tool's arguments those are its structure, `": "`, and
# the edges of its string values, `"ls "`), and a slash or semicolon ending a word or
# the text. Until 2026-12-03 every quote took its neighbouring spaces with it, which
# made `ls '/srv/out'` read `ls/srv/out` against `ls /srv/out`: alike, never the same.
# (the slash or semicolon each end pair starts with, what it replaces, by what), in order
_ENDS: Final = (("/", "/ ", " "), (";", "; ", " "), ("/", "/}", "}"), (";", ";}", "}"),
                ("/", "/]", "]"), ("/", "/,", ","))


def normalise_text(text: str, steps: tuple[str, ...]) -> str:
    """Apply repeat-key normalisers in order (see ``NORMALISERS``)."""
    for k in range(len(steps)):
        text = normalise_step(text, steps[k], folded_before(steps, k))
    return text


def folded_before(steps: tuple[str, ...], k: int) -> bool:
    """Whether the text ``steps[k]`` reads is whitespace-folded: ``whitespace`` came
    before it with only ``case`` steps since (lower-casing makes no whitespace)."""
    while k > 0:
        k -= 1
        if steps[k] == "whitespace":
            return True
        if steps[k] != "case":
            return False
    return False


def normalise_step(text: str, step: str, folded: bool = False) -> str:
    """One repeat-key normaliser (see ``NORMALISERS``); ``folded``: the text is known to
    be whitespace-folded already (:func:`folded_before`)."""
    if "…" in text:  # (no scan of a one-byte text: the mark cannot be in it)
        # the server's truncation mark compares as "..."; one non-ASCII character
        # would also double the size of every stored key
        text = text.replace("…", "...")
    if step == "whitespace":
        return collapse_ws(text)
    if step == "case":
        return lower(text)
    if step == "paths":
        return _PATHRX.sub("<path>", text)
    if step == "numbers":
        return NUM.sub("#", text)
    if step == "cosmetic":
        # quoting, a trailing slash or semicolon, spacing: in a tool's arguments
        # `ls -la '/srv/out/'`, `ls -la \"/srv/out\"` and `ls  -la /srv/out` read
        # alike (see _COSMETIC above); a change inside a quoted value, such as "a,b" vs
        # "a, b", is not cosmetic and stays
        if '"' in text and not _json_rendered(text):
            # a bare double quote is JSON's own only in JSON: a key text that does not
            # open as JSON does (a string field such as ``arguments.cmd``, read as it
            # is) holds the agent's quoting alone, which goes like a single quote
            text = text.replace('\\"', "").replace('"', "")
        return _cosmetic(text, folded)
    return text


def _json_rendered(text: str) -> bool:
    """Whether a key text opens as ``key_text`` renders a mapping or a list (JSON, with
    no space after its first bracket: a shell's ``[ -f x ]`` or ``{ a; }`` has one)."""
    return text[:1] in ("{", "[") and text[1:2] != " "


# the C normaliser (``watcher/engine/_fold.c``), when it was built; else ``None``
_COSMETIC_C: Final[Callable[[str, bool], str] | None] = c_text_function("cosmetic")


def _cosmetic(text: str, folded: bool = False) -> str:
    """The ``cosmetic`` normaliser: quoting, a trailing slash or semicolon and spacing
    dropped (whitespace collapsed first, unless it is already: a ``whitespace`` step
    before this one leaves no run of spaces and no newline, and ``folded`` says so
    without looking). ASCII text takes the C normaliser, the same passes in one (a
    500-character command: 5.7 us here, 2.2 us in C: the dozen substring tests below
    read every byte each)."""
    if _COSMETIC_C is not None and text.isascii():
        return _COSMETIC_C(text, folded)
    return _cosmetic_py(text, folded)


def _cosmetic_py(text: str, folded: bool = False) -> str:
    """:func:`_cosmetic` in Python (any text; the C one's reference in its tests)."""
    if not folded and ("  " in text or "\n" in text or "\t" in text or text[:1] == " "):
        text = collapse_ws(text)
    dq = '"' in text
    sq = "'" in text
    bq = "`" in text
    if dq or sq or bq:
        # str.translate leaves its fast path at the first character it deletes (and
        # then maps each character through a dict): three replaces cost a tenth of it
        if dq:
            if '\\"' in text:  # a quote escaped in JSON: the agent's, spaces kept
                text = text.replace('\\"', "")
            if '"' in text:  # bare ones: JSON's own, and the spaces beside them
                if ' "' in text:
                    text = text.replace(' "', '"')
                if '" ' in text:
                    text = text.replace('" ', '"')
                text = text.replace('"', "")
        if sq:
            text = text.replace("'", "")
        if bq:
            text = text.replace("`", "")
    slash = "/" in text
    semi = ";" in text
    if slash or semi:  # every end pair starts with one (and none makes one)
        for c, a, b in _ENDS:
            if (slash if c == "/" else semi) and a in text:
                text = text.replace(a, b)
    while text[-1:] in ("/", ";") and text:
        text = text[:-1]
    # dropping a quote can leave two spaces side by side (`a " b`) or one at an end
    return collapse_ws(text) if "  " in text or text[-1:] == " " or text[:1] == " " else text


def part_text(e: Event, cache: dict[Any, Any], name: str, steps: tuple[str, ...]) -> str:
    """Field ``name`` of the event as key text after the normalisers ``steps``.

    Cached for the current event under every prefix of ``steps``: the repeat rules and
    the unseen rule read the same fields (``arguments``, ``result``) through the same
    first normalisers, and each field is normalised once per event.
    """
    return part_chain(e, cache, name, steps, part_keys(name, steps))


# cache-key tuples by (kind, names, normalisers): made once and shared by every
# sample's rule states (a sample's state holds references, not copies)
_KEYS: dict[tuple[str, tuple[str, ...], tuple[str, ...]], tuple[str, ...]] = {}


def memo_keys(kind: str, names: tuple[str, ...], steps: tuple[str, ...]) -> tuple[str, ...]:
    got = _KEYS.get((kind, names, steps))
    if got is None:
        got = _KEYS[(kind, names, steps)] = tuple(
            cache_key(kind, *names, steps[:k]) for k in range(len(steps) + 1))
    return got


def part_keys(name: str, steps: tuple[str, ...]) -> tuple[str, ...]:
    """The cache keys of :func:`part_chain`: ``[k]`` holds the text after ``steps[:k]``."""
    return memo_keys("part", (name,), steps)


def part_chain(e: Event, cache: dict[Any, Any], name: str, steps: tuple[str, ...],
               keys: tuple[Any, ...]) -> str:
    """:func:`part_text` with its cache keys made beforehand (by :func:`part_keys`).

    Repeat rules read several fields through several normalisers on every event they
    match; building the keys once per rule rather than per call saves a tuple and a
    hash per lookup. Starts from the longest prefix of ``steps`` already done.
    """
    n = len(steps)
    t: str | None = cache.get(keys[n])
    if t is not None:
        return t
    k = n - 1
    while k >= 0:
        t = cache.get(keys[k])
        if t is not None:
            break
        k -= 1
    if t is None:
        v = whole_value(e, name)
        t = "\x00" if v is None else unmark(v) if type(v) is str else key_text(v)
        cache[keys[0]] = t
        k = 0
    while k < n:
        t = normalise_step(t, steps[k], folded_before(steps, k))
        k += 1
        cache[keys[k]] = t
    return t
