"""Run time: the prepared text a text test reads, and the shared scan that gates rules.

A :class:`TextSource` is one kind of prepared text (a field read, made text, bounded,
folded and lower-cased as a test says), made once per event for every rule that tests
it. A :class:`Gate` is a necessary condition of a rule's predicate answered by the one
RE2 scan of such a text: the engine asks it first, and most events never reach the
predicate. Both are built at load time (:mod:`watcher.engine.lang.predicates`).
"""

from __future__ import annotations

from typing import Any

from watcher.engine.rule import Getter
from watcher.engine.scan import Scanner
from watcher.engine.scanmatch import text_hits
from watcher.engine.text import (
    EXTRA_FOLDS,
    bound_text,
    cache_key,
    collapse_ws,
    event_texts,
    lower,
    unmark,
)
from watcher.events import to_text


class TextSource:
    """One kind of prepared text: a field read, made text, bounded and prepared
    (folded whitespace, lower case) as a text test says; cached per event."""

    def __init__(self, key: tuple[str, bool, bool], get: Getter) -> None:
        self.key = key  # (field expression, ignore_case, normalize_whitespace)
        self.get = get
        self.icase = key[1]
        self.nws = key[2]
        self.tkey = cache_key("text", *key)
        self.hkey = cache_key("hits", *key)
        self.scanner: Scanner | None = None  # the shared scan of this text, if any

    def prep(self, s: str) -> str:
        """Whitespace folded and lower-cased as the test says: lower() plus the two
        extra ASCII case equivalents of `re` (ı ~ i, ſ ~ s), so lower-cased text then
        matches exactly as IGNORECASE would."""
        if self.nws:
            s = collapse_ws(s)
        if not self.icase:
            return s
        s = lower(s)
        if "\u0131" in s or "\u017f" in s:  # rare: translate() is slow per character
            s = s.translate(EXTRA_FOLDS)
        return s

    def text(self, e: dict[str, Any], cache: dict[Any, Any]) -> str:
        t: str | None = cache.get(self.tkey)
        if t is None:
            v = self.get(e)
            t = "" if v is None else self.prep(bound_text(unmark(v) if isinstance(v, str)
                                                          else to_text(v)))
            cache[self.tkey] = t
        return t

    def hits(self, t: str, cache: dict[Any, Any]) -> frozenset[int] | None:
        """:meth:`scan` of this event's prepared text ``t``, made once per event for
        every rule that tests it (``cache`` is :func:`event_texts`)."""
        hits = cache.get(self.hkey, False)
        if hits is False:
            hits = cache[self.hkey] = self.scan(t)
        return hits  # type: ignore[no-any-return]

    def scan(self, t: str) -> frozenset[int] | None:
        """``self.scanner.hits(t)`` without its interpreted frame (see scanmatch)."""
        sc = self.scanner
        if sc is None:
            return None
        sets = sc._sets if sc._built == len(sc.patterns) else sc.ready()
        return None if sets is None else text_hits(sets, t)


class Gate:
    """A necessary condition of a predicate, answered by the shared RE2 scan.

    The predicate can only hold where its prepared text is not empty and the scan of
    that text reports, for each set in ``needs``, one of its patterns (or cannot
    answer). The engine asks the gate before the predicate: on most events the scan,
    made once for every rule testing that text, rules out a rule's patterns, and the
    predicate (its combinators, type and field tests) need not run at all.
    """

    def __init__(self, source: TextSource, needs: tuple[frozenset[int], ...]) -> None:
        self.source = source
        self.key = source.key
        self.needs = needs

    def useful(self) -> bool:
        """Whether the text is scanned at all (a scanner of few patterns never is)."""
        sc = self.source.scanner
        return sc is not None and len(sc.patterns) >= sc.min_patterns

    def open(self, e: dict[str, Any]) -> bool:
        """Whether the predicate may hold for ``e`` (``False``: it cannot)."""
        cache = event_texts(e)
        src = self.source
        t = src.text(e, cache)
        if not t:
            return False
        hits = src.hits(t, cache)
        if hits is None:  # no scan, or one that could not answer
            return True
        for need in self.needs:
            if need.isdisjoint(hits):
                return False
        return True
