"""The per-event half of :mod:`watcher.engine.scan`, compiled with the engine.

``scan.py`` translates rule patterns and builds the RE2 sets, once per rule set, and
stays interpreted (its tests replace parts of it). Running the sets over each event's
prepared text is hot: compiled (``setup.py``) and called from compiled code, it costs
no interpreted frame per text.
"""

from __future__ import annotations

from typing import Any


def set_hits(rset: Any, data: bytes) -> frozenset[int] | None:
    """Indices of the patterns of ``rset`` (a ``scan._Set``) that may match ``data``,
    or ``None`` when the scan could not run."""
    match = rset.match
    if match is None:
        return rset.always  # type: ignore[no-any-return]
    found = match(data)
    if len(found) <= 1:
        if not found:
            return None  # the sentinel always matches: the DFA gave up
        return rset.always  # type: ignore[no-any-return]
    ids = rset.ids
    sentinel = rset.sentinel
    out: set[int] = set(rset.always)
    for k in found:
        if k != sentinel:
            out.add(ids[k])
    return frozenset(out)


def text_hits(sets: Any, text: str) -> frozenset[int] | None:
    """:func:`set_hits` of ``text`` by a scanner's ``(ASCII, any text)`` sets."""
    if text.isascii():
        return set_hits(sets[0], text.encode("ascii"))
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: RE2 would not read them as `re` does
        return None
    return set_hits(sets[1], data)
