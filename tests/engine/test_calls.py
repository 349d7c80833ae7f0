"""Call effects and failure recognition (engine/calls.py, engine/shell.py): the built-in
data (rules/effects.yaml, rules/failures.yaml) classified both ways, user extensions,
located errors, and the engine facts built on them (``changes_between``, ``ignore``,
``breaks``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.engine.util import episodes, load_text, run, tool
from watcher.engine import load_rules
from watcher.engine.calls import label
from watcher.engine.errors import RuleLoadErrors
from watcher.engine.shell import ShellClassifier, ShellWords, SqlWords, sql_effect

PACK = load_rules(user_dir=False)
CALLS = PACK.registry.calls


def shell(cmd: str, function: str = "bash") -> str:
    return CALLS.effect({"function": function, "args": {"cmd": cmd}})[0]


@pytest.mark.parametrize("cmd", [
    "cat a.py", "ls -la /srv | head -5", "grep -rn foo src/ | wc -l", "git status",
    "git log --oneline -5", "git diff HEAD~1", "cd /repo && git show abc123",
    "find . -name '*.py' | xargs grep -l foo", "sed -n '1,20p' a.py", "awk '{print $1}' f",
    "ls 2>/dev/null", "which python 2>&1 | head -1",
    "timeout 10 cat log.txt", "sudo -u app tail -n 50 /var/log/app.log",
    "find /x -type f -exec md5sum {} + | sort", "bash -c 'ls; cat a'", "pip list",
    "cat <<EOF\nrm -rf /\nEOF", "tar -tzf a.tgz", "unzip -l a.zip", "echo done; ls",
])
def test_read_only_shell_lines_are_reads(cmd: str) -> None:
    assert shell(cmd) == "read", cmd


@pytest.mark.parametrize("cmd", [
    "sed -i 's/a/b/' x.py", "sed -ni 's/a/b/p' x.py", "echo x > out.txt", "cat a >> b",
    "cat <<'EOF' > src/mod.py\nx = 1\nEOF", "tee out.log < in", "ls | tee listing.txt",
    "mv a b", "rm -rf build", "cp a b", "mkdir -p x", "touch f", "chmod +x run.sh",
    "pip install numpy", "apt-get install -y jq", "git checkout -- a.py", "git apply p.diff",
    "git commit -am x", "git stash", "find . -name '*.pyc' -delete",
    "find . -name x -exec rm {} \\;", "sort -o out.txt in.txt", "grep x y | xargs rm",
    "wget http://example.com/f", "curl -o f http://example.com", "patch -p1 < fix.diff",
    "cd /repo && sed -i s/x/y/ a.py && python t.py", "perl -pi -e 's/a/b/' f",
])
def test_changing_shell_lines_are_writes(cmd: str) -> None:
    assert shell(cmd) == "write", cmd


@pytest.mark.parametrize(("line", "split"), [
    ("  ls  -la\t\r", ([["ls", "-la"]], "")),
    ("a ;\tb  ", ([["a"], ["b"]], "")),
    ("echo x >   'out file'  ", ([["echo", "x"]], "> out file")),
    ("cat <<  EOF\nrm x\nEOF\n  ls ", ([["cat"], ["ls"]], "")),
    ("   ", ([], "")),
    ("", ([], "")),
    ("ls \x0b", (None, "")),  # a blank the shell does not take as one: does not parse
    ("grep 'open  ", (None, "")),
    # runs of plain characters and quoted strings are one word, escapes and all
    ('echo "a \\" b"x\\ y \'c d\'e', ([["echo", '"a \\" b"x\\ y', "'c d'e"]], "")),
    ('echo "' + "a b " * 2000 + "\\", (None, "")),  # never closed: does not parse
    ("a>b", ([["a"]], "> b")),
])
def test_lines_split_into_simple_commands(line: str, split: Any) -> None:
    """Blanks anywhere (before a token, at either end, inside a quote kept) split alike."""
    from watcher.engine.shell import _split

    assert _split(line) == split


@pytest.mark.parametrize("cmd", [
    "python reproduce.py", "pytest -q tests/test_a.py", "make", "./run.sh", "node app.js",
    "bash script.sh", "npm test", "cat a | python -c 'import sys'", "find . -exec ./x {} +",
    "grep 'unclosed", "x" * 9000,
])
def test_programs_it_does_not_know_are_unknown(cmd: str) -> None:
    assert shell(cmd) == "unknown", cmd


def test_no_op_commands_change_nothing() -> None:
    assert shell("sleep 5") == "none"
    assert shell("echo hello") == "none"
    assert CALLS.effect({"function": "think", "args": {"thought": "x"}})[0] == "none"
    assert CALLS.effect({"function": "calculate", "args": {"expression": "1+1"}})[0] == "none"


def test_standard_tools_and_named_tools() -> None:
    def eff(function: str, **args: Any) -> str:
        return CALLS.effect({"function": function, "args": args})[0]

    assert eff("text_editor", command="view", path="a") == "read"
    assert eff("text_editor", command="str_replace", path="a") == "write"
    assert eff("text_editor", command="teleport") == "unknown"
    assert eff("computer", action="screenshot") == "read"
    assert eff("computer", action="left_click") == "unknown"
    assert eff("web_search", query="x") == "read"
    assert eff("web_browser_click", element_id=3) == "unknown"
    assert eff("python", code="print(1)") == "unknown"
    assert eff("get_reservation_details", reservation_id="X") == "read"
    assert eff("book_reservation", user_id="u") == "write"
    assert eff("frobnicate") == "unknown"
    assert eff("sql", query="SELECT * FROM t; SHOW TABLES") == "read"
    assert eff("sql", query="UPDATE t SET a = 1") == "write"
    assert eff("sql", query="WITH x AS (DELETE FROM t RETURNING *) SELECT 1") == "write"
    assert eff("sql", query="/* note */ SELECT 1 -- trailing") == "read"
    # the content tier has no parsed arguments: a classified tool is then not known
    assert CALLS.effect({"function": "bash", "args": None})[0] == "unknown"


def test_evidence_labels_are_plain_and_short() -> None:
    """Names in ``between_calls`` are agent-chosen (a program name): shown only as plain
    characters, at most 40."""
    eff, name = CALLS.effect({"function": "bash", "args": {"cmd": "\x1b]52;c;evil\x07 x"}})
    shown = label(name)
    assert "\x1b" not in shown and "\x07" not in shown and len(label(name * 10)) <= 40


def test_hostile_command_lines_stay_cheap() -> None:
    """Untrusted text: the classifier's work is bounded (no backtracking blow-up)."""
    c = ShellClassifier(ShellWords())
    for line in ["<<a " * 3000 + "\n", "$" * 8000 + "'", "a|" * 4000, "'" * 7999]:
        assert c.classify(line)[0] in ("unknown", "none", "read", "write")
    assert sql_effect("/*" * 5000, SqlWords())[0] == "unknown"


