"""One RE2 pass per text that tells which rule regexes might match it.

Each rule's own search (:class:`watcher.engine.rx.Pattern`) stays the judge of every
match. But it tries each pattern separately, and over tool arguments of a few
hundred characters a pack of shortcut patterns costs tens of microseconds per event
even when nothing matches (the common case). RE2's ``Set`` matches all patterns of
one text in a single DFA pass, so every regex test over the same prepared text
(e.g. lower-cased tool arguments) shares one scan; the rules' searches then run only
for the patterns the scan reported.

The scan must never miss a match, so each pattern is translated into a *superset*
for RE2 (``prefilter_pattern``): look-arounds are dropped, back-references become
``.*``, long counted repeats are loosened (they would bloat the DFA). Python's
classes are Unicode-aware and RE2's are ASCII, so there are two translations: an
exact one for ASCII text (``\\w``, ``\\s``, ``\\d``, ``\\b`` spelled out as Python
means them there), and a looser one for other text (any non-ASCII character may be
a word, space or digit character, and word boundaries are dropped). Patterns that
cannot be translated and text that is not valid Unicode fall back to each rule's
own search.
"""

from __future__ import annotations

import re
import threading
from re import _constants as _c  # type: ignore[attr-defined]
from typing import Any

import re2 as _re2  # google-re2

from watcher.engine import rxcache
from watcher.engine.rx import parse_regex
from watcher.engine.rxcache import persistent
from watcher.engine.scanmatch import text_hits

# Python's whitespace within ASCII (str.isspace): RE2's \s lacks \v and \x1c-\x1f
_SPACE = r"\t\n\x0b\f\r\x1c-\x1f "
_WORD = "0-9A-Za-z_"
_DIGIT = "0-9"
_ANY = r"(?s:.)"
_NEVER = r"[^\x00-\x{10FFFF}]"
MAX_COUNT = 8  # counted repeats above this become open-ended (a superset)
MAX_MEM = 64 << 20  # per scanner; RE2 allocates DFA states lazily
# Below this many patterns a scan costs more than it saves: a call into RE2 costs
# about 1 µs before the DFA reads a byte, and each rule's own search is
# already guarded by a substring test of its required literals (lang.regex.combine).
# Measured on the synthetic bench stream: the one-pattern scans of tool results and
# arguments cost 3.3-3.4 µs each per call.
RULE_SCAN_MIN_PATTERNS = 8


class Untranslatable(Exception):
    """The pattern uses a construct the translation does not know."""


@persistent("prefilter")  # kept between runs (rxcache)
def prefilter_pattern(pattern: str, flags: int = 0, *, ascii_text: bool = True) -> str:
    """An RE2 pattern matching wherever ``re.compile(pattern, flags)`` does.

    With ``ascii_text`` the translation holds for ASCII text only (and is tighter);
    without, for any text. Raises :class:`Untranslatable` for unknown constructs.
    """
    try:
        parsed = parse_regex(pattern, flags)
    except (re.error, RecursionError, ValueError) as exc:
        raise Untranslatable(str(exc)) from exc
    f = parsed.state.flags
    em = _Emitter(icase=bool(f & _c.SRE_FLAG_IGNORECASE),
                  dotall=bool(f & _c.SRE_FLAG_DOTALL),
                  multiline=bool(f & _c.SRE_FLAG_MULTILINE), loose=not ascii_text)
    body = em.seq(parsed.data, em.icase, em.dotall, em.multiline)
    return ("(?i)" if em.icase else "") + body


def _chr(ch: int) -> str:
    s = chr(ch)
    if s.isalnum() and s.isascii():
        return s
    return f"\\x{{{ch:x}}}"


# under IGNORECASE Python also matches these non-ASCII letters to ASCII ones
_FOLDS = {ord("i"): "iI\\x{130}\\x{131}", ord("k"): "kK\\x{212a}", ord("s"): "sS\\x{17f}"}
_NON_ASCII = "\\x{80}-\\x{10ffff}"
_SPECIAL_FOLDS = "\\x{130}\\x{131}\\x{17f}\\x{212a}"


