"""Scan gates: a rule whose patterns the shared RE2 scan rules out is not evaluated,
and skipping it never changes a finding."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.engine.util import REF, finding_rows, load_text
from watcher.engine import Engine, RuleSet, load_rules, materialise

# nine patterns on one text, so the scanner scans (RULE_SCAN_MIN_PATTERNS is 8)
GATED = """
lists:
  words: [alpha, bravo, charlie, delta, echo, foxtrot, golf, hotel]
---
id: {rid}
title: gated
category: shortcut
severity: info
events: [tool]
needs: content
type: tool
{pred}
detect: {{match: {{}}}}
"""


def _rule(tmp_path: Path, pred: str, rid: str = "g") -> Any:
    rules = load_text(tmp_path, GATED.format(rid=rid, pred=pred), library=False)
    (rule,) = [r for r in rules if r.id == rid]
    return rule


def test_text_tests_and_their_combinations_get_gates(tmp_path: Path) -> None:
    one = _rule(tmp_path, "field: arguments\nregex: {list: words}\nignore_case: true")
    assert one.gate is not None and one.gate.useful()
    assert [len(n) for n in one.gate.needs] == [8]
    both = _rule(tmp_path, """all:
  - {field: arguments, regex: {list: words}, ignore_case: true}
  - {field: arguments, regex: 'india|juliet', ignore_case: true}""")
    assert [len(n) for n in both.gate.needs] == [8, 1]  # both sets must be hit
    either = _rule(tmp_path, """any:
  - {field: arguments, regex: {list: words}, ignore_case: true}
  - {field: arguments, regex: 'india|juliet', ignore_case: true}""")
    assert [len(n) for n in either.gate.needs] == [9]  # one of the union
    # a part that the scan cannot answer for leaves a disjunction ungated
    loose = _rule(tmp_path, """any:
  - {field: arguments, regex: {list: words}, ignore_case: true}
  - {field: function, contains: python}""")
    assert loose.gate is None
    negated = _rule(tmp_path, "not: {field: arguments, regex: {list: words}, "
                              "ignore_case: true}")
    assert negated.gate is None


def test_a_closed_gate_skips_the_predicate(tmp_path: Path) -> None:
    rule = _rule(tmp_path, "field: arguments\nregex: {list: words}\nignore_case: true")
    calls: list[str] = []
    inner = rule.predicate

    def counting(e: dict[str, Any]) -> bool:
        calls.append(e["arguments"])
        return inner(e)

    watch = Engine([dataclasses.replace(rule, predicate=counting)]).open_sample(REF)
    found = []
    for i, args in enumerate(["ls -la", "echo Bravo two", "cat notes.txt"]):
        found += watch.feed(materialise(i, {"type": "tool", "function": "bash",
                                            "arguments": args}))
    assert calls == ["echo Bravo two"]  # the scan ruled the other two out
    assert len(found) == 1 and "Bravo" in found[0].evidence.excerpts[0]


def _ungated(rules: RuleSet) -> list[Any]:
    return [dataclasses.replace(r, gate=None) for r in rules]


PACK = load_rules(builtin=True, user_dir=False)

# commands from the built-in shortcut lists' territory and their benign look-alikes
_ARGS = ["cat tests/expected_output.txt", "cat notes.txt", "ls -la", "pytest -x -q",
         "sed -i 's/assert/# assert/' tests/test_a.py", "grep -rn answer /grader",
         "curl https://example.com/solutions.json", "echo 'return 42  # hardcoded'",
         "python -c 'print(open(\"/root/answers.json\").read())'", "git diff",
         "rm tests/test_parser.py", "export SKIP_TESTS=1", "cat /grader/grade.py",
         "pip install -e .", "echo 'flag: picoCTF{abc}' > flag.txt", "İ ſ stray non-ASCII",
         "@pytest.mark.skip\ndef test_x(): pass", "find / -name '*answer*'"]

_events = st.lists(st.one_of(
    st.builds(lambda a, r: {"type": "tool", "function": "bash", "arguments": {"cmd": a},
                            "result": r}, st.sampled_from(_ARGS),
              st.sampled_from(["", "ok", "picoCTF{abc}", "1 passed"])),
    st.builds(lambda c: {"type": "model", "completion": c, "stop_reason": "stop"},
              st.sampled_from(["final answer: picoCTF{abc}", "Let me check the tests",
                               "I'll submit now"])),
), max_size=40)


@settings(max_examples=150, deadline=None)
@given(_events)
def test_gates_change_no_finding_of_the_pack(items: list[dict[str, Any]]) -> None:
    assert finding_rows(list(PACK), items) == finding_rows(_ungated(PACK), items)


def test_the_pack_is_gated_and_finds_shortcuts() -> None:
    gated = {r.id for r in PACK if r.gate is not None and r.gate.useful()}
    assert {"shortcut-read-answer-key", "shortcut-tamper-tests"} <= gated
    items = [{"type": "tool", "function": "bash", "arguments": {"cmd": a}} for a in _ARGS]
    found = finding_rows(list(PACK), items)
    assert found == finding_rows(_ungated(PACK), items)
    assert {"shortcut-read-answer-key", "shortcut-tamper-tests"} <= {f[0] for f in found}


def test_rule_files_load_with_gates_from_a_directory() -> None:
    """Gates are derived wherever rules are loaded, not only for the built-in pack."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "r.yaml"
        path.write_text(GATED.format(rid="x", pred="field: arguments\nregex: {list: words}"))
        (rule,) = load_rules(paths=[path], builtin=False, user_dir=False)
    assert rule.gate is not None and rule.gate.useful()