def fail(text: str) -> str | None:
    assert CALLS.failures is not None
    return CALLS.failures.failure(text)


SH = "Bourne Shell Output: "
SQL = "MySQL Database Output: "
RC = "<returncode>{}</returncode>\n<output>\n{}\n</output>"


@pytest.mark.parametrize("text,sig", [
    (SH + "/bin/bash: line 1: foo: command not found\nReward: 0.0\n", "command-not-found"),
    (SQL + "Error executing query: Table 'db.t' doesn't exist\nReward: 0\n", "sql-error"),
    (SH + "awk: line 1: syntax error at source line 1\nReward: 0\n", "usage-error"),
    (SH + "find: invalid -size type `x'\nReward: 0\n", "usage-error"),
    (SH + " $1}': -c: line 1: unexpected EOF while looking for matching `''\n",
     "shell-syntax-error"),
    ("Error: payment amount does not add up", "error-message"),
    ('{"error": "reservation not found"}', "json-error"),
    (RC.format(2, "grep: x: No such file or directory"), "file-error"),
    (RC.format(127, ""), "exit-code"),
    (RC.format(1, "Traceback (most recent call last):\n  File x\nValueError: bad"),
     "python-traceback"),
    ("running...\nstep 2\nstep 3\nstep 4\nTraceback (most recent call last):\nKeyError: 'x'",
     "python-exception"),
    ("Observation: ls: cannot access 'x': No such file or directory", "file-error"),
    ("ERROR 1146 (42S02) at line 1: Table 'x.y' doesn't exist", "sql-error"),
    ("fatal: not a git repository (or any of the parent directories): .git", "error-message"),
    ("curl: (7) Failed to connect to localhost port 80", "http-error"),
    ("Command timed out after 180 seconds", "timeout"),
    ("Segmentation fault (core dumped)", "crash"),
])
def test_failures_are_recognised_wherever_the_output_says_so(text: str, sig: str) -> None:
    assert fail(text) == sig


