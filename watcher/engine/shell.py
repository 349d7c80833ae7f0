"""What a shell command line or an SQL statement may change: ``none``, ``read``, ``write``
or ``unknown``.

A repeat is a loop only when nothing between the repeats could change what the repeated
call sees; an edit between two runs of the same test makes them iteration. Tool calls of
a shell tool carry their effect in the command text, so it is read from there: every
simple command of the line (``;``, ``&&``, ``||``, ``|``, ``$(...)``) is classified by
its program and flags, and the line takes the strongest effect of its parts (``write``
above ``unknown`` above ``read`` above ``none``). A redirection to a file (``>``,
``>>``, ``tee``) writes, whatever the program. The vocabulary (which programs read,
which write, which flags make a reader write) is data, in :class:`ShellWords`; the
built-in words are in ``rules/effects.yaml``.

What it cannot know: a program it does not list (a script, ``python``, ``make``) is
``unknown``; a persistent shell's ``cd`` or ``export`` is taken as reading, not as a
change; aliases and functions defined earlier are not followed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

NONE: Final = "none"
READ: Final = "read"
WRITE: Final = "write"
UNKNOWN: Final = "unknown"
EFFECTS: Final = (NONE, READ, WRITE, UNKNOWN)
# which effect wins when a line has several parts
_RANK: Final = {NONE: 0, READ: 1, UNKNOWN: 2, WRITE: 3}

MAX_LINE: Final = 8000  # characters of a command line read; a longer one is cut
MEMO_LINE: Final = 512  # lines up to this long are remembered (agents repeat short commands)
MEMO_SIZE: Final = 1024  # at most this many, for every sample of a rule set
_MAX_DEPTH: Final = 3  # nested ``bash -c '...'`` followed
_MAX_HEREDOCS: Final = 8  # here-documents read in one line; more: the effect is not known

# one token of a command line, after the spaces before it (absorbed: a third of the
# tokens of the shared corpus's commands were spaces, each a match of its own): a new line,
# a here-document, a redirection, an operator, a word, or the end of the line. Runs of
# plain characters and quoted strings are taken whole and possessively (a character at a
# time was a third of the watcher's CPU on tool calls; possessive: an unclosed quote
# fails at once, not by trying every way to split the run before it)
_TOKEN: Final = re.compile(
    r"""[ \t\r]*+(?:"""
    r"""(?P<nl>\n)"""
    r"""|(?P<heredoc><<-?[ \t]*(?P<hq>['"]?)(?P<hdelim>[\w.-]+)(?P=hq))"""
    r"""|(?P<redir>(?:\d+|&)?>>?(?:&\d*-?|\|)?|\d*<>|<<<|\d*<(?!\()&?)"""
    r"""|(?P<op>&&|\|\||\|&|[;&|()`]|\$\()"""
    r"""|(?P<word>(?:[^\s;&|()<>`'"\\]++|\\.|'[^']*+'|"(?:[^"\\]++|\\.)*+"|\$\(|<(?=\())++)"""
    r"""|(?P<end>\Z))""",
    re.S,
)
# characters whose absence makes a line one simple command of plain words (quoting,
# operators, expansion)
_SPECIAL: Final = tuple(";&|<>()`$'\"\\\n")
_ASSIGN: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\[[^\]]*\])?\+?=")
_QUOTES: Final = re.compile(r"""'([^']*)'|"((?:\\.|[^"\\])*)"|\\(.)""", re.S)
# programs whose ``-c`` argument is a command line of its own
_SHELLS: Final = ("bash", "sh", "zsh", "dash")
# redirection targets that are not files
_NOT_FILES: Final = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty",
                               "-", "&1", "&2"})


def unquote(word: str) -> str:
    """A shell word without its quotes and escapes (what the program receives)."""
    if "'" not in word and '"' not in word and "\\" not in word:
        return word
    return _QUOTES.sub(lambda m: m.group(1) if m.group(1) is not None else
                       (m.group(2) if m.group(2) is not None else m.group(3)), word)


