"""The ``effects:`` and ``failures:`` sections of library documents, validated and
compiled into one :class:`~watcher.engine.calls.CallFacts` per rule set.

Both are data a user extends next to their rules (``rules/effects.yaml`` and
``rules/failures.yaml`` are the built-in ones): later documents come first, so a user's
tool entry, wrapper or signature is tried before a built-in one, and their shell and SQL
words replace the built-in ones program by program. Every problem is a located error,
like a rule's.
"""

from __future__ import annotations

import re
from re import _constants as _sre_c  # type: ignore[attr-defined]
from typing import Any

from watcher.engine.calls import (
    CLASSIFIERS,
    CallFacts,
    EffectEntry,
    FailureLibrary,
    Signature,
    Wrapper,
)
from watcher.engine.errors import BadValueError, MissingFieldError
from watcher.engine.lang.ctx import Ctx, did_you_mean
from watcher.engine.lang.regex import compile_regex, required_literals
from watcher.engine.rx import Pattern, parse_regex
from watcher.engine.rxcache import persistent
from watcher.engine.shell import EFFECTS, ShellWords, SqlWords
from watcher.engine.yamlsrc import Path_

SECTIONS = ("effects", "failures")
PLACES = ("first", "start", "last")
_EFFECTS_KEYS = ("tools", "shell", "sql")
_TOOL_KEYS = ("tool", "effect", "argument", "values", "otherwise", "classify", "reason")
_SHELL_KEYS = ("none", "read", "write", "flags", "subcommands", "wrappers", "execs", "valued")
_SQL_KEYS = ("none", "read", "write")
_FAILURE_KEYS = ("wrappers", "signatures", "lines", "error_fields", "failing_exit_codes",
                 "failing_exit_from")
_WRAPPER_KEYS = ("id", "regex", "end", "note")
_SIGNATURE_KEYS = ("id", "regex", "at", "with", "note")