@pytest.mark.parametrize("text", [
    "Bourne Shell Output: No output\nReward: 0.67\n",
    "MySQL Database Output: []\nReward: 0.0\n",
    "<returncode>1</returncode>\n<output>\n</output>",  # grep found nothing
    "<returncode>16</returncode>\n<output>\nmod.py:1:0: C0114: Missing docstring\n</output>",
    # a warning banner on every Python start-up, then success (exit code 0)
    "<returncode>0</returncode>\n<output>\nError processing line 1 of x.pth:\n\n  Traceback "
    "(most recent call last):\n    ImportError\n\nRemainder of file ignored\nok\n</output>",
    'src/io.c:42:    perror("open: No such file or directory");',
    "docs/faq.md:3:If you see 'bash: x: command not found', install x.",
    "2024-05-01 10:00 Error: retrying\n2024-05-01 10:01 Error: retrying",
    "abc123 Fix TypeError: in parser",
    "3 failed, 2 passed in 0.12s",
    # a reproduction script that prints the assertion it checks, without crashing
    "DeprecationWarning: old API\nrunning\nchecking\nAssertionError: expected 2, got 1",
    '{"result": "ok", "error": null}',
    "",
])
def test_error_words_quoted_in_successful_output_are_no_failure(text: str) -> None:
    assert fail(text) is None


def test_bounded_signatures_keep_their_bound_behind_an_unbounded_prefilter() -> None:
    """The one-pass prefilter drops upper bounds (a small UTF-8 program); each signature
    still holds its own: 240 characters before ``: -c: line N:`` may come, 300 may not,
    in ASCII and in other text alike."""
    assert CALLS.failures is not None and CALLS.failures.any_first is not None
    prefilter = CALLS.failures.any_first.__self__  # type: ignore[attr-defined]
    assert "{0,240}" not in prefilter.translated and "{0,}" in prefilter.translated
    for filler in ("x ", "é "):
        near = SH + filler * 100 + ": -c: line 1: unexpected EOF while looking for `''\n"
        far = SH + filler * 150 + ": -c: line 1: unexpected EOF while looking for `''\n"
        assert fail(near) == "shell-syntax-error"
        assert fail(far) is None