@dataclass
class ShellWords:
    """The vocabulary of the shell classifier (``effects.shell`` in a library document).

    ``none``/``read``/``write``: programs with that effect. ``flags``: per program, flags
    that decide its effect when present (``sed -i`` writes, ``tar -t`` reads; the
    strongest present wins). ``subcommands``: programs whose first non-flag argument
    decides (``git status`` reads, ``git checkout`` writes); the ``*`` entry is the
    effect of any other subcommand. ``wrappers``: programs that run the rest of the line
    (``sudo``, ``timeout 5``, ``xargs``), with how many words of their own they take
    after their options. A program named nowhere is ``unknown``.
    """

    none: frozenset[str] = frozenset()
    read: frozenset[str] = frozenset()
    write: frozenset[str] = frozenset()
    flags: dict[str, dict[str, str]] = field(default_factory=dict)
    subcommands: dict[str, dict[str, str]] = field(default_factory=dict)
    wrappers: dict[str, int] = field(default_factory=dict)
    # flags after which the rest of the words (up to ``;`` or ``+``) are a command of their
    # own, classified like any (``find -exec md5sum {} +`` reads)
    execs: dict[str, frozenset[str]] = field(default_factory=dict)
    # a wrapper's options that take a value (``sudo -u app``, ``timeout -s KILL``)
    valued: dict[str, frozenset[str]] = field(default_factory=dict)

    def merged(self, other: ShellWords) -> ShellWords:
        """These words with ``other``'s on top: a program ``other`` lists keeps only the
        effect ``other`` gives it."""
        named = other.none | other.read | other.write
        return ShellWords(
            none=(self.none - named) | other.none,
            read=(self.read - named) | other.read,
            write=(self.write - named) | other.write,
            flags={**self.flags, **other.flags},
            subcommands={**self.subcommands, **other.subcommands},
            wrappers={**self.wrappers, **other.wrappers},
            execs={**self.execs, **other.execs},
            valued={**self.valued, **other.valued},
        )


def _special(text: str) -> bool:
    """Whether ``text`` holds a character of :data:`_SPECIAL`: a substring test per
    character (each a C scan) costs about a third of a regex character class's search
    of a 200-character command."""
    for c in _SPECIAL:
        if c in text:
            return True
    return False