class CallSpecs:
    """Collects the sections of every library document, then builds one ``CallFacts``."""

    def __init__(self) -> None:
        self.entries: list[list[EffectEntry]] = []  # per document, in load order
        self.shells: list[ShellWords] = []
        self.sqls: list[SqlWords] = []
        self.wrappers: list[list[Wrapper]] = []
        self.signatures: list[list[Signature]] = []
        self.lines: int | None = None
        self.error_fields: tuple[str, ...] | None = None
        self.failing_exit_from: int | None = None
        self.failing_exit_codes: frozenset[int] | None = None
        self.has_failures = False

    def build(self) -> CallFacts:
        """The rule set's facts: later documents' entries first."""
        entries = [x for doc in reversed(self.entries) for x in doc]
        shell = ShellWords()
        for words in self.shells:
            shell = shell.merged(words)
        sql = SqlWords()
        for s in self.sqls:
            named = s.read | s.write | s.none
            sql = SqlWords(read=(sql.read - named) | s.read, write=(sql.write - named) | s.write,
                           none=(sql.none - named) | s.none)
        failures = None
        if self.has_failures:
            wrappers = [w for doc in reversed(self.wrappers) for w in doc]
            sigs = [s for doc in reversed(self.signatures) for s in doc]
            failures = FailureLibrary(
                wrappers=wrappers, signatures=sigs,

                lines=self.lines if self.lines is not None else 3,
                error_fields=self.error_fields or (),
                failing_exit_from=self.failing_exit_from,
                failing_exit_codes=self.failing_exit_codes or frozenset())
        return CallFacts(entries, shell, sql, failures)

    # ------------------------------------------------------------------ effects
    def effects(self, data: Any, ctx: Ctx, where: str) -> None:
        p: Path_ = ("effects",)
        if not ctx.expect(data, dict, p, "effects") or not ctx.check_keys(
                data, p, _EFFECTS_KEYS, section="effects"):
            return
        entries: list[EffectEntry] = []
        tools = data.get("tools")
        if tools is not None and ctx.expect(tools, list, p + ("tools",), "effects.tools"):
            for i, item in enumerate(tools):
                e = self._entry(item, ctx, p + ("tools", i), where)
                if e is not None:
                    entries.append(e)
        self.entries.append(entries)
        if "shell" in data:
            words = self._shell(data["shell"], ctx, p + ("shell",))
            if words is not None:
                self.shells.append(words)
        if "sql" in data:
            sql = data["sql"]
            sp = p + ("sql",)
            if ctx.expect(sql, dict, sp, "effects.sql") and ctx.check_keys(
                    sql, sp, _SQL_KEYS, section="effects.sql"):
                self.sqls.append(SqlWords(
                    read=_words(sql.get("read"), ctx, sp + ("read",), lower=True),
                    write=_words(sql.get("write"), ctx, sp + ("write",), lower=True),
                    none=_words(sql.get("none"), ctx, sp + ("none",), lower=True)))

    def _entry(self, item: Any, ctx: Ctx, p: Path_, where: str) -> EffectEntry | None:
        if not ctx.expect(item, dict, p, "an effects.tools entry") or not ctx.check_keys(
                item, p, _TOOL_KEYS, ["tool"], section="effects.tools entry"):
            return None
        tool = item["tool"]
        names = [tool] if isinstance(tool, str) else tool
        if not ctx.expect(names, list, p + ("tool",), "tool") or not all(
                ctx.expect(n, str, p + ("tool", i), "a tool name pattern")
                for i, n in enumerate(names)):
            return None
        how = [k for k in ("effect", "values", "classify") if k in item]
        if len(how) != 1:
            ctx.error(MissingFieldError, p,
                      "an effects.tools entry needs exactly one of effect, values or classify",
                      "effect: none|read|write|unknown; values: {argument value: effect} with "
                      "argument:; or classify: shell|sql with argument:")
            return None
        effect = item.get("effect")
        if effect is not None and not _effect(effect, ctx, p + ("effect",)):
            return None
        otherwise = item.get("otherwise", "unknown")
        if not _effect(otherwise, ctx, p + ("otherwise",)):
            return None
        argument = item.get("argument", [])
        args = [argument] if isinstance(argument, str) else argument
        if not ctx.expect(args, list, p + ("argument",), "argument") or not all(
                ctx.expect(a, str, p + ("argument", i), "an argument name")
                for i, a in enumerate(args)):
            return None
        if how[0] != "effect" and not args:
            ctx.error(MissingFieldError, p, f"{how[0]} needs argument: the argument it reads",
                      "e.g. argument: [cmd, command]")
            return None
        values: dict[str, str] = {}
        if "values" in item:
            vals = item["values"]
            if not ctx.expect(vals, dict, p + ("values",), "values"):
                return None
            for k, v in vals.items():
                if not _effect(v, ctx, p + ("values", k)):
                    return None
                values[str(k)] = v
        classify = item.get("classify")
        if classify is not None and classify not in CLASSIFIERS:
            ctx.error(BadValueError, p + ("classify",), f"unknown classifier {classify!r}",
                      did_you_mean(classify, CLASSIFIERS, "one of: " + ", ".join(CLASSIFIERS)))
            return None
        reason = item.get("reason", "")
        if not ctx.expect(reason, str, p + ("reason",), "reason"):
            return None
        line, _ = ctx.doc.loc(p)
        return EffectEntry(tuple(names), effect, tuple(args), values, otherwise, classify,
                           reason, f"{where}:{line}")

    def _shell(self, data: Any, ctx: Ctx, p: Path_) -> ShellWords | None:
        if not ctx.expect(data, dict, p, "effects.shell") or not ctx.check_keys(
                data, p, _SHELL_KEYS, section="effects.shell"):
            return None
        flags: dict[str, dict[str, str]] = {}
        for prog, table in (data.get("flags") or {}).items():
            fp = p + ("flags", prog)
            if ctx.expect(table, dict, fp, f"flags of {prog!r}"):
                flags[str(prog)] = {str(f): e for f, e in table.items()
                                    if _effect(e, ctx, fp + (f,))}
        subs: dict[str, dict[str, str]] = {}
        for prog, table in (data.get("subcommands") or {}).items():
            sp = p + ("subcommands", prog)
            if ctx.expect(table, dict, sp, f"subcommands of {prog!r}"):
                subs[str(prog)] = {str(s): e for s, e in table.items()
                                   if _effect(e, ctx, sp + (s,))}
        wrappers: dict[str, int] = {}
        for prog, n in (data.get("wrappers") or {}).items():
            if ctx.expect(n, int, p + ("wrappers", prog), f"words taken by {prog!r}"):
                if not 0 <= n <= 8:
                    ctx.error(BadValueError, p + ("wrappers", prog),
                              f"a wrapper takes 0 to 8 words of its own, not {n}")
                    continue
                wrappers[str(prog)] = n
        execs = {str(prog): _words(names, ctx, p + ("execs", prog))
                 for prog, names in (data.get("execs") or {}).items()}
        valued = {str(prog): _words(names, ctx, p + ("valued", prog))
                  for prog, names in (data.get("valued") or {}).items()}
        return ShellWords(
            execs=execs, valued=valued,
            none=_words(data.get("none"), ctx, p + ("none",)),
            read=_words(data.get("read"), ctx, p + ("read",)),
            write=_words(data.get("write"), ctx, p + ("write",)),
            flags=flags, subcommands=subs, wrappers=wrappers)

    # ------------------------------------------------------------------ failures
    def failures(self, data: Any, ctx: Ctx) -> None:
        p: Path_ = ("failures",)
        if not ctx.expect(data, dict, p, "failures") or not ctx.check_keys(
                data, p, _FAILURE_KEYS, section="failures"):
            return
        self.has_failures = True
        wrappers: list[Wrapper] = []
        for i, item in enumerate(_items(data.get("wrappers"), ctx, p + ("wrappers",))):
            wp = p + ("wrappers", i)
            if ctx.expect(item, dict, wp, "a wrapper") and ctx.check_keys(
                    item, wp, _WRAPPER_KEYS, ["id", "regex"], section="wrapper"):
                pat = compile_regex(item["regex"], ctx, wp + ("regex",))
                end = compile_regex(item["end"], ctx, wp + ("end",)) if "end" in item else None
                if pat is not None and ("end" not in item or end is not None):
                    wrappers.append(Wrapper(pat, end, _needles(pat), _starts(pat)))
        sigs: list[Signature] = []
        for i, item in enumerate(_items(data.get("signatures"), ctx, p + ("signatures",))):
            sp = p + ("signatures", i)
            if not (ctx.expect(item, dict, sp, "a signature") and ctx.check_keys(
                    item, sp, _SIGNATURE_KEYS, ["id", "regex"], section="signature")):
                continue
            at = item.get("at", "first")
            if at not in PLACES:
                ctx.error(BadValueError, sp + ("at",), f"unknown place {at!r}",
                          "at: first (each of the first lines), start (the first line) or "
                          "last (the last line)")
                continue
            if not ctx.expect(item["id"], str, sp + ("id",), "a signature id"):
                continue
            pat = compile_regex(item["regex"], ctx, sp + ("regex",))
            also = compile_regex(item["with"], ctx, sp + ("with",)) if "with" in item else None
            if pat is not None and ("with" not in item or also is not None):
                sigs.append(Signature(item["id"], pat, at, _needles(pat), also))
        self.wrappers.append(wrappers)
        self.signatures.append(sigs)
        if "lines" in data and ctx.expect(data["lines"], int, p + ("lines",), "lines"):
            if 1 <= data["lines"] <= 50:
                self.lines = data["lines"]
            else:
                ctx.error(BadValueError, p + ("lines",), "lines must be between 1 and 50")
        if "error_fields" in data:
            self.error_fields = tuple(sorted(_words(data["error_fields"], ctx,
                                                    p + ("error_fields",))))
        if "failing_exit_codes" in data:
            codes = _items(data["failing_exit_codes"], ctx, p + ("failing_exit_codes",))
            self.failing_exit_codes = frozenset(
                c for i, c in enumerate(codes)
                if ctx.expect(c, int, p + ("failing_exit_codes", i), "an exit code"))
        if "failing_exit_from" in data and ctx.expect(
                data["failing_exit_from"], int, p + ("failing_exit_from",), "failing_exit_from"):
            self.failing_exit_from = data["failing_exit_from"]