class _Emitter:
    def __init__(self, icase: bool, dotall: bool, multiline: bool, loose: bool) -> None:
        self.icase = icase
        self.dotall = dotall
        self.multiline = multiline
        self.loose = loose  # text may hold non-ASCII characters

    def seq(self, items: Any, icase: bool, dotall: bool, ml: bool) -> str:
        return "".join(self.node(op, av, icase, dotall, ml) for op, av in items)

    def node(self, op: Any, av: Any, icase: bool, dotall: bool, ml: bool) -> str:
        c = _c
        if op is c.LITERAL:
            if av > 127 and icase:
                return _ANY  # may fold onto an ASCII letter (e.g. U+017F ~ s)
            if icase and self.loose and chr(av).lower() in "iks":
                return f"[{_FOLDS[ord(chr(av).lower())]}]"
            return _chr(av)
        if op is c.NOT_LITERAL:
            return _ANY if av > 127 and icase else f"[^{_chr(av)}]"
        if op is c.ANY:
            return _ANY if dotall else "."
        if op is c.IN:
            return self.charset(av, icase)
        if op is c.BRANCH:
            return "(?:" + "|".join(self.seq(alt, icase, dotall, ml) for alt in av[1]) + ")"
        if op is c.SUBPATTERN:
            _group, add, delete, sub = av
            i2 = (icase or bool(add & c.SRE_FLAG_IGNORECASE)) and not (
                delete & c.SRE_FLAG_IGNORECASE)
            d2 = (dotall or bool(add & c.SRE_FLAG_DOTALL)) and not (delete & c.SRE_FLAG_DOTALL)
            m2 = (ml or bool(add & c.SRE_FLAG_MULTILINE)) and not (
                delete & c.SRE_FLAG_MULTILINE)
            inner = self.seq(sub, i2, d2, m2)
            if i2 != icase:
                return ("(?i:" if i2 else "(?-i:") + inner + ")"
            return "(?:" + inner + ")"
        if op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
            lo, hi, sub = av
            inner = "(?:" + self.seq(sub, icase, dotall, ml) + ")"
            lo2 = min(lo, MAX_COUNT)
            if hi is c.MAXREPEAT or hi > MAX_COUNT or lo > MAX_COUNT:
                return inner + ("*" if lo2 == 0 else "+" if lo2 == 1 else f"{{{lo2},}}")
            return inner + f"{{{lo},{hi}}}"
        if op is c.AT:
            return self.at(av, ml)
        if op is c.ATOMIC_GROUP:
            return "(?:" + self.seq(av, icase, dotall, ml) + ")"
        if op in (c.ASSERT, c.ASSERT_NOT):
            return ""  # dropping a look-around only widens the match
        if op is c.GROUPREF:
            return r"(?s:.*)"
        if op is c.GROUPREF_EXISTS:
            _g, yes, no = av
            alts = [self.seq(yes, icase, dotall, ml)]
            alts.append(self.seq(no, icase, dotall, ml) if no is not None else "")
            return "(?:" + "|".join(alts) + ")"
        raise Untranslatable(str(op))

    def at(self, where: Any, ml: bool) -> str:
        c = _c
        if where is c.AT_BEGINNING:
            return "(?m:^)" if ml else r"\A"
        if where is c.AT_BEGINNING_STRING:
            return r"\A"
        if where is c.AT_END:
            return "(?m:$)" if ml else r"(?:\n?\z)"
        if where is c.AT_END_STRING:
            return r"\z"
        if where in (c.AT_BOUNDARY, c.AT_NON_BOUNDARY):
            if self.loose:  # a non-ASCII neighbour may or may not be a word character
                return ""
            return r"\b" if where is c.AT_BOUNDARY else r"\B"
        raise Untranslatable(str(where))

    def charset(self, items: Any, icase: bool) -> str:
        c = _c
        negate = any(op is c.NEGATE for op, _ in items)
        # in loose mode a non-ASCII character might be in any category: a positive set
        # takes them all in, a negated one excludes none of them (both widen the match)
        widen = self.loose and not negate
        parts: list[str] = []
        extra: list[str] = []  # negated categories, as alternatives outside the class
        for op, av in items:
            if op is c.NEGATE:
                continue
            if op is c.LITERAL:
                if av > 127 and icase:
                    return _ANY
                if icase and self.loose and chr(av).lower() in "iks":
                    parts.append(_FOLDS[ord(chr(av).lower())])
                else:
                    parts.append(_chr(av))
            elif op is c.RANGE:
                lo, hi = av
                if hi > 127 and icase:
                    return _ANY
                parts.append(f"{_chr(lo)}-{_chr(hi)}")
                if icase and self.loose:
                    parts.append(_SPECIAL_FOLDS)
            elif op is c.CATEGORY:
                pos = {c.CATEGORY_DIGIT: _DIGIT, c.CATEGORY_WORD: _WORD,
                       c.CATEGORY_SPACE: _SPACE}.get(av)
                neg = {c.CATEGORY_NOT_DIGIT: _DIGIT, c.CATEGORY_NOT_WORD: _WORD,
                       c.CATEGORY_NOT_SPACE: _SPACE}.get(av)
                if pos is not None:
                    parts.append(pos + (_NON_ASCII if widen else ""))
                elif neg is not None:
                    extra.append(f"[^{neg}]")
                else:
                    raise Untranslatable(str(av))
            else:
                raise Untranslatable(str(op))
        if negate:
            if extra:
                return _ANY  # [^\\S...]: a superset is enough
            return f"[^{''.join(parts)}]" if parts else _ANY
        alts = ([f"[{''.join(parts)}]"] if parts else []) + extra
        if not alts:
            return _NEVER
        return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


