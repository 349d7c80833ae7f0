"""Hostile agent text must come out inert for terminals, Markdown, HTML and readers."""

from __future__ import annotations

import html
import re
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from watcher import sanitize
from watcher.sanitize import (
    NEWLINE_MARK,
    UNTRUSTED_LABEL,
    clean_text,
    html_text,
    md_code,
    md_code_block,
    md_escape,
    quote_agent_text,
    visible_text,
)

BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
ZERO_WIDTH = "\u200b\u200c\u200d\u2060\ufeff\u00ad"
FAKE_ALL_CLEAR = "## inspect-watch says: all clear"
MD_HOSTILE = (
    f"**bold** _it_ [click](javascript:alert(1)) <img src=x onerror=alert(1)>\n{FAKE_ALL_CLEAR}\n"
    "# H1\n| a | b |\n|---|---|\n> quote\n- item\n```` code ```\n<script>alert(1)</script>"
)


def md() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": True}).enable("table").enable("strikethrough")


def assert_terminal_safe(out: str, *, allow_newline: bool = True) -> None:
    for ch in out:
        cat = unicodedata.category(ch)
        if ch == "\n" and allow_newline:
            continue
        assert cat not in ("Cc", "Cf", "Cs"), f"unsafe char U+{ord(ch):04X} in {out!r}"


# --- clean_text -------------------------------------------------------------------


def test_osc_title_and_screen_clear_are_removed() -> None:
    out = clean_text("before\x1b]0;pwned\x07mid\x1b[2J\x1b[1;1Hafter\x1b[31mred\x1b[0m")
    assert out == "beforemidafterred"


def test_osc_with_st_terminator_and_c1_csi_removed() -> None:
    out = clean_text("a\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\b\x9b2Jc\x90dcs\x9cd")
    assert out == "alinkbcd"


def test_unterminated_osc_keeps_the_text_visible() -> None:
    # A terminal would swallow everything after an unterminated OSC; we must not.
    out = clean_text("ok\x1b]0;the rest of the evidence")
    assert "the rest of the evidence" in out
    assert "\x1b" not in out


def test_other_controls_become_visible_symbols() -> None:
    out = clean_text("bell\x07 nul\x00 bs\x08 cr\rX del\x7f c1\x85next")
    assert "␇" in out and "␀" in out and "␈" in out and "␍" in out and "␡" in out
    assert_terminal_safe(out)


def test_crlf_normalised_and_one_line_flattens() -> None:
    assert clean_text("a\r\nb") == "a\nb"
    flat = clean_text("a\nb\u2028c", one_line=True)
    assert "\n" not in flat and flat.count(NEWLINE_MARK) == 2


def test_bidi_and_zero_width_removed() -> None:
    out = clean_text(f"safe{BIDI}text{ZERO_WIDTH}\U000e0041\U000e0042end")
    assert out == "safetextend"


def test_megabyte_line_is_cut_first_and_says_so() -> None:
    big = "A" * 1_000_000
    out = clean_text(big, max_len=500)
    assert len(out) < 600
    assert out.startswith("A" * 100)
    assert "1000000 chars in total" in out


def test_megabyte_of_escapes_stays_bounded() -> None:
    out = clean_text("\x1b[31m" * 200_000 + "tail", max_len=100)
    assert len(out) < 200 and "\x1b" not in out


def test_line_and_block_caps() -> None:
    out = clean_text("\n".join(["x" * 1000] * 100), max_len=100_000, max_line_len=50,
                     max_lines=5)
    lines = out.split("\n")
    assert len(lines) == 6 and lines[-1] == "… [+95 more lines]"
    assert lines[0] == "x" * 50 + "… [+950 chars]"


def test_non_strings_and_none() -> None:
    assert clean_text(None) == ""
    assert clean_text(42) == "42"
    assert clean_text("\ud800lone") == "\ufffdlone"


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec=None), max_size=300))
def test_property_clean_text_is_terminal_safe(s: str) -> None:
    out = clean_text(s, max_len=200)
    assert_terminal_safe(out)
    assert_terminal_safe(clean_text(s, 200, one_line=True), allow_newline=False)


def test_visible_text_shows_what_clean_text_would_hide() -> None:
    """For names and ids: an escape sequence stripped whole would leave an id that reads
    as another one; here it is shown, and invisible characters are named."""
    assert clean_text("\x1b[31mrepeat\x1b[0m", one_line=True) == "repeat"
    assert visible_text("\x1b[31mrepeat\x1b[0m") == "␛[31mrepeat␛[0m"
    assert visible_text("a\u202eb\u200bc\nd\te\x85") == "a<U+202E>b<U+200B>c␊d␉e<U+0085>"
    assert visible_text("x" * 50, 10) == "x" * 10 + "… [50 chars]"
    assert visible_text(None) == "" and visible_text(7) == "7"


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec=None), max_size=300))
def test_property_visible_text_is_one_safe_line(s: str) -> None:
    assert_terminal_safe(visible_text(s), allow_newline=False)


# --- quoting ----------------------------------------------------------------------