class ShellClassifier:
    """Classifies command lines with one :class:`ShellWords`; remembers recent answers
    (agents repeat commands, and loops are exactly where they do)."""

    def __init__(self, words: ShellWords) -> None:
        self.words = words
        self._memo: dict[str, tuple[str, str]] = {}

    def classify(self, line: str) -> tuple[str, str]:
        """``(effect, program)``: the line's effect and the program that decided it."""
        memo = self._memo
        short = len(line) <= MEMO_LINE
        if short:
            hit = memo.get(line)
            if hit is not None:
                return hit
        cut = len(line) > MAX_LINE
        text = line[:MAX_LINE] if cut else line
        effect, prog = self._line(text, 0)
        if cut and effect != WRITE:
            effect = UNKNOWN  # the unread rest could write
        hit = (effect, prog)
        if short:
            if len(memo) >= MEMO_SIZE:
                memo.clear()
            memo[line] = hit
        return hit

    def _line(self, text: str, depth: int) -> tuple[str, str]:
        if not _special(text):  # the common case: one command of plain words
            # most programs are decided by their name alone (no assignment or wrapper
            # before them, no flags or subcommand to read): then the rest of the line
            # need not be split into words (plain words have no quotes to take off)
            first = text.split(None, 1)
            if first:
                w = self.words
                prog = first[0].rsplit("/", 1)[-1]
                if (prog not in w.wrappers and prog not in _SHELLS and not w.execs.get(prog)
                        and not w.flags.get(prog) and prog not in w.subcommands
                        and not _ASSIGN.match(first[0])):
                    return self._program(prog, [])
            return self._simple(text.split(), depth)
        commands, redirect = _split(text)
        if commands is None:
            return UNKNOWN, ""
        if redirect:
            return WRITE, redirect  # nothing is stronger
        best, prog = NONE, ""
        for words in commands:
            eff, p = self._simple(words, depth)
            if _RANK[eff] > _RANK[best] or not prog:
                best, prog = eff, p
                if best == WRITE:
                    break
        return best, prog

    def _simple(self, words: list[str], depth: int) -> tuple[str, str]:
        """One simple command's effect (its words still quoted)."""
        w = self.words
        i = 0
        n = len(words)
        while i < n and _ASSIGN.match(words[i]):
            i += 1
        while i < n:
            prog = unquote(words[i]).rsplit("/", 1)[-1]
            takes = w.wrappers.get(prog)
            if takes is None:
                break
            i += 1
            valued = w.valued.get(prog, frozenset())
            while i < n and words[i].startswith("-"):  # the wrapper's own options
                i += 2 if unquote(words[i]) in valued else 1
            i += takes
            while i < n and _ASSIGN.match(words[i]):  # env NAME=value cmd
                i += 1
        if i >= n:
            return NONE, ""
        prog = unquote(words[i]).rsplit("/", 1)[-1]
        args = words[i + 1:]
        if prog in _SHELLS and depth < _MAX_DEPTH:
            for k, a in enumerate(args):
                if a == "-c" or (a.startswith("-") and not a.startswith("--") and "c" in a):
                    if k + 1 < len(args):
                        return self._line(unquote(args[k + 1]), depth + 1)
            return UNKNOWN, prog
        execs = w.execs.get(prog)
        if execs:
            return self._execs(prog, args, execs, depth)
        return self._program(prog, args)

    def _program(self, prog: str, args: list[str]) -> tuple[str, str]:
        """A program's effect from its flags, subcommand or list."""
        w = self.words
        flags = w.flags.get(prog)
        if flags:
            best, which = "", ""
            for a in args:
                c = a[:1]
                if c != "-" and c != "'" and c != '"' and c != "\\":
                    continue  # unquoted, it cannot start with "-" either
                ua = unquote(a)
                if not ua.startswith("-"):
                    continue
                for f, eff in flags.items():
                    if _has_flag(ua, f) and (not best or _RANK[eff] > _RANK[best]):
                        best, which = eff, f
            if best:
                return best, f"{prog} {which}"
        subs = w.subcommands.get(prog)
        if subs is not None:
            sub = next((unquote(a) for a in args if not a.startswith("-")), "")
            eff = subs.get(sub) or subs.get("*", UNKNOWN)
            return eff, f"{prog} {sub}" if sub else prog
        if prog in w.none:
            return NONE, prog
        if prog in w.write:
            return WRITE, prog
        if prog in w.read:
            return READ, prog
        return UNKNOWN, prog

    def _execs(self, prog: str, args: list[str], execs: frozenset[str],
               depth: int) -> tuple[str, str]:
        """A program that runs commands given after some of its flags (``find -exec``):
        the strongest effect of the program itself and of those commands."""
        rest: list[str] = []
        runs: list[list[str]] = []
        i = 0
        while i < len(args):
            if unquote(args[i]) in execs:
                j = i + 1
                while j < len(args) and unquote(args[j]) not in (";", "+"):
                    j += 1
                runs.append(args[i + 1:j])
                i = j + 1
                continue
            rest.append(args[i])
            i += 1
        best, label = self._program(prog, rest)
        for words in runs:
            eff, p = self._simple(words, depth + 1) if depth < _MAX_DEPTH else (UNKNOWN, "")
            if _RANK[eff] > _RANK[best]:
                best, label = eff, f"{prog} -exec {p}".strip()
        return best, label


def _has_flag(arg: str, flag: str) -> bool:
    """Whether a (unquoted) argument gives ``flag``: itself, ``--flag=value``, or a short
    flag inside a cluster of single-letter flags (``-ni`` gives ``-i``; ``-i.bak`` too)."""
    if arg == flag:
        return True
    if flag.startswith("--"):
        return arg.startswith(flag + "=")
    if len(flag) == 2 and not arg.startswith("--"):
        letters = arg[1:]
        for ch in letters:
            if ch == flag[1]:
                return True
            if not ch.isalpha():
                return False
    return False


