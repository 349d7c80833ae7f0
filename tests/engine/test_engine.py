"""Engine behaviour: dedup, escalation, lifecycle, selection, precedence, suppression."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.engine.util import REF, load_text, model, run, tool
from watcher.engine import (
    Engine,
    RuleLoadErrors,
    load_rules,
    load_suppressions,
    materialise,
)
from watcher.engine.text import bound_text
from watcher.findings import finding_id

REPEAT = """
id: rep
title: repeat
category: repeated_tool_call
severity: warning
events: [tool]
needs: content
detect:
  repeat: {key: "[function, arguments]", count: 3, window: {events: 10}}
confidence: medium
confidence_when:
  - when: {count: {gte: 5}}
    raise: high
    reason: five or more.
exceptions:
  - {field: sample.task, op: equals, value: quiet-task}
message: "{tool} x{count}"
"""


def test_one_finding_per_episode_with_escalation_once(tmp_path: Path) -> None:
    found = run(load_text(tmp_path, REPEAT), [tool(arguments="ls")] * 8)
    assert [f.status for f in found] == ["open", "escalated", "ended"]
    assert len({f.id for f in found}) == 1
    assert found[0].id == finding_id("rep", REF, 1)
    assert found[1].confidence == "high" and found[1].confidence_reason == "five or more."
    assert found[-1].count == 8 and found[-1].summary == "bash x8"
    assert 0 <= found[0].score <= found[-1].score <= 1


def test_pending_events_are_ignored(tmp_path: Path) -> None:
    items = [dict(tool(arguments="ls"), pending=True)] * 5
    assert run(load_text(tmp_path, REPEAT), items) == []


def test_finalize_once_and_reset_attempt(tmp_path: Path) -> None:
    watch = Engine(load_text(tmp_path, REPEAT)).open_sample(REF)
    for i in range(3):
        watch.feed(materialise(i, tool(arguments="ls")))
    (end,) = watch.finalize(100.0)
    assert end.status == "ended" and watch.finalize(101.0) == []
    second = replace(REF, attempt=2)
    watch.reset_attempt(second)
    out = []
    for i in range(3):
        out += watch.feed(materialise(i, tool(arguments="ls")))
    assert out[0].sample.attempt == 2 and out[0].episode == 1 and out[0].id != end.id


def test_a_released_sample_is_freed_without_the_collector() -> None:
    """A finished sample's watch, let go of with ``release``, leaves no cycle for Python's
    collector: a scan frees each sample as it ends (the built-in pack, real rule states:
    repeats, idle clocks, row rules, the task's pace)."""
    import gc

    engine = Engine(load_rules(user_dir=False))
    items = [tool(arguments="ls"), model("hi"), tool(arguments="ls"), tool(arguments="ls"),
             tool(arguments="cat a", error="boom")]

    def scan(release: bool) -> int:
        gc.collect()
        gc.disable()
        try:
            watch = engine.open_sample(REF)
            watch.sample_row({"sample_id": "s1", "epoch": 1, "status": "running"})
            for i, it in enumerate(items):
                watch.feed(materialise(i, it))
            assert watch.finalize(100.0), "the repeats were found"
            if release:
                watch.release()
            del watch
            return gc.collect()
        finally:
            gc.enable()

    assert scan(release=False) > 0  # the cycle this is about
    assert scan(release=True) == 0


def test_sample_context_exception(tmp_path: Path) -> None:
    rules = load_text(tmp_path, REPEAT)
    assert run(rules, [tool(arguments="ls")] * 3, ref=replace(REF, task="quiet-task")) == []
    assert run(rules, [tool(arguments="ls")] * 3) != []


def test_suppress_file(tmp_path: Path) -> None:
    rules = load_text(tmp_path, REPEAT)
    supp = tmp_path / "suppress.yaml"
    supp.write_text("suppress:\n  - {rule: repeated_*, field: arguments, op: regex,"
                    " value: '^ls', reason: fine}\n")
    specs = load_suppressions(supp)
    watch = Engine(rules, specs).open_sample(REF)
    assert [f for i in range(3) for f in watch.feed(materialise(i, tool(arguments="ls")))] == []
    bad = tmp_path / "bad.yaml"
    bad.write_text("suppress:\n  - {rule: x, field: function, op: matches, value: y}\n")
    with pytest.raises(RuleLoadErrors) as info:
        load_suppressions(bad)
    assert info.value.errors[0].code == "W114"


RULES = Path(__file__).parents[2] / "rules"
STARTER = [RULES / n for n in ("library.yaml", "error-storm.yaml", "repeated-tool-call.yaml",
                               "submit-loop.yaml")]


def starter(**kw: object) -> object:
    """The three starter rules alone (the built-in pack grows independently)."""
    return load_rules(paths=STARTER, builtin=False, user_dir=False, **kw)  # type: ignore[arg-type]


def test_event_types_and_tier(tmp_path: Path) -> None:
    eng = Engine(starter())  # type: ignore[arg-type]
    assert eng.event_types == frozenset({"tool", "model", "error"})
    assert eng.tier == "content"
    meta = starter(needs_max="metadata")
    assert meta.ids == ["error-storm"] and Engine(meta).tier == "metadata"  # type: ignore
    assert "submit-loop" in meta.skipped  # type: ignore[attr-defined]


def test_only_and_disable_by_id_or_category() -> None:
    assert starter(only=["submit_loop"]).ids == ["submit-loop"]  # type: ignore[attr-defined]
    assert "error-storm" not in starter(disable=["error-storm"]).ids  # type: ignore
    assert starter(only=["error-storm,submit-loop"]).ids == [  # type: ignore[attr-defined]
        "error-storm", "submit-loop"]


def test_later_source_replaces_by_id(tmp_path: Path) -> None:
    user = tmp_path / "user"
    user.mkdir()
    (user / "mine.yaml").write_text(
        (Path(__file__).parents[2] / "rules" / "error-storm.yaml").read_text()
        .replace("count: 5", "count: 2").replace("severity: warning", "severity: critical"))
    rs = load_rules(user_dir=user)
    rule = rs.get("error-storm")
    assert rule is not None and rule.severity == "critical"
    assert rs.overrides and rs.overrides[0]["from"] == "builtin"
    assert rs.overrides[0]["to"] == "user"


def test_disabled_rule_is_skipped(tmp_path: Path) -> None:
    rs = load_text(tmp_path, REPEAT + "enabled: false\n")
    assert rs.ids == [] and rs.skipped == {"rep": "enabled: false"}


def test_memory_is_bounded_by_windows(tmp_path: Path) -> None:
    rules = load_text(tmp_path, REPEAT)
    watch = Engine(rules).open_sample(REF)
    for i in range(5000):
        watch.feed(materialise(i, tool(arguments=f"cmd {i % 97}")))
    state = watch.states["rep"]
    assert len(state.win) <= 10  # type: ignore[attr-defined]
    assert len(state.counts) <= 10  # type: ignore[attr-defined]


def test_text_tests_scan_bounded_text(tmp_path: Path) -> None:
    text = "x" * 20000 + "MIDDLE" + "y" * 20000
    assert "MIDDLE" not in bound_text(text)
    rules = load_text(tmp_path, """
        id: mid
        title: t
        category: shortcut
        severity: info
        events: [model]
        needs: content
        field: completion
        contains: MIDDLE
        detect: match
        """)
    assert run(rules, [model(text)]) == []
    assert run(rules, [model("MIDDLE" + text)]) != []


def test_predicate_options(tmp_path: Path) -> None:
    rules = load_text(tmp_path, """
        id: opts
        title: t
        category: shortcut
        severity: info
        events: [model]
        needs: content
        all:
          - {field: completion, all_of: [final, answer], ignore_case: true}
          - not: {field: completion, equals: ["FINAL ANSWER"]}
        field: completion
        contains: "final  answer"
        normalize_whitespace: false
        detect: match
        """)
    assert run(rules, [model("Final  Answer is near: final  answer")]) != []
    assert run(rules, [model("FINAL ANSWER")]) == []
    assert run(rules, [model("final answer")]) == []  # single space: contains fails


def test_macro_cycle_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(RuleLoadErrors) as info:
        load_text(tmp_path, """
            macros:
              a: {macro: b}
              b: {macro: a}
            ---
            id: cyc
            title: t
            category: stall
            severity: info
            events: [tool]
            needs: metadata
            macro: a
            detect: match
            """, library=False)
    assert any("refers to itself" in e.message for e in info.value.errors)


def test_reset_attempt_ends_open_episodes(tmp_path: Path) -> None:
    watch = Engine(load_text(tmp_path, REPEAT)).open_sample(REF)
    for i in range(3):
        watch.feed(materialise(i, tool(arguments="ls")))
    (ended,) = watch.reset_attempt(replace(REF, attempt=2))
    assert ended.status == "ended" and ended.sample.attempt == 1
    assert watch.ref.attempt == 2 and watch.finalize(10.0) == []


def test_run_context_does_not_count_the_row_itself() -> None:
    from watcher.engine import RunContext

    rows = [{"sample_id": str(i), "epoch": 1, "status": "error", "error": f"oom at {i}"}
            for i in range(3)]
    ctx = RunContext.from_rows(rows)
    assert ctx.view(rows[0])["same_error_samples"] == 2  # counted: the other two
    fresh = {"sample_id": "9", "epoch": 1, "status": "running", "error": "oom at 9"}
    assert ctx.view(fresh)["same_error_samples"] == 3 and ctx.view(fresh)["task_wide"]
    assert ctx.view({"sample_id": "0", "error": "other"})["same_error_samples"] == 0


def test_require_gates_episodes_on_facts(tmp_path: Path) -> None:
    rules = load_text(tmp_path, """
        id: same-result-repeat
        title: t
        category: repeated_tool_call
        severity: warning
        events: [tool]
        needs: content
        detect:
          repeat: {key: arguments, result_key: result, count: 3, window: {events: 10}}
        require: {results_identical: true, count: {gte: 3}}
        """)
    assert run(rules, [tool(arguments="ls", result=str(i)) for i in range(5)]) == []
    found = run(rules, [tool(arguments="ls", result="same")] * 4)
    assert [f.status for f in found] == ["open", "ended"] and found[-1].count == 4
    # silent while the facts miss, reported (as new) once they hold
    varied = [tool(arguments="ls", result=r) for r in "abc"]
    others = [tool(arguments=f"x{i}") for i in range(8)]
    late = run(rules, varied + others + [tool(arguments="ls", result="z")] * 3)
    assert [f.status for f in late] == ["open", "ended"] and late[0].episode == 2


WINDOWED = """
id: win
title: windowed repeat of one tool
category: repeated_tool_call
severity: info
events: [tool]
needs: content
type: tool
where: "function == 'a'"
detect:
  repeat: {key: function, count: 2, window: {events: 2}}
confidence: low
---
id: turns
title: any model turn (a second population, counting model and tool events)
category: other
severity: info
events: [model, tool]
needs: metadata
type: model
detect:
  match: {}
confidence: low
"""


def test_states_are_created_by_a_rules_first_match(tmp_path: Path) -> None:
    """A rule's state starts at its first matching event (opening a sample is cheap);
    its windows still count the events it missed before, and clock-driven rules have
    theirs from the start."""
    watch = Engine(load_rules()).open_sample(REF)
    idle = {r.id for r in watch.engine.rules if not r.reads_events}
    assert set(watch.states) == idle
    watch.feed(materialise(0, model("thinking", stop_reason="tool_calls")))
    watch.feed(materialise(1, tool(arguments="ls")))
    made = set(watch.states) - idle
    assert made and made < {r.id for r in watch.engine.rules if r.reads_events}
    assert "shortcut-read-answer-key" not in made and "repeated-tool-call" in made

    rules = load_text(tmp_path, WINDOWED)
    spaced = run(rules, [tool("x"), tool("x"), tool("a"), model(), tool("x"), tool("a")])
    # the second call comes two tool events later: outside the window
    assert [f for f in spaced if f.rule == "win"] == []
    paired = run(rules, [model(), tool("x"), tool("a"), model(), tool("a")])
    assert [f.count for f in paired if f.rule == "win"] == [2, 2]


def test_engine_findings_are_whole_dataclasses(tmp_path: Path) -> None:
    """Snapshots are built without the frozen dataclass's __init__ (findings.built):
    they must still hold every field, equal a normally built Finding, and pickle."""
    import pickle
    from dataclasses import fields

    from watcher.findings import Evidence, Finding

    rules = load_text(tmp_path, REPEAT)
    found = run(rules, [tool(arguments="ls")] * 5)
    assert found
    for f in found:
        assert list(vars(f)) == [x.name for x in fields(Finding)]
        assert list(vars(f.evidence)) == [x.name for x in fields(Evidence)]
        again = Finding(**{**vars(f), "evidence": Evidence(**vars(f.evidence))})
        assert again == f and repr(again) == repr(f)
        assert pickle.loads(pickle.dumps(f)) == f
