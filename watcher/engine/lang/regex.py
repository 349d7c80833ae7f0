"""Rule regexes at load time: syntax, shapes, what RE2 can take, and the search.

A rule's regex is agent-facing: it runs over untrusted, unbounded text, so it is
checked when the rule loads (W106 syntax, W107 shapes that would backtrack in Python,
W122 what RE2 cannot match as Python does), matched by RE2 in linear time
(:mod:`watcher.engine.rx`), only over bounded text, behind a literal prefilter where
the pattern allows one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from re import _compiler as _sre_compiler  # type: ignore[attr-defined]
from re import _constants as _sre_c  # type: ignore[attr-defined]
from typing import Any

from watcher.engine.errors import BadRegexError, CatastrophicRegexError, UnsupportedRegexError
from watcher.engine.lang.ctx import Ctx
from watcher.engine.rx import Pattern, Unsupported, alternation, parse_regex
from watcher.engine.rxcache import persistent
from watcher.engine.yamlsrc import Path_

Search = Callable[[str], Any]

_REPEATS = {_sre_c.MAX_REPEAT, _sre_c.MIN_REPEAT, _sre_c.POSSESSIVE_REPEAT}
_ASCII = [chr(i) for i in range(32, 127)] + ["\t", "\n", "é", "λ"]


def _charset(items: list[tuple[Any, Any]]) -> set[str]:
    negate = False
    out: set[str] = set()
    for op, av in items:
        if op == _sre_c.NEGATE:
            negate = True
        elif op == _sre_c.LITERAL:
            out.add(chr(av))
        elif op == _sre_c.RANGE:
            out |= {c for c in _ASCII if av[0] <= ord(c) <= av[1]}
        elif op == _sre_c.CATEGORY:
            out |= _category(av)
    return set(_ASCII) - out if negate else out


def _category(cat: Any) -> set[str]:
    name = str(cat).upper()
    tests: dict[str, Callable[[str], bool]] = {
        "DIGIT": str.isdigit, "SPACE": str.isspace, "WORD": lambda c: c.isalnum() or c == "_",
    }
    for key, test in tests.items():
        if key in name:
            neg = "NOT" in name
            return {c for c in _ASCII if test(c) != neg}
    return set(_ASCII)


def _first_chars(items: list[tuple[Any, Any]]) -> set[str]:
    """Characters that can start a match of a parsed (sub)pattern (over-approximated)."""
    for op, av in items:
        if op == _sre_c.AT:
            continue
        if op == _sre_c.LITERAL:
            return {chr(av)}
        if op == _sre_c.NOT_LITERAL or op == _sre_c.ANY:
            return set(_ASCII) - ({chr(av)} if op == _sre_c.NOT_LITERAL else set())
        if op == _sre_c.IN:
            return _charset(av)
        if op == _sre_c.CATEGORY:
            return _category(av)
        if op == _sre_c.SUBPATTERN:
            return _first_chars(list(av[-1]))
        if op == _sre_c.BRANCH:
            out: set[str] = set()
            for b in av[1]:
                out |= _first_chars(list(b))
            return out
        if op in _REPEATS:
            lo, _hi, sub = av
            if lo == 0:
                return set(_ASCII)
            return _first_chars(list(sub))
        return set(_ASCII)
    return set()


def _danger(items: Any, in_repeat: bool) -> str | None:
    for op, av in items:
        if op in _REPEATS:
            lo, hi, sub = av
            variable = hi != lo
            if in_repeat and variable:
                return "a quantifier nested inside another quantifier (like (a+)+ or (.*)*)"
            found = _danger(sub, in_repeat or hi > 1)
            if found:
                return found
        elif op == _sre_c.SUBPATTERN:
            found = _danger(av[-1], in_repeat)
            if found:
                return found
        elif op == _sre_c.BRANCH:
            branches = [list(b) for b in av[1]]
            if in_repeat and any(not b for b in branches):
                return ("an optional alternative inside a quantifier (like (a|aa)+, which "
                        "Python reads as (a(|a))+)")
            if in_repeat:
                firsts = [_first_chars(b) for b in branches]
                for i in range(len(firsts)):
                    for j in range(i + 1, len(firsts)):
                        if firsts[i] & firsts[j]:
                            return ("alternatives that can match the same text inside a "
                                    "quantifier (like (a|ab)+)")
            for b in branches:
                found = _danger(b, in_repeat)
                if found:
                    return found
        elif op in (_sre_c.ASSERT, _sre_c.ASSERT_NOT):
            found = _danger(av[1], in_repeat)
            if found:
                return found
    return None


@persistent("shape")  # kept between runs (rxcache)
def _shape(pattern: str, flags: int) -> str | None:
    """What would backtrack in Python (W107), or ``None``; raises ``re.error`` (W106)."""
    tree = parse_regex(pattern, flags)
    _sre_compiler.compile(tree, flags)  # what only compiling finds (a look-behind's width)
    return _danger(tree, False)


def compile_regex(pattern: Any, ctx: Ctx, path: Path_, flags: int = 0) -> Pattern | None:
    """Compile a rule regex for RE2, rejecting syntax errors (W106), shapes that would
    backtrack in Python (W107) and what RE2 cannot match as Python does (W122)."""
    if not ctx.expect(pattern, str, path, "regex"):
        return None
    try:
        danger = _shape(pattern, flags)
        compiled = Pattern(pattern, flags) if not danger else None
    except re.error as exc:
        ctx.error(BadRegexError, path, f"invalid regex: {exc}",
                  "Python 're' syntax; escape literal ( [ . * + ? with a backslash")
        return None
    except RecursionError:  # Python's parser (and ours) recurse once per group
        ctx.error(BadRegexError, path, "regex groups nested too deep to parse",
                  "flatten the groups: (?:a|b|c) rather than (a|(b|(c)))")
        return None
    except Unsupported as exc:
        ctx.error(UnsupportedRegexError, path, f"regex cannot run on RE2: {exc}",
                  "rule regexes run on RE2, in time linear in the text; rewrite it "
                  "without this (docs/rules.md, Regexes)")
        return None
    if danger:
        ctx.error(CatastrophicRegexError, path,
                  f"regex may backtrack catastrophically: {danger}",
                  "make the inner part unambiguous, e.g. (ab)+ instead of (a+b?)+, "
                  "or drop the outer quantifier")
        return None
    return compiled


def combine(compiled: list[Pattern], flags: int, lowered: bool = False) -> Search:
    """One search for a list of regexes (one RE2 alternation).

    The search is guarded by a literal prefilter where the pattern allows one (see
    :func:`required_clauses`): most agent text contains none of a rule's keywords,
    and a substring test is an order of magnitude cheaper than a regex scan. Every
    clause is tested, not only the most selective one: code holds ``return`` on every
    other line, but rarely also ``==`` and a test-named string.
    ``lowered`` says the text is already lower-case, so case-insensitive literals can
    be tested in lower case.
    """
    combined = alternation(compiled)
    search = combined.search
    clauses = required_clauses(combined.pattern if len(compiled) == 1 else
                               "|".join(f"(?:{c.pattern})" for c in compiled),
                               lowered=lowered, ignore_case=bool(flags & re.IGNORECASE))
    if not clauses:
        return search
    needles = tuple(tuple(sorted(c, key=len, reverse=True)) for c in clauses)
    if len(needles) == 1:
        one = needles[0]
        return lambda t: search(t) if any(n in t for n in one) else None
    return lambda t: search(t) if has_all(t, needles) else None


def has_all(text: str, clauses: tuple[tuple[str, ...], ...]) -> bool:
    """Whether ``text`` holds at least one needle of every clause."""
    for clause in clauses:
        for n in clause:
            if n in text:
                break
        else:
            return False
    return True


MAX_CLAUSES = 4  # substring scans before a regex runs: each reads the text once


def required_literals(pattern: str, *, lowered: bool = False,
                      ignore_case: bool = False) -> frozenset[str] | None:
    """Strings of which every match of ``pattern`` contains at least one, or ``None``:
    the most selective clause of :func:`required_clauses` (its shortest string the
    longest)."""
    clauses = required_clauses(pattern, lowered=lowered, ignore_case=ignore_case)
    return clauses[0] if clauses else None


@persistent("clauses")  # kept between runs (rxcache)
def required_clauses(pattern: str, *, lowered: bool = False,
                     ignore_case: bool = False) -> tuple[frozenset[str], ...]:
    """Sets of strings such that every match of ``pattern`` contains at least one string
    of each set (empty: no prefilter is safe), the most selective set first.

    Derived from the parsed pattern: each run of literal characters the match must go
    through is a set of one, and an alternation gives the union over its branches of
    each branch's most selective set. A set is kept only when its every string has two
    or more characters; at most :data:`MAX_CLAUSES`. A case-insensitive pattern (or
    group) has usable literals only when the text is ``lowered``: they are then returned
    in lower case.
    """
    c = _sre_c
    try:
        parsed = parse_regex(pattern, 0)
    except (re.error, RecursionError, ValueError):
        return ()
    if parsed.state.flags & c.SRE_FLAG_VERBOSE:
        return ()
    if (ignore_case or parsed.state.flags & c.SRE_FLAG_IGNORECASE) and not lowered:
        return ()
    # under a case-insensitive match of lower-cased text, a literal is found lower-cased
    # (ASCII only: a few non-ASCII letters fold to more than one character)
    fold = bool(ignore_case or parsed.state.flags & c.SRE_FLAG_IGNORECASE)

    def lit(ch: int, folding: bool) -> str | None:
        s = chr(ch)
        if not folding:
            return s
        return s.lower() if s.isascii() else None

    def seq(items: Any, folding: bool) -> list[frozenset[str]]:
        """Every clause of a sequence: each of its parts' clauses must hold."""
        out: list[frozenset[str]] = []

        def add(clauses: list[frozenset[str]]) -> None:
            for cl in clauses:
                if cl and min(map(len, cl)) >= 2 and cl not in out:
                    out.append(cl)

        run: list[str] = []
        for op, av in items:
            ch = lit(av, folding) if op is c.LITERAL else None
            if ch is not None:
                run.append(ch)
                continue
            if run:
                add([frozenset({"".join(run)})])
            run = []
            add(node(op, av, folding))
        if run:
            add([frozenset({"".join(run)})])
        return out

    def node(op: Any, av: Any, folding: bool) -> list[frozenset[str]]:
        if op is c.SUBPATTERN:
            _group, add_flags, del_flags, sub = av
            if add_flags & c.SRE_FLAG_IGNORECASE:
                if not lowered:
                    return []
                folding = True
            if del_flags & c.SRE_FLAG_IGNORECASE:
                folding = False
            return seq(sub, folding)
        if op is c.BRANCH:
            union: set[str] = set()
            for alt in av[1]:
                got = seq(alt, folding)
                if not got:
                    return []
                union |= _best(got)
            return [frozenset(union)]
        if op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT) and av[0] >= 1:
            return seq(av[2], folding)
        if op is c.ATOMIC_GROUP:
            return seq(av, folding)
        return []

    found = seq(parsed, fold)
    found.sort(key=lambda cl: (-min(map(len, cl)), len(cl)))
    return tuple(found[:MAX_CLAUSES])


def _best(clauses: list[frozenset[str]]) -> frozenset[str]:
    """The most selective clause: its shortest string the longest (then the fewest)."""
    return min(clauses, key=lambda cl: (-min(map(len, cl)), len(cl)))