def _needles(p: Pattern) -> tuple[str, ...] | None:
    """Strings one of which every match of ``p`` contains (a cheap test first)."""
    lits = required_literals(p.pattern, ignore_case=bool(p.flags & re.IGNORECASE))
    return tuple(sorted(lits, key=len, reverse=True)) if lits else None


def _starts(p: Pattern) -> frozenset[str] | None:
    """The characters every non-empty match of ``p`` starts with, or ``None`` (any, or
    not known: only literals, plain classes, groups, alternations and repeats are read,
    and a case-insensitive pattern is not)."""
    return _first_chars(p.pattern, p.flags)


@persistent("first-chars")  # kept between runs (rxcache)
def _first_chars(pattern: str, flags: int) -> frozenset[str] | None:
    c = _sre_c
    try:
        parsed = parse_regex(pattern, flags)
    except (re.error, RecursionError, ValueError):
        return None
    if parsed.state.flags & c.SRE_FLAG_IGNORECASE:
        return None

    def seq(items: Any) -> tuple[set[str], bool] | None:
        """(first characters, whether the sequence can match empty)."""
        out: set[str] = set()
        for op, av in items:
            got = node(op, av)
            if got is None:
                return None
            chars, empty = got
            out |= chars
            if not empty:
                return out, False
        return out, True

    def node(op: Any, av: Any) -> tuple[set[str], bool] | None:
        if op is c.LITERAL:
            return {chr(av)}, False
        if op is c.IN:
            chars: set[str] = set()
            for iop, iav in av:
                if iop is c.LITERAL:
                    chars.add(chr(iav))
                elif iop is c.RANGE and iav[1] - iav[0] < 128:
                    chars |= {chr(k) for k in range(iav[0], iav[1] + 1)}
                else:  # negated, a category: not read
                    return None
            return chars, False
        if op is c.AT and av in (c.AT_BEGINNING, c.AT_BEGINNING_STRING):
            return set(), True
        if op is c.SUBPATTERN:
            _group, add_flags, del_flags, sub = av
            if (add_flags | del_flags) & c.SRE_FLAG_IGNORECASE:
                return None
            return seq(sub)
        if op is c.BRANCH:
            out: set[str] = set()
            empty = False
            for alt in av[1]:
                got = seq(alt)
                if got is None:
                    return None
                out |= got[0]
                empty = empty or got[1]
            return out, empty
        if op in (c.MAX_REPEAT, c.MIN_REPEAT):
            got = seq(av[2])
            if got is None:
                return None
            return got[0], got[1] or av[0] == 0
        return None

    got = seq(parsed)
    # a sequence that may match empty still starts each non-empty match with one of them
    return frozenset(got[0]) if got is not None else None


def _effect(value: Any, ctx: Ctx, p: Path_) -> bool:
    if value in EFFECTS:
        return True
    ctx.error(BadValueError, p, f"unknown effect {value!r}",
              did_you_mean(value, EFFECTS, "one of: " + ", ".join(EFFECTS)))
    return False


def _items(value: Any, ctx: Ctx, p: Path_) -> list[Any]:
    if value is None:
        return []
    return value if ctx.expect(value, list, p, p[-1]) else []


def _words(value: Any, ctx: Ctx, p: Path_, lower: bool = False) -> frozenset[str]:
    out: set[str] = set()
    for i, w in enumerate(_items(value, ctx, p)):
        if isinstance(w, bool):  # YAML reads `true`/`false` as booleans: the programs
            w = "true" if w else "false"
        if ctx.expect(w, str, p + (i,), "a word"):
            out.add(w.lower() if lower else w)
    return frozenset(out)
