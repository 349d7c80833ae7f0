"""Two facts about each tool call, from data: its ``effect`` and its ``failure``.

``effect`` says what the call may change (:mod:`watcher.engine.shell`: ``none``,
``read``, ``write`` or ``unknown``), from the ``effects:`` entries of the rule set's
library documents (``rules/effects.yaml``): a tool name pattern and its effect, the
effect chosen by one argument's value (``text_editor``'s ``command``), or a classifier
of the command text (``shell``, ``sql``). Repeats with only ``none``/``read`` calls
between them are one streak; a ``write``/``unknown`` call between makes them iteration.

``failure`` says whether the call's output reads as a failure, and which signature said
so, from the ``failures:`` entries (``rules/failures.yaml``): harnesses wrap what a tool
printed ("Bourne Shell Output: ...", ``<returncode>1</returncode><output>``), so a
wrapper prefix is taken off first; the signatures are then tried at the start of each of
the first ``lines`` lines of what is left (and ``at: last`` ones on its last line); a
JSON object with a non-empty error field, and a wrapper's exit code from ``exit_codes``
on, are failures too. Both are set on every completed tool event by the engine before
any rule reads it (``SampleWatch.feed``), so rules test them like any field.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from watcher.engine.rx import Pattern, translate
from watcher.engine.shell import (
    EFFECTS,
    MEMO_LINE,
    MEMO_SIZE,
    NONE,
    READ,
    UNKNOWN,
    WRITE,
    ShellClassifier,
    ShellWords,
    SqlWords,
    sql_effect,
)
from watcher.events import WHOLE, Event

CLASSIFIERS: Final = ("shell", "sql")
MAX_SCAN: Final = 4000  # characters of an output read for its first lines
MAX_TAIL: Final = 2000  # and for its last line (and the wrapper's end)
MAX_WRAPPER: Final = 400  # a wrapper's prefix is found within this many characters
MAX_LINE_CHARS: Final = 400  # of each line tried
MAX_JSON: Final = 65536  # an output longer than this is not parsed as JSON
_CODE: Final = re.compile(r"-?\d+")
# a bounded repeat ``{m,n}`` of a translated pattern (literal braces are ``\x{..}``
# escapes, without a comma): see _line_starts
_BOUND: Final = re.compile(r"\{(\d+),\d+\}")
_UNBOUND: Final = r"{\1,}"
# the label of a call in evidence: a function or program name, plain characters only
_WILD: Final = frozenset("*?[")  # what makes a tool name an fnmatch pattern
_LABEL: Final = re.compile(r"[^\w.+:>/ -]+")


def label(text: str) -> str:
    """A name shown in evidence (agent-chosen: a program name): plain characters only,
    at most 40."""
    return _LABEL.sub("?", text)[:40]


@dataclass
class EffectEntry:
    """One ``effects:`` entry: which tools, and how their effect is known."""

    tools: tuple[str, ...]
    effect: str | None = None  # a fixed effect
    argument: tuple[str, ...] = ()  # the argument that decides (first one present)
    values: dict[str, str] = field(default_factory=dict)  # argument value -> effect
    otherwise: str = UNKNOWN  # when the argument is missing or its value is not listed
    classify: str | None = None  # "shell" or "sql": classify the argument's text
    reason: str = ""
    where: str = ""  # file:line, for `rules show` and errors
    # the tool names without a wildcard, and the other patterns compiled (None: none):
    # one regex of the whole list cost the pack's 13 entries 26 M instructions at start
    literal: frozenset[str] = field(init=False, repr=False, default=frozenset())
    names: Any = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        # (each set here: compiled, an init=False field's default is never set)
        self.literal = frozenset(t for t in self.tools if not _WILD.intersection(t))
        wild = [t for t in self.tools if _WILD.intersection(t)]
        # (no names at all: the empty pattern, which matches every name, as it always did)
        self.names = re.compile("|".join(fnmatch.translate(t) for t in wild)) if (
            wild or not self.tools) else None

    def covers(self, function: str) -> bool:
        """Whether the entry names the tool (its fnmatch patterns: a name without ``*``,
        ``?`` or ``[`` matches itself alone, as fnmatch's translation of it does)."""
        if function in self.literal:
            return True
        names = self.names
        return names is not None and names.match(function) is not None


@dataclass
class Wrapper:
    """What a harness puts around a tool's output: a prefix (``start``, matched at the
    very start) and, optionally, where the output ends (``end``: the first match in its
    last :data:`MAX_SCAN` characters, e.g. ``</output>`` or InterCode's ``Reward:``
    line). A number in the prefix is the command's exit code."""

    start: Pattern
    end: Pattern | None = None
    # strings one of which every match contains (None: no such set); a cheap test that
    # rules a wrapper out before RE2 is asked
    needles: tuple[str, ...] | None = None
    # the characters a (non-empty) prefix can start with (None: any): most outputs rule
    # out every wrapper by their first character, before any needle is looked for
    first: frozenset[str] | None = None


@dataclass
class Signature:
    """One failure signature: a regex tried at the start of a line."""

    id: str
    pattern: Pattern
    # "first": each of the first lines; "start": the first line only; "last": the last
    # non-empty line (of the output, without the wrapper's end)
    at: str = "first"
    needles: tuple[str, ...] | None = None  # as Wrapper.needles
    # the signature counts only when this also matches somewhere in the output read (its
    # first and last characters): a Python exception line ends a traceback
    also: Pattern | None = None

    def starts(self, line: str) -> bool:
        needles = self.needles
        if needles is not None and not any(n in line for n in needles):
            return False
        return self.pattern.head(line) is not None


Search = Callable[[str], Any]


@dataclass
class FailureLibrary:
    """The ``failures:`` section: wrappers, signatures, error fields and exit codes.

    ``any_first`` answers in one RE2 pass over the first lines (joined, the signatures
    translated with ``^``/``$`` at line breaks) whether any signature starts one of them,
    ``any_last`` the same for the last line; which one is asked only after a yes (most
    outputs are not failures). Wrappers are ruled out by their literal needles first."""

    wrappers: list[Wrapper] = field(default_factory=list)
    signatures: list[Signature] = field(default_factory=list)
    lines: int = 3
    error_fields: tuple[str, ...] = ()
    failing_exit_from: int | None = None  # a wrapper's exit code >= this is a failure
    failing_exit_codes: frozenset[int] = frozenset()  # and so are these
    any_first: Search | None = None
    any_last: Search | None = None
    _first_sigs: list[Signature] = field(init=False, repr=False, default_factory=list)
    _last_sigs: list[Signature] = field(init=False, repr=False, default_factory=list)
    # the needles of every ``at: last`` signature (None: some has none): a last line
    # holding none of them starts no such signature, and RE2 need not be asked
    _last_needles: tuple[str, ...] | None = field(init=False, repr=False, default=None)
    # each error field's name as a JSON key is written (a quick test before parsing)
    _quoted_fields: tuple[str, ...] | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        # set here, not only by its default: compiled, an init=False field's default is
        # never set (a last-line signature without needles raised AttributeError)
        self._last_needles = None
        # (a name JSON must escape, a quote or a control character, is always parsed for)
        self._quoted_fields = tuple(f'"{name}"' for name in self.error_fields) if all(
            '"' not in n and "\\" not in n and n.isprintable() for n in self.error_fields
        ) else None
        self._first_sigs = [s for s in self.signatures if s.at != "last"]
        self._last_sigs = [s for s in self.signatures if s.at == "last"]
        if all(s.needles is not None for s in self._last_sigs):
            self._last_needles = tuple(dict.fromkeys(
                n for s in self._last_sigs for n in s.needles or ()))
        if self.any_first is None and self._first_sigs:
            self.any_first = _line_starts([x.pattern for x in self._first_sigs])
        if self.any_last is None and self._last_sigs:
            self.any_last = _line_starts([x.pattern for x in self._last_sigs])

    def failure(self, text: str) -> str | None:
        """The id of the signature that says ``text`` (a tool's output) is a failure.

        A wrapper's exit code of 0 means the command succeeded, whatever it printed (a
        warning banner, a log line): its output is not read for failures."""
        if not text:
            return None
        code: int | None = None
        skip = 0
        end: Pattern | None = None
        if self.wrappers:
            start = text[:MAX_WRAPPER]
            c = text[:1]
            for w in self.wrappers:
                if w.first is not None and c not in w.first:
                    continue
                if w.needles is not None and not any(n in start for n in w.needles):
                    continue
                prefix = w.start.head(start)
                if prefix:
                    m = _CODE.search(prefix)
                    code = int(m.group(0)) if m is not None else None
                    skip = len(prefix)
                    end = w.end
                    break
        if code == 0:
            return None
        head = text[skip:skip + MAX_SCAN].lstrip()
        if self.error_fields and head[:1] == "{" and len(text) - skip <= MAX_JSON:
            if self._json_error(text[skip:]):
                return "json-error"
        if self.any_first is not None:
            found = self._first_lines(head)
            if found is not None:
                return found
        if self.any_last is not None:
            tail = text[max(skip, len(text) - MAX_TAIL):]
            if end is not None:
                cut = end.find(tail)
                if cut >= 0:
                    tail = tail[:cut]
            kept = tail.rstrip()
            last = kept[kept.rfind("\n") + 1:].strip()[:MAX_LINE_CHARS]
            needles = self._last_needles
            if last and (needles is None or any(n in last for n in needles)) and (
                    self.any_last(last) is not None):
                for sig in self._last_sigs:
                    if sig.starts(last) and (sig.also is None or sig.also.search(head) is not None
                                             or sig.also.search(tail) is not None):
                        return sig.id
        if code is not None and (code in self.failing_exit_codes or code < 0 or (
                self.failing_exit_from is not None and code >= self.failing_exit_from)):
            return "exit-code"
        return None

    def _first_lines(self, head: str) -> str | None:
        """The signature starting one of the first ``lines`` non-empty lines."""
        want = self.lines
        lines: list[str] = []
        # the first 4 * want lines, found one by one (a split would also copy the rest)
        pos = 0
        for _ in range(4 * want):
            nl = head.find("\n", pos)
            ln = (head[pos:] if nl < 0 else head[pos:nl]).strip()
            if ln:
                lines.append(ln[:MAX_LINE_CHARS])
                if len(lines) >= want:
                    break
            if nl < 0:
                break
            pos = nl + 1
        if not lines:
            return None
        any_first = self.any_first
        assert any_first is not None
        if any_first("\n".join(lines)) is None:  # one pass: the common answer, no
            return None
        for i, ln in enumerate(lines):
            for sig in self._first_sigs:
                if (i == 0 or sig.at != "start") and sig.starts(ln) and (
                        sig.also is None or sig.also.search(head) is not None):
                    return sig.id
        return None

    def _json_error(self, text: str) -> bool:
        """Whether ``text`` is a JSON object with a non-empty error field.

        Such a field's name is in the text, quoted, unless a ``\\u`` escape spells it:
        without either, nothing is parsed (an output that is JSON, from a tool that
        answers in JSON, was parsed whole on every call: 86,000 instructions each)."""
        quoted = self._quoted_fields
        if quoted is not None and "\\u" not in text and not any(q in text for q in quoted):
            return False
        try:
            obj = orjson.loads(text)
        except orjson.JSONDecodeError:
            return False
        return isinstance(obj, dict) and any(obj.get(name) for name in self.error_fields)


def _line_starts(patterns: list[Pattern]) -> Search:
    """Whether any of ``patterns`` may match at the start of a line of a text (one RE2
    pass; each pattern translated with ``^`` and ``$`` at line breaks, as it reads one
    line).

    A prefilter: a "no" is final, a "yes" is confirmed signature by signature. So its
    bounded repeats lose their upper bound (``[^\n]{0,240}`` reads ``[^\n]*``: the same
    or more texts match), which keeps its UTF-8 program small: with the bounds, the
    built-in library's was 13.6 MB of the watcher's memory (a 0.8 MB ASCII one).
    """
    def body(ascii_text: bool) -> str:
        return "(?m:^)(?:" + "|".join(
            "(?:" + _BOUND.sub(_UNBOUND, translate(p.pattern, p.flags | re.MULTILINE,
                                                   ascii_text)) + ")"
            for p in patterns) + ")"

    return Pattern("", translated=body(False), ascii=body(True)).search


@dataclass
class CallFacts:
    """The rule set's effect entries and failure library, applied to tool events."""

    entries: list[EffectEntry] = field(default_factory=list)
    shell: ShellWords = field(default_factory=ShellWords)
    sql: SqlWords = field(default_factory=SqlWords)
    failures: FailureLibrary | None = None
    _by_name: dict[str, EffectEntry | None] = field(init=False, repr=False,
                                                    default_factory=dict)
    _shell: ShellClassifier | None = field(init=False, repr=False, default=None)
    # failure answers for short outputs (at most MEMO_SIZE, for every sample of a rule set)
    _failures: dict[str, str | None] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        self._shell = ShellClassifier(self.shell)

    @property
    def empty(self) -> bool:
        return not self.entries and self.failures is None

    def entry(self, function: str) -> EffectEntry | None:
        """The first entry covering a tool name (remembered per name)."""
        try:
            return self._by_name[function]
        except KeyError:
            pass
        hit = next((x for x in self.entries if x.covers(function)), None)
        if len(self._by_name) < 4096:
            self._by_name[function] = hit
        return hit

    def effect(self, e: Event) -> tuple[str, str]:
        """``(effect, name)`` of a tool event: what it may change, and the name its
        evidence shows (the function, and for a classified command the program; raw: pass
        it through :func:`label` before showing it)."""
        fn = e.get("function")
        name = fn if type(fn) is str else ""
        x = self.entry(name)
        if x is None:
            return UNKNOWN, name
        if x.effect is not None:
            return x.effect, name
        args = e.get("args")
        value: Any = None
        if isinstance(args, dict):
            for a in x.argument:
                if a in args:
                    value = args[a]
                    break
        if x.classify is not None:
            if type(value) is not str:
                return x.otherwise, name
            if x.classify == "shell":
                assert self._shell is not None
                eff, prog = self._shell.classify(value)
            else:
                eff, prog = sql_effect(value, self.sql)
            return eff, f"{name}: {prog}" if prog else name
        if value is None:
            return x.otherwise, name
        eff = x.values.get(str(value), x.otherwise)
        return eff, f"{name}: {value}"

    def failure(self, e: Event) -> str | None:
        """The failure signature a tool event's (whole) output shows, or ``None``."""
        lib = self.failures
        if lib is None:
            return None
        whole = e.get(WHOLE)
        text = whole.get("result") if whole else None
        if text is None:
            text = e.get("result")
        if type(text) is not str:
            return None
        if len(text) > MEMO_LINE:
            return lib.failure(text)
        # short outputs recur ("", a wrapper around nothing, "File created"): in the
        # shared corpus 6,734 of 17,737 tool outputs were one seen before
        # (a lookup, not ``try: memo[text]``: compiled, each miss's KeyError built a
        # traceback, a fifth of the cost of judging a short output)
        memo = self._failures
        got = memo.get(text, _UNSEEN)
        if got is not _UNSEEN:
            return got
        if len(memo) >= MEMO_SIZE:
            memo.clear()
        got = memo[text] = lib.failure(text)
        return got


_UNSEEN: Final = "\x00unseen"  # the failure memo's miss (its answers include None)

# a write or unknown call that failed: taken as having changed nothing (evidence only)
FAILED: Final = "failed"
EFFECT_WORDS: Final = {
    NONE: "changes nothing", READ: "reads only", WRITE: "may change state",
    UNKNOWN: "may change state (not known)", FAILED: "failed, so taken as no change"}
CHANGES: Final = frozenset({WRITE, UNKNOWN})
__all__ = ["CallFacts", "EffectEntry", "FailureLibrary", "Signature", "EFFECTS",
           "EFFECT_WORDS", "CHANGES", "CLASSIFIERS", "FAILED", "label"]