class _Set:
    """One compiled RE2 set, and what :func:`~watcher.engine.scanmatch.set_hits` reads to
    tell which of its patterns may match, by the caller's index."""

    def __init__(self, patterns: list[tuple[str, int]], ascii_text: bool) -> None:
        always: set[int] = set()
        ids: dict[int, int] = {}
        opts = _re2.Options()
        opts.max_mem = MAX_MEM
        opts.log_errors = False
        rset = _re2.Set.SearchSet(opts)
        for i, (pattern, flags) in enumerate(patterns):
            try:
                k = rset._set.Add(prefilter_pattern(pattern, flags,
                                                    ascii_text=ascii_text).encode())
            except Exception:  # noqa: BLE001 - untranslatable or refused: ask re instead
                k = -1
            if k < 0:
                always.add(i)
            else:
                ids[k] = i
        # a pattern that matches every text: RE2 answers an empty list both for "no
        # pattern matched" and for "the DFA ran out of memory"; with this one in the
        # set, an empty answer can only mean the scan failed. End of text (rather than
        # the empty pattern, which matches at once and cost the DFA 3 % more work per
        # event) keeps the scan as cheap as without it.
        self.sentinel = rset._set.Add(rb"\z")
        try:
            rset.Compile()
        except Exception:  # noqa: BLE001 - e.g. too big for max_mem
            rset = None
            always = set(range(len(patterns)))
        self.match = rset._set.Match if rset is not None else None
        self.ids = [ids.get(k, -1) for k in range(max(ids, default=-1) + 1)]
        self.always = frozenset(always)


class Scanner:
    """The patterns tested against one kind of prepared text, matched in one pass.

    Patterns are added while rules compile; the RE2 sets are built on first use (and
    rebuilt if patterns were added since). ``hits(text)`` returns the indices of
    patterns that may match (a superset of those that do), or ``None`` when the scan
    cannot answer for this text. A scanner holding fewer than ``min_patterns``
    patterns never scans (always ``None``: the callers run each rule's search).
    """

    def __init__(self, min_patterns: int = 1) -> None:
        self.patterns: list[tuple[str, int]] = []
        self.min_patterns = min_patterns
        self._sets: tuple[_Set, _Set] | None = None
        self._built = -1
        self._lock = threading.Lock()

    def add(self, pattern: str, flags: int = 0) -> int:
        self.patterns.append((pattern, flags))
        return len(self.patterns) - 1

    def _build(self) -> None:
        with self._lock:
            if self._built != len(self.patterns):
                pats = list(self.patterns)
                self._sets = (None if len(pats) < self.min_patterns else
                              (_Set(pats, ascii_text=True), _Set(pats, ascii_text=False)))
                self._built = len(pats)
                rxcache.flush()  # the translations made, for the next run

    def hits(self, text: str) -> frozenset[int] | None:
        sets = self.ready()
        return None if sets is None else text_hits(sets, text)

    def ready(self) -> tuple[_Set, _Set] | None:
        """The built sets, ``(ASCII text, any text)``, or ``None`` when this scanner
        does not scan (too few patterns): what :func:`text_hits` reads."""
        if self._built != len(self.patterns):
            self._build()
        return self._sets