def _eager_tables() -> tuple[dict[int, str | None], dict[int, str | None]]:
    """The tables as they were built before they were filled lazily: every code point
    judged up front (0.1 s). The lazy tables must answer exactly as these did."""
    extra = [*range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0), 0x180E, 0x3164, 0x115F,
             0x1160, 0xFFA0]
    table: dict[int, str | None] = {c: chr(0x2400 + c) for c in range(0x20)}
    table[0x0A] = "\n"
    table[0x09] = "  "
    table[0x7F] = "\u2421"
    table.update({c: "\ufffd" for c in range(0x80, 0xA0)})
    table[0x85] = table[0x2028] = table[0x2029] = "\n"
    for c in range(0x110000):
        if unicodedata.category(chr(c)) == "Cf":
            table[c] = None
        elif 0xD800 <= c <= 0xDFFF:
            table[c] = "\ufffd"
    table.update(dict.fromkeys(extra))
    visible: dict[int, str | None] = {}
    for c, to in table.items():
        if c < 0x20:
            visible[c] = chr(0x2400 + c)
        elif to is None or 0x80 <= c < 0xA0 or c in (0x2028, 0x2029):
            visible[c] = f"<U+{c:04X}>"
        else:
            visible[c] = to
    return table, visible


def test_lazy_tables_answer_for_every_code_point_as_the_eager_ones_did() -> None:
    eager, eager_visible = _eager_tables()
    lazy, lazy_visible = sanitize._Table(sanitize._cleaned), sanitize._Table(sanitize._shown)
    for c in range(0x110000):
        # (translate leaves a code point the table lacks as it is)
        assert lazy[c] == eager.get(c, chr(c)), hex(c)
        assert lazy_visible[c] == eager_visible.get(c, chr(c)), hex(c)
    # every code point met, but only the first _KEEP kept: the table stays bounded
    assert len(lazy) == sanitize._KEEP
    assert lazy[0x10FFFF] == chr(0x10FFFF) and len(lazy) == sanitize._KEEP


def test_translate_through_the_lazy_table_drops_and_replaces() -> None:
    text = "a\u202eb\x1bc\u200bd\ud800e\u3164f\x85g"
    assert text.translate(sanitize._translate_table()) == "ab\u241bcd\ufffdef\ng"
    assert visible_text(text) == "a<U+202E>b\u241bc<U+200B>d\ufffde<U+3164>f<U+0085>g"


def test_quote_labels_and_cannot_be_closed_early() -> None:
    q = quote_agent_text("done» inspect-watch: nothing to see «again")
    assert q.startswith(f"{UNTRUSTED_LABEL}: «") and q.endswith("»")
    assert q.count("»") == 1 and q.count("«") == 1


def test_multiline_quote_marks_every_continuation_line() -> None:
    q = quote_agent_text(f"first\n{FAKE_ALL_CLEAR}\nthird", one_line=False)
    lines = q.split("\n")
    assert lines[0] == f"{UNTRUSTED_LABEL}: «first"
    assert all(ln.startswith("  ┊ ") for ln in lines[1:])
    assert not any(ln.startswith("##") for ln in lines)


def test_one_line_quote_has_no_newline() -> None:
    q = quote_agent_text(f"a\n{FAKE_ALL_CLEAR}")
    assert "\n" not in q and NEWLINE_MARK in q


# --- Markdown ---------------------------------------------------------------------


def test_md_escape_renders_as_plain_text() -> None:
    rendered = md().render(md_escape(MD_HOSTILE, 5000))
    for tag in ("<strong", "<em", "<a ", "<h1", "<h2", "<table", "<img", "<script", "<code",
                "<blockquote", "<li"):
        assert tag not in rendered
    # The words survive, escaped: the text is shown, not interpreted.
    assert "inspect-watch says: all clear" in html.unescape(rendered)


def test_md_code_span_cannot_be_broken_out_of() -> None:
    for payload in ["a ` b", "``` x ```", "`lead", "trail`", "````", "`a`<b>`"]:
        span = md_code(payload + " [x](javascript:y)")
        rendered = md().render(span)
        codes = re.findall(r"<code>(.*?)</code>", rendered)
        assert len(codes) == 1, rendered
        assert html.unescape(codes[0]).strip() == (payload + " [x](javascript:y)").strip()
        assert "<a " not in rendered


def test_md_code_block_contains_everything() -> None:
    block = md_code_block(MD_HOSTILE + "\n`````\n" + FAKE_ALL_CLEAR)
    rendered = md().render(block)
    assert rendered.count("<pre>") == 1
    assert "<h2" not in rendered and "<script" not in rendered
    assert rendered.rstrip().endswith("</code></pre>")


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("`*_[]()#<>!|\\\n ab"), max_size=80))
def test_property_md_code_block_is_one_block(s: str) -> None:
    tokens = md().parse(md_code_block(s))
    assert [t.type for t in tokens] == ["fence"]


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("`*_[]()#<>!|\\\n -=ab:"), max_size=80))
def test_property_md_escape_is_one_plain_paragraph(s: str) -> None:
    tokens = md().parse(md_escape(s))
    types = [t.type for t in tokens]
    assert types in ([], ["paragraph_open", "inline", "paragraph_close"])
    for t in tokens:
        for child in t.children or []:
            assert child.type in ("text", "softbreak", "text_special"), child.type


# --- HTML -------------------------------------------------------------------------


@pytest.mark.parametrize("payload", ["<script>alert(1)</script>", "</pre><h1>x</h1>",
                                     '" onmouseover="alert(1)', "&lt;already&gt;"])
def test_html_text_escapes(payload: str) -> None:
    out = html_text(payload)
    assert "<" not in out and ">" not in out and '"' not in out
    assert html.unescape(out) == payload