def test_user_effects_and_failures_extend_the_built_ins(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text(
        "effects:\n"
        "  tools:\n"
        "    - {tool: 'lookup_*', effect: write, reason: our lookups log a write}\n"
        "  shell:\n"
        "    read: [make]\n"
        "failures:\n"
        "  wrappers:\n"
        "    - {id: ours, regex: 'RESULT>>> '}\n"
        "  signatures:\n"
        "    - {id: our-tool, regex: 'OOPS '}\n")
    calls = load_rules(paths=[tmp_path], user_dir=False).registry.calls
    assert calls.effect({"function": "lookup_user", "args": {}})[0] == "write"  # ours first
    assert calls.effect({"function": "get_user", "args": {}})[0] == "read"  # built-in kept
    assert calls.effect({"function": "bash", "args": {"cmd": "make"}})[0] == "read"
    assert calls.failures is not None
    assert calls.failures.failure("RESULT>>> OOPS it broke") == "our-tool"
    assert calls.failures.failure("Error: still recognised") == "error-message"


def test_a_last_line_signature_without_literals_is_judged(tmp_path: Path) -> None:
    """A user's ``at: last`` signature with no literal to prefilter by (its needles are
    ``None``): the compiled engine never set the field then, and judging any output
    raised AttributeError."""
    (tmp_path / "mine.yaml").write_text(
        "failures:\n"
        "  signatures:\n"
        "    - {id: all-caps-last, at: last, regex: '[A-Z]{5,}$'}\n")
    calls = load_rules(paths=[tmp_path], user_dir=False).registry.calls
    assert calls.failures is not None
    assert calls.failures.failure("compiling\nlinking\nABORTED") == "all-caps-last"
    assert calls.failures.failure("compiling\nlinking\ndone") is None


@pytest.mark.parametrize("doc,where,code", [
    ("effects:\n  tools:\n    - {tool: x, effect: maybe}\n", "3:", "W114"),
    ("effects:\n  tools:\n    - {tool: x}\n", "3:", "W111"),
    ("effects:\n  tools:\n    - {tool: x, classify: perl, argument: cmd}\n", "3:", "W114"),
    ("effects:\n  tools:\n    - {tool: x, classify: shell}\n", "3:", "W111"),
    ("effects:\n  shell:\n    reads: [cat]\n", "3:", "W103"),
    ("failures:\n  signatures:\n    - {id: x, regex: '(a+)+$'}\n", "3:", "W107"),
    ("failures:\n  signatures:\n    - {id: x, regex: 'a', at: middle}\n", "3:", "W114"),
    ("failures:\n  wrappers:\n    - {id: x, regex: '(?<=a)b'}\n", "3:", "W122"),
    ("failures:\n  lines: 500\n", "2:", "W114"),
])
def test_bad_effects_and_failures_are_located_errors(tmp_path: Path, doc: str, where: str,
                                                     code: str) -> None:
    (tmp_path / "bad.yaml").write_text(doc)
    with pytest.raises(RuleLoadErrors) as exc:
        load_rules(paths=[tmp_path], user_dir=False)
    text = str(exc.value)
    assert f"bad.yaml:{where}" in text and code in text, text


REPEAT = """
id: rep
title: t
description: d
category: repeated_tool_call
severity: warning
events: [tool]
needs: content
detect:
  repeat: {key: "[function, arguments]", result_key: "[result, error]", count: 3,
           window: {events: 10}, normalise: [whitespace]}
confidence_when:
  - when: {streak: {gte: 3}}
    raise: high
    reason: r
message: "{count}"
"""


def test_calls_between_repeats_are_named_with_their_effects(tmp_path: Path) -> None:
    rules = load_text(tmp_path, REPEAT, library=False, calls=True)
    same = {"arguments": {"cmd": "python t.py"}, "result": "AssertionError"}
    found = episodes(run(rules, [
        tool(**same), tool("think", arguments={"thought": "x"}, result=""),
        tool(**same), tool(arguments={"cmd": "cat t.py"}, result="x"),
        tool(arguments={"cmd": "sed -i s/a/b/ t.py"}, result="", has_error=True,
             error="sed: no such file"),
        tool(**same)]))
    assert len(found) == 1 and found[0].confidence == "high"
    facts = found[0].evidence.facts
    assert facts["between"] == 3 and facts["changes_between"] == 0 and facts["streak"] == 3
    between = facts["between_calls"]
    assert "think (changes nothing)" in between and "bash: cat (reads only)" in between
    assert "bash: sed -i (failed, so taken as no change)" in between


def test_ignored_events_take_no_place_in_a_window(tmp_path: Path) -> None:
    rules = load_text(tmp_path, """
        id: storm
        title: t
        description: d
        category: error_storm
        severity: warning
        events: [tool]
        needs: content
        where: has_error
        ignore: {where: "effect == 'none'"}
        detect:
          threshold: {count: 3, window: {events: 3}, reset: {type: tool, where: "!has_error"}}
        message: "{count}"
        """, library=False, calls=True)
    think = tool("think", arguments={"thought": "x"}, result="")
    bad = tool(arguments={"cmd": "make"}, has_error=True, error="boom")
    # three failures with two think() calls between: the window of 3 sees only failures
    found = episodes(run(rules, [bad, think, bad, think, bad]))
    assert [f.count for f in found] == [3]
    # without the ignore, each think() is a call that did not fail: it resets the count
    rules = load_text(tmp_path, (tmp_path / "rules.yaml").read_text().replace(
        "ignore: {where: \"effect == 'none'\"}\n", ""), name="plain.yaml", library=False,
        calls=True)
    assert episodes(run(rules, [bad, think, bad, think, bad])) == []


def test_ignore_and_breaks_are_checked_when_rules_load(tmp_path: Path) -> None:
    with pytest.raises(RuleLoadErrors) as exc:
        load_text(tmp_path, """
            id: x
            title: t
            description: d
            category: stall
            severity: warning
            ignore: {type: tool}
            detect:
              idle: {polls: 2}
            """, library=False)
    assert "ignore applies to events" in str(exc.value)
    with pytest.raises(RuleLoadErrors) as exc:
        load_text(tmp_path, REPEAT.replace("normalise: [whitespace]}",
                                           "normalise: [whitespace], breaks: {typo: 1}}"),
                  library=False)
    assert "W103" in str(exc.value)


def test_a_rule_set_that_reads_no_tool_event_sets_no_call_facts() -> None:
    """Call facts (each call's effect and failure) are set only for rule sets with a rule
    that reads tool events: with none (``--only token-runaway``) a tool event is left as
    it came, and the engine holds no call facts; with one, each tool event gets both."""
    from watcher.engine import Engine
    from watcher.findings import SampleRef

    ref = SampleRef(task="t", task_id="t", eval_id="e", model="m", sample_id="s", epoch=1)
    only_model = load_rules(user_dir=False, only=["token-runaway"])
    assert all("tool" not in (r.events or {"tool"}) for r in only_model.rules)
    engine = Engine(only_model)
    assert engine.calls is None
    event = {**tool(args={"cmd": "rm -rf build"}, result="ok"), "timestamp": 1.0}
    engine.open_sample(ref).feed(event)
    assert "effect" not in event and "failure" not in event
    with_tools = Engine(load_rules(user_dir=False, only=["repeated-tool-call"]))
    assert with_tools.calls is not None
    event = {**tool(args={"cmd": "rm -rf build"}, result="ok"), "timestamp": 1.0}
    with_tools.open_sample(ref).feed(event)
    assert event["effect"] == "write" and event["failure"] is None


@pytest.mark.parametrize(("pattern", "first"), [
    ("(?:[A-Z][A-Za-z ]{0,40} )?Output:[ \\t]*", set("ABCDEFGHIJKLMNOPQRSTUVWXYZ")),
    ("<returncode>\\s*-?\\d+", {"<"}),
    ("(?:STDOUT|stdout)(?: and stderr)?:", {"S", "s"}),
    ("\\A(?:x)?(?:y)*z", {"x", "y", "z"}),
    ("(?:a)?", {"a"}),  # an empty match is no prefix: only a non-empty one is read
    ("[^a]b", None), ("\\wb", None), (".b", None), ("(?i)ab", None), ("(?i:a)b", None),
    ("\\bab", None),
])
def test_wrapper_first_characters_are_over_approximated(pattern: str,
                                                        first: set[str] | None) -> None:
    from watcher.engine.lang.callspec import _starts
    from watcher.engine.rx import Pattern

    got = _starts(Pattern(pattern))
    assert got == (frozenset(first) if first is not None else None)


def test_wrappers_ruled_out_by_first_character_still_unwrap() -> None:
    lib = CALLS.failures
    assert lib is not None and all(w.first is not None for w in lib.wrappers)
    assert lib.failure("<returncode>0</returncode><output>Error: x</output>") is None
    assert lib.failure("<returncode>127</returncode><output>fine</output>") == "exit-code"
    assert lib.failure("  Error: x") == "error-message"


def test_short_outputs_are_judged_once_and_the_memo_stays_bounded() -> None:
    from watcher.engine.calls import CallFacts
    from watcher.engine.shell import MEMO_LINE, MEMO_SIZE

    facts = CallFacts(failures=CALLS.failures)
    short = SH + "/bin/bash: line 1: foo: command not found\nReward: 0.0\n"
    long = short + "x" * MEMO_LINE
    for _ in range(2):  # the second answer comes from the memo, and is the same
        assert facts.failure({"result": short}) == "command-not-found"
        assert facts.failure({"result": long}) == "command-not-found"
    assert list(facts._failures) == [short]  # the long output is not remembered
    for i in range(MEMO_SIZE + 5):
        assert facts.failure({"result": f"line {i}"}) is None
    assert 0 < len(facts._failures) <= MEMO_SIZE


def test_a_here_document_ends_where_line_by_line_reading_ends_it() -> None:
    """_after_heredocs looks only at lines where it finds the delimiter: the same place
    as reading every line (its reference), for bodies that close, close late, close on
    the last line, never close, or hold the delimiter inside longer lines."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from watcher.engine.shell import _after_heredocs

    def _after_heredocs_by_line(text: str, pos: int, delims: list[str]) -> int:
        """The classifier's skip before it looked for delimiters: every line read."""
        for delim in delims:
            while True:
                nl = text.find("\n", pos)
                line = text[pos:] if nl < 0 else text[pos:nl]
                pos = len(text) if nl < 0 else nl + 1
                if line.strip() == delim or nl < 0:
                    break
        return pos

    piece = st.sampled_from(["EOF", "PY", "\n", " ", "\t", "\r", "\x0b", "\x1c", "\u00a0",
                             "x", "EOFX", "xEOF", "-", "."])
    texts = st.lists(piece, max_size=40).map("".join)

    @settings(max_examples=3000, deadline=None)
    @given(texts, st.integers(0, 45), st.lists(st.sampled_from(["EOF", "PY", "E"]),
                                               min_size=1, max_size=3))
    def check(text: str, at: int, delims: list[str]) -> None:
        pos = min(at, len(text))
        if pos and text[pos - 1] != "\n":
            pos = text.rfind("\n", 0, pos) + 1  # a body starts after a new line
        assert _after_heredocs(text, pos, delims) == _after_heredocs_by_line(
            text, pos, delims)

    check()
    assert _after_heredocs("cat <<EOF\nEOF_NOT\n  EOF \nls", 10, ["EOF"]) == 25


def test_an_effects_entry_covers_the_names_fnmatch_gives_it() -> None:
    """EffectEntry.covers answers literal names from a set, patterns by regex: the same
    as one fnmatch regex of the whole list, for literal names, patterns, and none."""
    import fnmatch
    import re

    from watcher.engine.calls import EffectEntry

    names = ["bash", "python", "mcp__*", "tool?", "x[ab]", "a.b", "run(1)", "BASH", ""]
    asked = names + ["bashx", "xbash", "mcp__fs", "tool1", "tool12", "xa", "xc", "a-b",
                     "run(1)x", "Bash", "mcp__", "bash\n"]
    for tools in [("bash",), ("bash", "python"), ("mcp__*",), tuple(names), ()]:
        entry = EffectEntry(tools=tools, effect="read")
        old = re.compile("|".join(fnmatch.translate(t) for t in tools))
        for fn in asked:
            assert entry.covers(fn) == (old.match(fn) is not None), (tools, fn)
    assert PACK.registry.calls.entries and all(e.literal or e.names is not None
                                               for e in PACK.registry.calls.entries)


def test_a_json_output_is_judged_as_parsing_it_whole_judges_it() -> None:
    """FailureLibrary._json_error parses an output only where an error field's name is
    written in it (quoted, or possibly through a \\u escape): the answer is the whole
    parse's for objects with and without error fields, escaped keys, nested errors,
    and names JSON must escape."""
    import json

    import orjson
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from watcher.engine.calls import FailureLibrary

    def whole(lib: FailureLibrary, text: str) -> bool:
        try:
            obj = orjson.loads(text)
        except orjson.JSONDecodeError:
            return False
        return isinstance(obj, dict) and any(obj.get(n) for n in lib.error_fields)

    libs = [FailureLibrary(error_fields=("error", "errors", "errorMessage")),
            FailureLibrary(error_fields=('we"ird', "ok\\no", "ünï"))]
    keys = st.sampled_from(["error", "errors", "errorMessage", "Error", "result", "msg",
                            'we"ird', "ok\\no", "ünï", "err"])
    values = st.recursive(st.none() | st.booleans() | st.integers(-2, 2) | st.text(max_size=5),
                          lambda kids: st.lists(kids, max_size=3)
                          | st.dictionaries(keys, kids, max_size=3), max_leaves=8)

    @settings(max_examples=1500, deadline=None)
    @given(st.dictionaries(keys, values, max_size=4) | values, st.booleans())
    def check(obj: Any, ascii_only: bool) -> None:
        text = json.dumps(obj, ensure_ascii=ascii_only)
        for lib in libs:
            assert lib._json_error(text) == whole(lib, text), (text, lib.error_fields)

    check()
    lib = libs[0]
    assert lib._json_error('{"\\u0065rror": "boom"}')  # a key spelt with an escape
    assert not lib._json_error('{"result": "error: none"}')  # the word, not the field
