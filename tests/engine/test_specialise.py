"""Type specialisation: a rule's predicate, in the dispatch table of one event type,
has its type tests answered (compile.specialise) and finds exactly what it did."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.engine.util import REF, finding_rows, load_text
from watcher.engine import Engine, load_rules, materialise
from watcher.engine.lang.ctx import Ctx
from watcher.engine.lang.paths import compile_path
from watcher.engine.rule import never
from watcher.engine.yamlsrc import Doc

RULE = """
macros:
  is_submit: {{type: tool, where: "function == 'submit'"}}
  is_failure:
    any:
      - {{type: error}}
      - {{type: tool, where: has_error}}
---
id: r
title: r
category: c
severity: info
events: [tool, model, error]
needs: content
{pred}
detect: {{match: {{}}}}
"""


def _where(expr: str) -> Any:
    """The compiled test of a ``where`` expression (compiled once, then shared)."""
    cp = compile_path(expr, Ctx(Doc.__new__(Doc), []), (), "where")
    assert cp is not None
    return cp.test


def _rule(tmp_path: Path, pred: str) -> Any:
    (rule,) = load_text(tmp_path, RULE.format(pred=pred), library=False)
    return rule


def test_type_tests_are_answered_per_event_type(tmp_path: Path) -> None:
    submit = _rule(tmp_path, "macro: is_submit")
    assert submit.typed["tool"] is _where("function == 'submit'")  # only the where is left
    assert submit.typed["model"] is never and submit.typed["error"] is never
    failure = _rule(tmp_path, "macro: is_failure")
    assert failure.typed["error"] is None  # every error event matches
    assert failure.typed["tool"] is _where("has_error")
    assert failure.typed["model"] is never
    negated = _rule(tmp_path, "not: {macro: is_failure}")
    assert negated.typed["error"] is never and negated.typed["model"] is None
    plain = _rule(tmp_path, "where: has_error")  # no type test: nothing to answer
    assert plain.typed == {}


def test_the_table_uses_the_specialised_predicate(tmp_path: Path) -> None:
    rule = _rule(tmp_path, "macro: is_failure")
    engine = Engine([rule])
    assert engine.targets("error")[1][0][0] is None
    assert engine.targets("tool")[1][0][0] is rule.typed["tool"]
    watch = engine.open_sample(REF)
    found = []
    for i, item in enumerate([{"type": "error", "error": "boom"},
                              {"type": "tool", "function": "bash", "error": "failed"},
                              {"type": "tool", "function": "bash"},
                              {"type": "model", "completion": "hi"}]):
        found += watch.feed(materialise(i, item))
    found += watch.finalize(10_000.0)
    assert [f.count for f in found] and found[-1].count == 2


PACK = load_rules(builtin=True, user_dir=False)

_events = st.lists(st.one_of(
    st.builds(lambda fn, a, r, err: {"type": "tool", "function": fn, "arguments": {"cmd": a},
                                     "result": r, **({"error": "failed"} if err else {})},
              st.sampled_from(["bash", "submit", "python"]),
              st.sampled_from(["ls", "cat tests/expected_output.txt", "pytest -q", "42"]),
              st.sampled_from(["", "ok", "Traceback (most recent call last):", "42"]),
              st.booleans()),
    st.builds(lambda c, s: {"type": "model", "completion": c, "stop_reason": s},
              st.sampled_from(["final answer: 42", "Let me look", "I'll submit 42 now"]),
              st.sampled_from(["stop", "tool_calls"])),
    st.builds(lambda m: {"type": "error", "error": m}, st.sampled_from(["boom", "timeout"])),
), max_size=40)


@settings(max_examples=150, deadline=None)
@given(_events)
def test_specialising_changes_no_finding_of_the_pack(items: list[dict[str, Any]]) -> None:
    plain = [dataclasses.replace(r, typed={}) for r in PACK]
    assert finding_rows(list(PACK), items) == finding_rows(plain, items)


def test_the_pack_is_specialised() -> None:
    typed = {r.id for r in PACK if r.typed}
    assert {"error-storm", "submit-guessing", "repeated-submission"} <= typed