def _split(text: str) -> tuple[list[list[str]] | None, str]:
    """The simple commands of a line (lists of words, quotes kept) and the target of the
    first redirection to a file ("" when none). ``None`` when the line does not parse (an
    unclosed quote, a stray character, too many here-documents): its effect is then not
    known."""
    commands: list[list[str]] = []
    cur: list[str] = []
    redirect = ""
    heredocs: list[str] = []
    seen_heredocs = 0
    want_target = False
    skip_word = False
    pos = 0
    n = len(text)
    match = _TOKEN.match
    while pos < n:
        m = match(text, pos)
        if m is None:
            return None, ""
        kind = m.lastgroup
        pos = m.end()
        if kind == "end":  # spaces to the end of the line
            break
        if kind == "word":
            word = m.group("word")
            if skip_word:  # the file an input redirection reads
                skip_word = False
                continue
            if want_target:
                want_target = False
                target = unquote(word)
                if target not in _NOT_FILES and not redirect:
                    redirect = f"> {target}"
                continue
            cur.append(word)
            continue
        if kind == "heredoc":
            seen_heredocs += 1
            if seen_heredocs > _MAX_HEREDOCS:
                return None, ""
            heredocs.append(m.group("hdelim"))
            continue
        if kind == "redir":
            op = m.group("redir")
            want_target = op[-1] == ">" or op.endswith(">|")
            skip_word = not want_target and not op.endswith("&")
            continue
        # a separator (an operator or a new line) ends the simple command
        want_target = skip_word = False
        if cur:
            commands.append(cur)
            cur = []
        if kind == "nl" and heredocs:
            pos = _after_heredocs(text, pos, heredocs)
            heredocs = []
    if cur:
        commands.append(cur)
    return commands, redirect


def _after_heredocs(text: str, pos: int, delims: list[str]) -> int:
    """Where the line goes on after the bodies of its here-documents: each body ends at a
    line holding only its delimiter (``<<-`` may indent it).

    A line that is its delimiter holds it, so only the lines where ``str.find`` meets
    the delimiter are looked at (a Python loop over a written file's every line was a
    fifth of the classifier's time on the shared corpus's commands); the answer is
    reading every line's (a test holds the two equal)."""
    n = len(text)
    for delim in delims:
        at = text.find(delim, pos)
        while True:
            if at < 0:  # (an empty delimiter cannot be: ``[\w.-]+``)
                return n  # no line closes this body: the rest of the text is in it
            start = text.rfind("\n", pos, at) + 1 or pos
            nl = text.find("\n", at)
            end = n if nl < 0 else nl
            if text[start:end].strip() == delim:
                pos = n if nl < 0 else nl + 1
                break
            if nl < 0:
                return n
            at = text.find(delim, nl + 1)
    return pos


_SQL_WORD: Final = re.compile(r"\s*\(?\s*([A-Za-z]+)")
_SQL_WRITES: Final = re.compile(
    r"\b(?:insert|update|delete|replace|merge|create|drop|alter|truncate|rename|grant|"
    r"revoke|call|load|copy)\b", re.I)


def _sql_uncommented(text: str) -> str:
    """SQL without its comments (``--``, ``#`` to the end of a line, ``/* */``), in one
    pass (a regex with a lazy ``.*?`` is quadratic on many unclosed ``/*``)."""
    if "--" not in text and "#" not in text and "/*" not in text:
        return text
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        j = min((k for k in (text.find("--", i), text.find("#", i), text.find("/*", i))
                 if k >= 0), default=n)
        out.append(text[i:j])
        if j >= n:
            break
        if text.startswith("/*", j):
            k = text.find("*/", j + 2)
            i = n if k < 0 else k + 2
        else:
            k = text.find("\n", j)
            i = n if k < 0 else k
        out.append(" ")
    return "".join(out)


@dataclass
class SqlWords:
    """The vocabulary of the SQL classifier (``effects.sql``): statements by first word."""

    read: frozenset[str] = frozenset()
    write: frozenset[str] = frozenset()
    none: frozenset[str] = frozenset()


def sql_effect(text: str, words: SqlWords) -> tuple[str, str]:
    """``(effect, keyword)`` of one or more SQL statements: each by its first keyword, a
    ``WITH`` by whether it holds a writing statement; the strongest wins."""
    text = _sql_uncommented(text[:MAX_LINE])
    best, kw = NONE, ""
    for stmt in text.split(";"):
        m = _SQL_WORD.match(stmt)
        if m is None:
            continue
        word = m.group(1).lower()
        if word == "with":
            eff = WRITE if _SQL_WRITES.search(stmt) else READ
        elif word in words.read:
            eff = READ
        elif word in words.write:
            eff = WRITE
        elif word in words.none:
            eff = NONE
        else:
            eff = UNKNOWN
        if _RANK[eff] >= _RANK[best]:
            best, kw = eff, word.upper()
    if len(text) >= MAX_LINE and best != WRITE:
        best = UNKNOWN
    return (best, kw) if kw else (UNKNOWN, "")
