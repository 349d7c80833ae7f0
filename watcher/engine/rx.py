"""Rule regexes in linear time: Python's syntax and meaning, matched by RE2.

Agent text is untrusted, and Python's ``re`` backtracks: ``^a*a*a*a*a*a*Z``,
``.*foo.*bar.*baz`` or ``x\\s*\\s*\\s*\\s*$`` over 8 KB of agent text held a watcher for
minutes, and no shape check catches every such pattern. RE2 never backtracks (its cost
is linear in the text), so every rule regex runs on RE2.

A pattern is written (and parsed, for its errors) as a Python regex and translated
into RE2 syntax with Python's meaning kept: ``\\w``, ``\\d`` and ``\\s`` as Python reads
them in Unicode text, ``$`` also before a final newline, the four extra case-insensitive
letters of ``re`` (İ ı ſ K). What RE2 cannot do is refused when the rule loads
(:class:`Unsupported`, W122): look-arounds, back-references, conditional groups,
possessive repeats and atomic groups, repeat counts above 1000, and a ``$`` that more
pattern follows. One difference remains: RE2's ``\\b`` and ``\\B`` take only ASCII
letters, digits and ``_`` as word characters (Python's take every Unicode one); the
two agree wherever a boundary has an ASCII character on both sides.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from re import _constants as _c  # type: ignore[attr-defined]
from re import _parser as _p  # type: ignore[attr-defined]
from typing import Any, Final

import re2 as _re2

from watcher.engine.re2_known import KNOWN_ASCII, KNOWN_UTF8
from watcher.engine.rxcache import persistent

MAX_REPEAT: Final = 1000  # RE2's bound on a counted repeat
MAX_MEM: Final = 64 << 20  # per pattern; RE2 builds its DFA states lazily within it

# Python's classes in Unicode text (checked against every code point by
# tests/engine/test_rx.py): \w is a letter, a number or "_", \d a decimal digit
_WORD = r"\p{L}\p{N}_"
_DIGIT = r"\p{Nd}"
_SPACE = (r"\t\n\x0b\f\r\x1c-\x1f \x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}"
          r"\x{202f}\x{205f}\x{3000}")
_ASCII_WORD = "0-9A-Za-z_"
_ASCII_DIGIT = "0-9"
_ASCII_SPACE = r"\t\n\x0b\f\r "
# the same classes as Python reads them in an ASCII text (its \s there includes \x1c-\x1f)
_IN_ASCII_SPACE = r"\t\n\x0b\f\r\x1c-\x1f "
# in a translation for ASCII texts: no ASCII character (nor, in Latin-1, one of them)
_NEVER: Final = r"[^\x{0}-\x{7f}]"
_ANY_CHAR: Final = r"(?s:.)"
# under IGNORECASE Python also matches these non-ASCII letters to i, k and s
_FOLDS = {"i": r"iI\x{130}\x{131}", "k": r"kK\x{212a}", "s": r"sS\x{17f}"}


class Unsupported(Exception):
    """A construct RE2 cannot match as Python would (the message says which)."""


def _chr(ch: int) -> str:
    s = chr(ch)
    if s.isascii() and s.isalnum():
        return s
    return f"\\x{{{ch:x}}}"


@lru_cache(maxsize=1024)
def parse_regex(pattern: str, flags: int = 0) -> Any:
    """Python's parse of a regex (``re._parser.parse``), made once per process.

    Loading the built-in pack parsed each of its 188 distinct regexes 2.6 times on
    average (validating it, translating it for RE2 for ASCII and for any text, finding
    its literals, the failure library's first characters). Every caller reads the tree
    and none changes it. Errors (``re.error``, ``RecursionError``) are raised each time.
    """
    return _p.parse(pattern, flags)


@persistent("translate")  # kept between runs (rxcache): loading reads it for every regex
def translate(pattern: str, flags: int = 0, ascii_text: bool = False) -> str:
    """RE2 syntax for ``re.compile(pattern, flags)``, matching where it matches.

    With ``ascii_text`` the translation holds for ASCII texts only, and names no
    character outside ASCII (a non-ASCII literal never matches; classes keep their
    ASCII members): compiled for Latin-1 it is a program a fraction of the size of the
    UTF-8 one (``\\w`` is 15 instructions there, 1,347 in UTF-8), built and matched
    faster. Raises :class:`Unsupported` for what RE2 cannot match the same way, and
    ``re.error`` (or ``RecursionError``) for what Python cannot parse.
    """
    parsed = parse_regex(pattern, flags)
    f = parsed.state.flags
    if f & _c.SRE_FLAG_ASCII and f & _c.SRE_FLAG_IGNORECASE:
        raise Unsupported("case-insensitive ASCII-only matching (RE2 folds Unicode)")
    em = _Exact(ascii=bool(f & _c.SRE_FLAG_ASCII), ascii_text=ascii_text)
    body = em.seq(list(parsed), bool(f & _c.SRE_FLAG_IGNORECASE),
                  bool(f & _c.SRE_FLAG_DOTALL), bool(f & _c.SRE_FLAG_MULTILINE), False)
    return "(?i:" + body + ")" if f & _c.SRE_FLAG_IGNORECASE else body


def _consumes(op: Any, av: Any) -> bool:
    """Whether a parsed item can match a non-empty text."""
    c = _c
    if op is c.AT or op in (c.ASSERT, c.ASSERT_NOT):
        return False
    if op is c.SUBPATTERN:
        return any(_consumes(o, a) for o, a in av[-1])
    if op is c.BRANCH:
        return any(any(_consumes(o, a) for o, a in alt) for alt in av[1])
    if op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
        return bool(av[1]) and any(_consumes(o, a) for o, a in av[2])
    return True


class _Exact:
    def __init__(self, ascii: bool, ascii_text: bool = False) -> None:
        self.ascii = ascii
        # translating for ASCII texts only: Python's extra case folds (non-ASCII
        # letters) cannot occur there, nor can any non-ASCII character
        self.ascii_text = ascii_text
        self.folds = not ascii and not ascii_text

    def seq(self, items: list[Any], icase: bool, dotall: bool, ml: bool, tail: bool) -> str:
        """``tail``: something that can consume text may follow the sequence."""
        out = []
        for k, (op, av) in enumerate(items):
            after = tail or any(_consumes(o, a) for o, a in items[k + 1:])
            out.append(self.node(op, av, icase, dotall, ml, after))
        return "".join(out)

    def node(self, op: Any, av: Any, icase: bool, dotall: bool, ml: bool, tail: bool) -> str:
        c = _c
        if op is c.LITERAL:
            if self.ascii_text and av > 0x7F:
                return _NEVER
            fold = _FOLDS.get(chr(av).lower()) if icase and self.folds else None
            return f"[{fold}]" if fold is not None and chr(av).isascii() else _chr(av)
        if op is c.NOT_LITERAL:
            if self.ascii_text and av > 0x7F:
                return _ANY_CHAR
            fold = _FOLDS.get(chr(av).lower()) if icase and self.folds else None
            return f"[^{fold if fold is not None and chr(av).isascii() else _chr(av)}]"
        if op is c.ANY:
            return r"(?s:.)" if dotall else r"(?-s:.)"
        if op is c.IN:
            return self.charset(av, icase)
        if op is c.BRANCH:
            return "(?:" + "|".join(self.seq(list(alt), icase, dotall, ml, tail)
                                    for alt in av[1]) + ")"
        if op is c.SUBPATTERN:
            _group, add, delete, sub = av
            if (add | delete) & (c.SRE_FLAG_ASCII | c.SRE_FLAG_LOCALE | c.SRE_FLAG_UNICODE):
                raise Unsupported("inline ASCII, LOCALE or UNICODE flags on a group")
            i2 = (icase or bool(add & c.SRE_FLAG_IGNORECASE)) and not (
                delete & c.SRE_FLAG_IGNORECASE)
            d2 = (dotall or bool(add & c.SRE_FLAG_DOTALL)) and not (delete & c.SRE_FLAG_DOTALL)
            m2 = (ml or bool(add & c.SRE_FLAG_MULTILINE)) and not (
                delete & c.SRE_FLAG_MULTILINE)
            inner = self.seq(list(sub), i2, d2, m2, tail)
            if i2 != icase:
                return ("(?i:" if i2 else "(?-i:") + inner + ")"
            return "(?:" + inner + ")"
        if op in (c.MAX_REPEAT, c.MIN_REPEAT):
            lo, hi, sub = av
            if lo > MAX_REPEAT or (hi is not c.MAXREPEAT and hi > MAX_REPEAT):
                raise Unsupported(f"a repeat count above {MAX_REPEAT}")
            again = hi is c.MAXREPEAT or hi > 1  # the repeat itself may follow each round
            inner = "(?:" + self.seq(list(sub), icase, dotall, ml, tail or again) + ")"
            if hi is c.MAXREPEAT:
                return inner + ("*" if lo == 0 else "+" if lo == 1 else f"{{{lo},}}")
            return inner + f"{{{lo},{hi}}}"
        if op is c.AT:
            return self.at(av, ml, tail)
        if op in (c.POSSESSIVE_REPEAT, c.ATOMIC_GROUP):
            raise Unsupported("possessive repeats and atomic groups")
        if op in (c.ASSERT, c.ASSERT_NOT):
            raise Unsupported("look-ahead and look-behind assertions")
        if op in (c.GROUPREF, c.GROUPREF_EXISTS):
            raise Unsupported("back-references and conditional groups")
        raise Unsupported(f"the regex construct {op}")

    def at(self, where: Any, ml: bool, tail: bool) -> str:
        c = _c
        if where is c.AT_BEGINNING:
            return "(?m:^)" if ml else r"\A"
        if where is c.AT_BEGINNING_STRING:
            return r"\A"
        if where is c.AT_END:
            if ml:
                return "(?m:$)"
            if tail:
                raise Unsupported("a `$` that more pattern follows")
            return r"(?:\n?\z)"  # Python's $ also matches before a final newline
        if where is c.AT_END_STRING:
            return r"\z"
        if where is c.AT_BOUNDARY:
            return r"\b"
        if where is c.AT_NON_BOUNDARY:
            return r"\B"
        raise Unsupported(f"the anchor {where}")

    def charset(self, items: Any, icase: bool) -> str:
        c = _c
        negate = any(op is c.NEGATE for op, _ in items)
        word, digit, space = ((_ASCII_WORD, _ASCII_DIGIT, _ASCII_SPACE) if self.ascii
                              else (_ASCII_WORD, _ASCII_DIGIT, _IN_ASCII_SPACE)
                              if self.ascii_text else (_WORD, _DIGIT, _SPACE))
        top = 0x7F if self.ascii_text else 0x10FFFF
        parts: list[str] = []
        negated: list[str] = []  # \D, \S, \W: classes of their own
        for op, av in items:
            if op is c.NEGATE:
                continue
            if op is c.LITERAL:
                if av > top:
                    continue
                fold = _FOLDS.get(chr(av).lower()) if icase and self.folds else None
                parts.append(fold if fold is not None and chr(av).isascii() else _chr(av))
            elif op is c.RANGE:
                lo, hi = av
                if lo > top:
                    continue
                parts.append(f"{_chr(lo)}-{_chr(min(hi, top))}")
                if icase and self.folds:
                    for letter, fold in _FOLDS.items():
                        if lo <= ord(letter) <= hi or lo <= ord(letter.upper()) <= hi:
                            parts.append(fold)
            elif op is c.CATEGORY:
                pos = {c.CATEGORY_DIGIT: digit, c.CATEGORY_WORD: word,
                       c.CATEGORY_SPACE: space}.get(av)
                neg = {c.CATEGORY_NOT_DIGIT: digit, c.CATEGORY_NOT_WORD: word,
                       c.CATEGORY_NOT_SPACE: space}.get(av)
                if pos is not None:
                    parts.append(pos)
                elif neg is not None:
                    negated.append(neg)
                else:
                    raise Unsupported(f"the class {av}")
            else:
                raise Unsupported(f"the class item {op}")
        if negate:
            if negated and (parts or len(negated) > 1):
                raise Unsupported("a negated class holding \\D, \\S or \\W with more")
            if negated:  # [^\D] is \d
                return f"[{negated[0]}]"
            if not parts:  # every member was outside ASCII: any ASCII character
                return _ANY_CHAR
            return f"[^{''.join(parts)}]"
        alts = ([f"[{''.join(parts)}]"] if parts else []) + [f"[^{n}]" for n in negated]
        if not alts:  # every member was outside ASCII: none can occur
            return _NEVER
        return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


def _options(latin1: bool = False) -> Any:
    opts = _re2.Options()
    opts.max_mem = MAX_MEM
    opts.log_errors = False
    opts.never_capture = True
    if latin1:
        opts.encoding = _re2.Options.Encoding.LATIN1
    return opts


_OPTIONS: Final = _options()
_LATIN1: Final = _options(latin1=True)
_UNANCHORED: Final = _re2._re2.RE2.Anchor.UNANCHORED
_AT_START: Final = _re2._re2.RE2.Anchor.ANCHOR_START
# A pattern's UTF-8 program is built when a text outside ASCII first needs it, unless its
# ASCII program is this large: then at once, so that one RE2 cannot build (over MAX_MEM:
# about 4 million instructions) is refused when the rule loads, as before. A class costs
# at most about 1,350 UTF-8 instructions per ASCII one (``\w``: 1,347 for 15), so below
# this an ASCII program's UTF-8 twin stays under 2.7 million.
# (a UTF-8 program RE2 is known to build, one of the built-in pack's, is built on first
# use all the same: re2_known.py)
EAGER_UTF8_ABOVE: Final = 2000
_ESCAPE: Final = re.compile(r"\\x\{([0-9a-fA-F]+)\}")


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: bytes RE2 reads as no character
        return text.encode("utf-8", "surrogatepass")


def utf8_digest(translated: str) -> str:
    """What names a translated pattern in :data:`~watcher.engine.re2_known.KNOWN_UTF8`."""
    return hashlib.sha256(_utf8(translated)).hexdigest()[:32]


def _known_utf8(translated: str) -> bool:
    """Whether RE2 is known to build the UTF-8 program of ``translated``: a built-in
    rule's, as the built-in pack makes it (a library of the user's that redefines one of
    its lists makes another pattern, which is built at once as any other)."""
    return utf8_digest(translated) in KNOWN_UTF8


def _known_ascii(ascii: str) -> bool:
    """Whether RE2 is known to build the ASCII program of ``ascii`` (a translation for
    ASCII texts) and nothing about it is checked at once: a built-in rule's, as the
    built-in pack makes it. Such a program is built when a text first needs it; in a
    scan most are never searched (their rules' texts fail the shared prefilter)."""
    return utf8_digest(ascii) in KNOWN_ASCII


def _ascii_only(translated: str) -> bool:
    """Whether an RE2 pattern names no character outside ASCII: only then does a Latin-1
    program of it match an ASCII text exactly as the UTF-8 one does."""
    if not translated.isascii() or "\\p{" in translated:
        return False
    return all(int(m.group(1), 16) <= 0x7F for m in _ESCAPE.finditer(translated))


class Pattern:
    """A rule regex: its Python source and flags, matched by RE2 (see the module).

    ``search`` answers like ``re.Pattern.search`` does for a test: something that is
    not ``None`` when the pattern matches somewhere in the text (where it matches may
    differ: lazy repeats are matched greedily, which never changes whether).

    Two programs: one for ASCII texts (``ascii``, the translation for them, compiled
    for Latin-1: about a tenth of the UTF-8 program's build time and memory, and the
    common text), and the UTF-8 one for any other text, built when one first comes.
    Starting the built-in pack built UTF-8 programs for 0.38 s of CPU, and 26 MB.
    """

    def __init__(self, pattern: str, flags: int = 0, translated: str | None = None,
                 ascii: str | None = None) -> None:
        self.pattern = pattern
        self.flags = flags
        self.translated = translate(pattern, flags) if translated is None else translated
        if ascii is None and translated is None:
            ascii = translate(pattern, flags, ascii_text=True)
        self.ascii: str | None = ascii if ascii is not None and _ascii_only(ascii) else None
        self._match: Any = None
        self._amatch: Any = None
        # the existence tests search() asks first (see _test): None until built, False
        # where RE2 would not build one (the program's own match answers then)
        self._test: Any = None
        self._atest: Any = None
        if self.ascii is not None:
            if _known_ascii(self.ascii):
                return  # built on first use (_ascii_match)
            if self._ascii_match() is not None:
                return
        self._utf8_match()

    def _ascii_match(self) -> Any:
        """The ASCII program's match, built now (``None``: RE2 cannot build it, and the
        UTF-8 program answers every text). Its UTF-8 twin is checked at once when it is
        large (see EAGER_UTF8_ABOVE)."""
        assert self.ascii is not None
        arx = _re2._re2.RE2(self.ascii.encode("ascii"), _LATIN1)
        if not arx.ok():
            self.ascii = None
            return None
        m = self._amatch = arx.Match
        if arx.ProgramSize() > EAGER_UTF8_ABOVE and not _known_utf8(self.translated):
            self._utf8_match()
        return m

    def _utf8_match(self) -> Any:
        """The UTF-8 program's match (built on first use)."""
        m = self._match
        if m is None:
            rx = _re2._re2.RE2(self.translated.encode("utf-8"), _OPTIONS)
            if not rx.ok():
                raise Unsupported(f"RE2 cannot compile it ({rx.error()})")
            m = self._match = rx.Match
        return m

    def _pick(self, text: str) -> tuple[Any, bytes]:
        """The program for ``text`` and the bytes it reads (the same offsets in both:
        an ASCII text's bytes are its characters)."""
        if self.ascii is not None and text.isascii():
            am = self._amatch
            if am is None:
                am = self._ascii_match()
            if am is not None:
                return am, text.encode("ascii")
        m = self._match
        if m is None:
            m = self._utf8_match()
        return m, _utf8(text)

    def search(self, text: str) -> Any:
        """Something that is not ``None`` when the pattern matches somewhere in ``text``.

        Asked of a one-pattern RE2 set (:func:`_test`): it says whether, and a match
        would also say where, which takes a second, reverse program whose states RE2
        builds as texts come (the shared corpus's 375 SWE-bench runs: 23 ms of such
        building for the tamper rules' bounded repeats, ``[^\n]{0,200}``, 6 ms with the
        sets; as fast as the match once built). Where the set cannot answer, the
        program's own match does."""
        if self.ascii is not None and text.isascii():
            test = self._atest
            if test is None:
                test = self._atest = _test(self.ascii, _LATIN1)
            if test:
                got = test(text.encode("ascii"))
                if got:  # (empty: the set failed, see _test)
                    return True if 0 in got else None
        else:
            test = self._test
            if test is None:
                test = self._test = _test(self.translated, _OPTIONS)
            if test:
                got = test(_utf8(text))
                if got:
                    return True if 0 in got else None
        match, data = self._pick(text)
        span = match(_UNANCHORED, data, 0, len(data))[0]
        return None if span[0] < 0 else span

    def head(self, text: str) -> str | None:
        """The text this pattern matches at the very start of ``text`` (``None`` when it
        does not match there): how a wrapper prefix is found and taken off."""
        match, data = self._pick(text)
        span = match(_AT_START, data, 0, len(data))[0]
        if span[0] < 0:
            return None
        return data[: span[1]].decode("utf-8", "surrogatepass")

    def find(self, text: str) -> int:
        """Where (in characters) the first match in ``text`` starts, or -1."""
        match, data = self._pick(text)
        span = match(_UNANCHORED, data, 0, len(data))[0]
        if span[0] < 0:
            return -1
        return len(data[: span[0]].decode("utf-8", "surrogatepass"))

    def sub(self, repl: str, text: str) -> str:
        """``re.sub(pattern, repl, text)`` for a plain ``repl`` (no group references) and
        a pattern whose lazy repeats do not change what it matches (as
        :func:`translate` makes them greedy)."""
        match, data = self._pick(text)
        end = len(data)
        out: list[bytes] = []
        pos = last = 0
        rb = repl.encode("utf-8")
        while pos <= end:
            span = match(_UNANCHORED, data, pos, end)[0]
            if span[0] < 0:
                break
            out.append(data[last:span[0]])
            out.append(rb)
            last = span[1]
            pos = span[1] if span[1] > span[0] else span[1] + 1
        if not out:
            return text
        out.append(data[last:])
        return b"".join(out).decode("utf-8", "surrogatepass")

    def __repr__(self) -> str:
        return f"rx.Pattern({self.pattern!r}, {self.flags})"


def _test(translated: str, options: Any) -> Any:
    """The match of a one-pattern RE2 set of ``translated`` (unanchored), or ``False``
    where RE2 does not build it. The set's answer lists the pattern (index 0) where it
    matches; the second pattern, end of text, matches every text, so an empty answer
    can only mean the set's scan failed (RE2 answers an empty list both for "nothing
    matched" and for "the DFA ran out of memory", see engine/scan.py)."""
    try:
        rset = _re2._re2.Set(_UNANCHORED, options)
        if rset.Add(translated.encode("utf-8", "surrogatepass")) != 0 or rset.Add(
                rb"\z") != 1 or not rset.Compile():
            return False
    except Exception:  # noqa: BLE001 - refused: the program's own match answers
        return False
    return rset.Match


def alternation(patterns: list[Pattern]) -> Pattern:
    """One pattern matching where any of ``patterns`` does (one RE2 pass)."""
    if len(patterns) == 1:
        return patterns[0]
    ascii = None
    if all(p.ascii is not None for p in patterns):
        ascii = "|".join(f"(?:{p.ascii})" for p in patterns)
    return Pattern("|".join(f"(?:{p.pattern})" for p in patterns), 0,
                   "|".join(f"(?:{p.translated})" for p in patterns), ascii)

