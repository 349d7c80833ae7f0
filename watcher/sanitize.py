"""Make agent-written text safe to show to a person, a terminal, a browser or an LLM.

Completions, tool arguments and tool results are written by the evaluated
agent, which may (by accident or on purpose) emit terminal escape sequences,
bidi overrides, invisible characters, Markdown/HTML that fakes the watcher's own
output, or megabyte-long lines. Every reporter passes such text through
:func:`clean_text` and then a format-specific escaper, and labels it with
:func:`quote_agent_text` so it cannot be mistaken for the watcher's words.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from functools import lru_cache

DEFAULT_MAX_LEN = 2000
DEFAULT_MAX_LINE_LEN = 400
DEFAULT_MAX_LINES = 40

UNTRUSTED_LABEL = "agent text (untrusted)"
QUOTE_OPEN = "«"
QUOTE_CLOSE = "»"
NEWLINE_MARK = "⏎"

# Escape sequences are removed whole. String-type sequences (OSC, DCS, SOS, PM,
# APC) are only removed when terminated within a bounded length; otherwise just
# the introducer goes (the fallback branch), so an unterminated OSC cannot
# swallow the rest of the evidence the way it would in a terminal.
_ESCAPE_RE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]{0,64}[ -/]{0,16}[@-~]?"  # CSI (SGR, cursor moves, clears)
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])"  # OSC / DCS / SOS / PM / APC ...
    r"[^\x07\x1b\x9c]{0,4096}(?:\x07|\x1b\\|\x9c)"  # ... up to BEL or ST
    r"|\x1b[ -/]{0,16}[0-~]?"  # any other escape (charset, keypad, lone ESC)
)

# Bidi embeddings/overrides/isolates and marks; all are Unicode category Cf,
# which also covers zero-width chars, BOM, soft hyphen and tag characters
# (used to smuggle invisible instructions to LLMs). Variation selectors are Mn
# but are likewise invisible carriers of hidden data.
_INVISIBLE_EXTRA = frozenset([*range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0), 0x180E,
                              0x3164, 0x115F, 0x1160, 0xFFA0])
# code points a table keeps once met (each a few dozen bytes); past that, a code point
# not kept is judged again each time it is met, so text of every code point cannot
# grow the table without bound
_KEEP = 1 << 16


def _invisible(c: int) -> bool:
    return c in _INVISIBLE_EXTRA or unicodedata.category(chr(c)) == "Cf"


def _cleaned(c: int) -> str | None:
    """What :func:`clean_text` shows for code point ``c`` (``None``: nothing)."""
    if c < 0x20:
        return "\n" if c == 0x0A else "  " if c == 0x09 else chr(0x2400 + c)  # ␀ ␇ ␛
    if c < 0x7F:
        return chr(c)
    if c == 0x7F:
        return "␡"
    if c < 0xA0:
        return "\n" if c == 0x85 else "\ufffd"  # NEL; other C1 controls
    if c in (0x2028, 0x2029):  # LINE and PARAGRAPH SEPARATOR
        return "\n"
    if _invisible(c):
        return None
    if 0xD800 <= c <= 0xDFFF:  # lone surrogates would break encoding
        return "\ufffd"
    return chr(c)


def _shown(c: int) -> str | None:
    """What :func:`visible_text` shows for ``c``: as :func:`_cleaned`, but nothing
    vanishes: a control becomes a symbol (newline and tab too), an invisible code point
    (and a C1 control or line separator) its ``<U+202E>`` name."""
    if c < 0x20:
        return chr(0x2400 + c)
    if 0x80 <= c < 0xA0 or c in (0x2028, 0x2029) or (c > 0x7F and _invisible(c)):
        return f"<U+{c:04X}>"
    return _cleaned(c)


class _Table(dict[int, str | None]):
    """A ``str.translate`` table (code point to replacement, ``None`` to drop it) filled
    as code points are met: ``translate`` asks the mapping for each character, and a miss
    is judged here. Judging all 1,114,112 code points up front was 0.1 s of CPU in every
    process that printed a line of agent text."""

    __slots__ = ("_rule",)

    def __init__(self, rule: Callable[[int], str | None]) -> None:
        super().__init__()
        self._rule = rule

    def __missing__(self, c: int) -> str | None:
        to = self._rule(c)
        if len(self) < _KEEP:
            self[c] = to
        return to


@lru_cache(maxsize=1)
def _translate_table() -> _Table:
    """Every control or invisible code point to its replacement (for :func:`clean_text`)."""
    return _Table(_cleaned)


def _strip_controls(s: str) -> str:
    s = _ESCAPE_RE.sub("", s)
    s = s.replace("\r\n", "\n")
    return s.translate(_translate_table())


def _cap_lines(s: str, max_lines: int | None, max_line_len: int | None, exact: bool) -> str:
    lines = s.split("\n")
    if max_line_len is not None:
        last = len(lines) - 1
        lines = [
            ln if len(ln) <= max_line_len
            else ln[:max_line_len] + (
                f"… [+{len(ln) - max_line_len} chars]" if exact or i < last else ""
            )
            for i, ln in enumerate(lines)
        ]
    if max_lines is not None and len(lines) > max_lines:
        extra = len(lines) - max_lines
        lines = [*lines[:max_lines], f"… [+{extra} more lines]"]
    return "\n".join(lines)


def clean_text(
    s: object,
    max_len: int = DEFAULT_MAX_LEN,
    *,
    one_line: bool = False,
    max_line_len: int | None = DEFAULT_MAX_LINE_LEN,
    max_lines: int | None = DEFAULT_MAX_LINES,
) -> str:
    """Return ``s`` with nothing that can move a cursor, hide text or run on forever.

    Escape sequences are removed, other control characters become visible
    symbols (``␛``, ``␇``), bidi and zero-width characters are dropped, and the
    result is capped (``max_len`` chars overall, ``max_line_len`` per line,
    ``max_lines`` lines). With ``one_line`` newlines are shown as ``⏎``. The
    input is cut *before* processing, so a 1 MB line costs no more than a short one.
    """
    if s is None:
        return ""
    if not isinstance(s, str):
        s = str(s)
    original = len(s)
    # Escapes and invisibles only shrink text, so 4x the cap (plus slack) is
    # plenty to fill max_len after stripping.
    budget = max_len * 4 + 256
    cut = original > budget
    if cut:
        s = s[:budget]
    s = _strip_controls(s)
    if one_line:
        s = s.strip("\n").replace("\n", f" {NEWLINE_MARK} ")
        if max_line_len is not None and max_line_len < max_len:
            max_len = max_line_len
    else:
        s = _cap_lines(s, max_lines, max_line_len, exact=not cut)
    if len(s) > max_len:
        s = s[:max_len]
        cut = True
    if cut:
        s += f"… [truncated; {original} chars in total]"
    return s


@lru_cache(maxsize=1)
def _visible_table() -> _Table:
    """Like :func:`_translate_table`, but nothing vanishes (:func:`_shown`)."""
    return _Table(_shown)


def visible_text(s: object, max_len: int = 200) -> str:
    """One line in which every character of ``s`` can be seen: for names and ids.

    :func:`clean_text` removes escape sequences whole, which suits prose; but an id such
    as ``ESC[31mrepeatESC[0m`` cleaned that way reads ``repeat``, the id of another
    sample. Here each control character is shown (``␛[31mrepeat␛[0m``) and each
    invisible one named (``<U+202E>``), so nothing can reach the terminal, and a name
    that is not what it looks like does not look plain.
    """
    if s is None:
        return ""
    text = s if isinstance(s, str) else str(s)
    shown = text[:max_len].translate(_visible_table())
    return shown + (f"… [{len(text)} chars]" if len(text) > max_len else "")


def exact_text(s: object, max_len: int = 300) -> str:
    """Every character of ``s`` as ASCII, escaped where it is not plain (``\\x1b``,
    ``\\u200b``, ``\\u0430``): for a confirmation that must tell two ids apart when they
    only look alike (an invisible character, a Cyrillic ``а`` for a Latin ``a``)."""
    text = s if isinstance(s, str) else str(s)
    out = text[:max_len].encode("ascii", "backslashreplace").decode("ascii")
    out = "".join(c if " " <= c <= "~" else f"\\x{ord(c):02x}" for c in out)
    return out + (f"… [{len(text)} chars]" if len(text) > max_len else "")


def _shell_word(word: str) -> str:
    """One shell word: ``shlex.quote`` when every character is printable, else ANSI-C
    quoting (``$'…'``, bash and zsh) with each other character escaped, so the text
    holds no control or invisible character and the shell still gets the exact word."""
    import shlex

    if word.isprintable():
        return shlex.quote(word)
    out = []
    for c in word:
        if c in "\\'":
            out.append("\\" + c)
        elif c.isprintable() and c != "\x7f":
            out.append(c)
        elif ord(c) < 0x100:
            out.append(f"\\x{ord(c):02x}")
        elif ord(c) < 0x10000:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(f"\\U{ord(c):08x}")
    return "$'" + "".join(out) + "'"


def printable_command(command: str) -> str:
    """A shell command (already shell-quoted) re-quoted so that it holds only printable
    characters: what is copied to a clipboard or shown in a toast must not carry an
    id's escape sequences (``ESC ] 52`` sets the clipboard, ``ESC ] 0`` the window
    title) into a terminal or a pasted command line."""
    import shlex

    if command.isprintable():
        return command
    try:
        words = shlex.split(command)
    except ValueError:
        return visible_text(command, 2000)
    return " ".join(_shell_word(w) for w in words)


def neutralise_quotes(s: str) -> str:
    """Replace our quote delimiters so agent text cannot close its own quote."""
    return s.replace(QUOTE_OPEN, "‹").replace(QUOTE_CLOSE, "›")


def quote_agent_text(
    s: object,
    max_len: int = DEFAULT_MAX_LEN,
    *,
    one_line: bool = True,
    label: str = UNTRUSTED_LABEL,
    indent: str = "  ",
) -> str:
    """Render agent text as a labelled quote: ``agent text (untrusted): «…»``.

    The label says whose words these are; the text's own guillemets are
    replaced so it cannot end the quote early and continue as if the watcher
    were speaking. In multi-line form every continuation line starts with
    ``indent + "┊ "`` so no line of agent text can pass for a line of the report.
    """
    body = neutralise_quotes(clean_text(s, max_len, one_line=one_line))
    if one_line or "\n" not in body:
        return f"{label}: {QUOTE_OPEN}{body}{QUOTE_CLOSE}"
    lines = body.split("\n")
    rest = "".join(f"\n{indent}┊ {ln}" for ln in lines[1:])
    return f"{label}: {QUOTE_OPEN}{lines[0]}{rest}{QUOTE_CLOSE}"


# --- Markdown -----------------------------------------------------------------

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~&\"'=:$^%@])")


def md_escape(s: object, max_len: int = DEFAULT_MAX_LEN) -> str:
    """Escape text for inline Markdown (one line; every ASCII punctuation mark escaped).

    CommonMark allows a backslash before any ASCII punctuation, so escaping all
    of them defeats emphasis, links, headings, tables, autolinks and raw HTML
    without having to reason about context. Newlines are flattened, so the text
    cannot start a heading or a fake report line.
    """
    return _MD_SPECIAL.sub(r"\\\1", clean_text(s, max_len, one_line=True, max_line_len=max_len))


def _longest_run(s: str, ch: str) -> int:
    best = run = 0
    for c in s:
        run = run + 1 if c == ch else 0
        best = max(best, run)
    return best


def md_code(s: object, max_len: int = 300) -> str:
    """An inline code span the text cannot break out of (fence longer than any backtick run)."""
    body = clean_text(s, max_len, one_line=True, max_line_len=max_len)
    fence = "`" * (_longest_run(body, "`") + 1)
    if body.startswith("`") or body.endswith("`") or not body.strip():
        body = f" {body} "
    return f"{fence}{body}{fence}"


def md_code_block(
    s: object,
    max_len: int = DEFAULT_MAX_LEN,
    *,
    info: str = "text",
    max_line_len: int | None = DEFAULT_MAX_LINE_LEN,
) -> str:
    """A fenced code block whose fence is longer than any backtick run in the text.

    Put it at the top level of the document: inside a list item, a less
    indented line would end the item and with it the block.
    """
    body = clean_text(s, max_len, max_line_len=max_line_len)
    fence = "`" * max(3, _longest_run(body, "`") + 1)
    return f"{fence}{info}\n{body}\n{fence}"


# --- HTML ---------------------------------------------------------------------


def html_text(s: object, max_len: int = DEFAULT_MAX_LEN, *, one_line: bool = False) -> str:
    """Clean then HTML-escape (quotes included), safe in element content and attributes."""
    import html  # (here: its entity table is 1.5 ms of every start-up that prints none)

    return html.escape(clean_text(s, max_len, one_line=one_line), quote=True)
