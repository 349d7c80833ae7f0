"""Per-detector behaviour: each with cases that must fire and cases that must not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.engine.util import REF, episodes, load_text, model, run, tool
from watcher.engine import Engine, RunContext, SampleStatus, materialise

# --------------------------------------------------------------------------- match

MATCH = """
id: rm-root
title: rm -rf /
category: shortcut
severity: critical
events: [tool]
needs: content
type: tool
field: arguments
regex: 'rm\\s+-rf\\s+/'
detect: {match: {gap: {events: 3}}}
confidence: high
message: "{tool}: {excerpt}"
"""


def test_match_fires_and_folds_into_one_episode(tmp_path: Path) -> None:
    rules = load_text(tmp_path, MATCH)
    found = run(rules, [tool(arguments={"cmd": "rm -rf /"}), tool(arguments={"cmd": "ls"}),
                        tool(arguments={"cmd": "rm  -rf /tmp"})])
    eps = episodes(found)
    assert len(eps) == 1
    assert eps[0].count == 2 and eps[0].status == "ended"
    assert eps[0].summary.startswith("bash: bash(")
    assert [f.status for f in found] == ["open", "ended"]  # the second hit is silent


def test_match_gap_starts_new_episode(tmp_path: Path) -> None:
    rules = load_text(tmp_path, MATCH)
    items = [tool(arguments={"cmd": "rm -rf /"})] + [tool(arguments={"cmd": "ls"})] * 4 + [
        tool(arguments={"cmd": "rm -rf /x"})]
    eps = episodes(run(rules, items))
    assert [e.episode for e in eps] == [1, 2]


def test_match_does_not_fire_on_other_text(tmp_path: Path) -> None:
    rules = load_text(tmp_path, MATCH)
    assert run(rules, [tool(arguments={"cmd": "rm -r build"}), model("rm -rf /")]) == []


# --------------------------------------------------------------------------- repeat

REPEAT = """
id: rep
title: repeat
category: repeated_tool_call
severity: warning
events: [tool]
needs: content
detect:
  repeat:
    key: "[function, arguments]"
    result_key: "[result, error]"
    count: 3
    window: {{events: 6}}
    {extra}
confidence_when:
  - when: {{exact: true, results_identical: true}}
    raise: high
    reason: identical
"""


def rep(tmp_path: Path, extra: str = "") -> object:
    return load_text(tmp_path, REPEAT.format(extra=extra))


def test_repeat_exact_identical_results_is_high(tmp_path: Path) -> None:
    found = run(rep(tmp_path), [tool(arguments="ls", result="x")] * 3)
    (ep,) = episodes(found)
    assert ep.confidence == "high" and ep.count == 3
    assert ep.evidence.facts["results_identical"] is True
    assert ep.score > 0.75


def test_repeat_changed_results_is_medium(tmp_path: Path) -> None:
    found = run(rep(tmp_path), [tool(arguments="ls", result=str(i)) for i in range(3)])
    (ep,) = episodes(found)
    assert ep.confidence == "medium"
    assert ep.evidence.facts["results_changed"] is True
    assert ep.evidence.facts["distinct_results"] == 3


def test_repeat_below_count_or_outside_window(tmp_path: Path) -> None:
    rules = rep(tmp_path)
    assert run(rules, [tool(arguments="ls")] * 2) == []
    spread = [tool(arguments="ls")] + [tool(arguments=f"c{i}") for i in range(5)] + [
        tool(arguments="ls")] + [tool(arguments=f"d{i}") for i in range(5)] + [
        tool(arguments="ls")]
    assert run(rules, spread) == []


def test_repeat_episode_ends_when_window_thins(tmp_path: Path) -> None:
    items = [tool(arguments="ls")] * 3 + [tool(arguments=f"c{i}") for i in range(5)]
    found = run(rules := rep(tmp_path), items, finalize=False)
    assert [f.status for f in found] == ["open", "ended"]
    # the end came from the window, not from finalize
    watch = Engine(rules).open_sample(REF)
    out = []
    for i, it in enumerate(items):
        out += watch.feed(materialise(i, it))
    assert out[-1].status == "ended"


def test_repeat_two_keys_are_two_episodes(tmp_path: Path) -> None:
    items = [tool(arguments="a"), tool(arguments="b")] * 1 + [
        tool(arguments="a"), tool(arguments="a"), tool(arguments="b"), tool(arguments="b")]
    eps = episodes(run(rep(tmp_path), items))
    assert len(eps) == 2
    assert {e.evidence.facts["key"] for e in eps} == {"bash a", "bash b"}


def test_repeat_similarity_and_normalisation(tmp_path: Path) -> None:
    exact = rep(tmp_path)
    near = [tool(arguments=f"cat /tmp/run{i}/out.txt") for i in range(3)]
    assert run(exact, near) == []
    fuzzy = load_text(tmp_path, REPEAT.format(extra="similarity: 90"), name="f.yaml")
    (ep,) = episodes(run(fuzzy, near))
    assert ep.evidence.facts["exact"] is False and ep.confidence == "medium"
    normed = load_text(tmp_path, REPEAT.format(extra="normalise: [numbers]"), name="n.yaml")
    assert len(episodes(run(normed, near))) == 1


def test_repeat_same_result_counts_only_calls_with_one_result(tmp_path: Path) -> None:
    calls = [tool(arguments="ls", result=r) for r in "xyxx"]
    # without same_result the third call opens an episode of mixed results
    (mixed,) = episodes(run(rep(tmp_path), calls))
    assert mixed.count == 4 and mixed.evidence.facts["results_identical"] is False
    # with it the "y" call neither counts nor hides the loop of "x" results
    sr = load_text(tmp_path, REPEAT.format(extra="same_result: true"), name="sr.yaml")
    (ep,) = episodes(run(sr, calls))
    assert ep.count == 3 and ep.evidence.facts["results_identical"] is True
    uuids = [materialise(i, c)["uuid"] for i, c in enumerate(calls)]
    assert ep.evidence.event_uuids == (uuids[0], uuids[2], uuids[3])
    assert ep.confidence == "high"


def test_repeat_same_result_fuzzy(tmp_path: Path) -> None:
    sr = load_text(tmp_path, REPEAT.format(extra="similarity: 90\n    same_result: true"),
                   name="sr.yaml")
    near = [f"cat /tmp/run{i}/out.txt" for i in range(4)]
    # similar commands, one result: a loop; similar commands, each its own result: none
    (ep,) = episodes(run(sr, [tool(arguments=a, result="same") for a in near[:3]]))
    assert ep.count == 3 and ep.evidence.facts["exact"] is False
    assert ep.evidence.facts["similarity"] >= 90
    assert run(sr, [tool(arguments=a, result=a) for a in near]) == []


def test_repeat_same_result_needs_a_result_key(tmp_path: Path) -> None:
    from watcher.engine import RuleLoadErrors

    text = REPEAT.format(extra="same_result: true").replace(
        '    result_key: "[result, error]"\n', "")
    with pytest.raises(RuleLoadErrors) as exc:
        load_text(tmp_path, text)
    (err,) = exc.value.errors
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "same_result" in t)
    assert "same_result" in err.message and err.line == line
    with pytest.raises(RuleLoadErrors) as exc:
        load_text(tmp_path, REPEAT.format(extra="same_result: yes please"), name="b.yaml")
    assert "same_result" in str(exc.value)


def test_repeat_consecutive_breaks_on_other_call(tmp_path: Path) -> None:
    rules = load_text(tmp_path, REPEAT.format(extra="consecutive: true"))
    assert run(rules, [tool(arguments="a"), tool(arguments="a"), tool(arguments="b"),
                       tool(arguments="a")]) == []
    found = run(rules, [tool(arguments="a")] * 3 + [tool(arguments="b")], finalize=False)
    assert [f.status for f in found] == ["open", "ended"]


def test_repeat_cycles(tmp_path: Path) -> None:
    rules = load_text(tmp_path, REPEAT.format(extra="cycles: {max_period: 3, min_repeats: 3}")
                      .replace("count: 3", "count: 4").replace("events: 6", "events: 7"))
    abc = [tool(arguments=x) for x in "abcabcabc"]
    (ep,) = episodes(run(rules, abc))
    assert ep.evidence.facts["cycle"] is True and ep.evidence.facts["period"] == 3
    assert ep.count == 9
    broken = [tool(arguments=x) for x in "abcabdabe"]
    assert run(rules, broken) == []


def test_repeat_alternation_is_labelled_as_cycle(tmp_path: Path) -> None:
    (ep,) = episodes(run(rep(tmp_path), [tool(arguments=x) for x in "ababab"]))
    assert ep.evidence.facts["period"] == 2 and ep.count == 6


# --------------------------------------------------------------------------- threshold

THRESH = """
id: errs
title: errors
category: error_storm
severity: warning
events: [tool, error]
needs: metadata
macro: is_failure
detect:
  threshold:
    count: 3
    window: {window}
    {extra}
"""


def test_threshold_events_window(tmp_path: Path) -> None:
    rules = load_text(tmp_path, THRESH.format(window="{events: 5}", extra=""))
    bad = tool(error="boom")
    ok = tool()
    (ep,) = episodes(run(rules, [bad, ok, bad, ok, bad]))
    assert ep.count == 3 and ep.evidence.facts["window_count"] == 3
    assert run(rules, [bad, ok, ok, bad, ok, ok, bad]) == []


def test_threshold_counts_error_events(tmp_path: Path) -> None:
    rules = load_text(tmp_path, THRESH.format(window="{events: 5}", extra=""))
    items = [{"type": "error", "error": "x"}, tool(error="e"), {"type": "error", "error": "y"}]
    assert len(episodes(run(rules, items))) == 1


def test_threshold_seconds_window(tmp_path: Path) -> None:
    rules = load_text(tmp_path, THRESH.format(window="{seconds: 10}", extra=""))
    slow = [dict(tool(error="x"), timestamp=100.0 + 20 * i) for i in range(4)]
    assert run(rules, slow) == []
    fast = [dict(tool(error="x"), timestamp=100.0 + i) for i in range(3)]
    assert len(episodes(run(rules, fast))) == 1


def test_threshold_reset(tmp_path: Path) -> None:
    rules = load_text(tmp_path, THRESH.format(
        window="{events: 10}", extra="reset: {type: tool, where: \"function == 'fix'\"}"))
    bad = tool(error="boom")
    assert run(rules, [bad, bad, tool("fix"), bad, bad]) == []
    assert len(episodes(run(rules, [bad, bad, bad]))) == 1


# --------------------------------------------------------------------------- sequence

SEQ = """
id: edit-tests
title: edits tests then passes
category: shortcut
severity: warning
events: [tool]
needs: content
detect:
  sequence:
    steps:
      - {type: tool, field: arguments, contains: pytest}
      - {type: tool, field: arguments, any_of: {list: test_files}}
      - {type: tool, field: result, regex: '\\bpassed\\b'}
    within: {events: 5}
    unless: {type: tool, where: "function == 'reset'"}
---
lists:
  test_files: [tests/, conftest.py]
"""


def test_sequence_in_order(tmp_path: Path) -> None:
    rules = load_text(tmp_path, SEQ)
    items = [tool(arguments="pytest -q", result="1 failed"),
             tool(arguments="sed -i s/x/y/ tests/test_a.py"),
             tool(arguments="pytest -q", result="3 passed")]
    (ep,) = episodes(run(rules, items))
    assert ep.count == 1 and ep.evidence.facts["steps"] == 3
    assert len(ep.evidence.event_uuids) == 3


def test_sequence_wrong_order_window_or_unless(tmp_path: Path) -> None:
    rules = load_text(tmp_path, SEQ)
    edit = tool(arguments="vim tests/x.py")
    assert run(rules, [edit, tool(arguments="pytest", result="2 passed")]) == []
    far = [tool(arguments="pytest"), edit] + [tool(arguments="ls")] * 4 + [
        tool(arguments="pytest", result="passed")]
    assert run(rules, far) == []
    assert run(rules, [tool(arguments="pytest"), edit, tool("reset"),
                       tool(arguments="pytest", result="passed")]) == []


# --------------------------------------------------------------------------- absence

ABSENT = """
id: no-submit
title: text turn not followed by submit
category: submit_loop
severity: info
events: [model, tool]
needs: metadata
detect:
  absence:
    trigger: {{macro: is_text_turn}}
    expect: {{macro: is_submit_call}}
    within: {within}
    at_end: {at_end}
"""


def test_absence_by_events(tmp_path: Path) -> None:
    rules = load_text(tmp_path, ABSENT.format(within="{events: 2}", at_end="false"))
    items = [model("done"), model("", "tool_calls"), tool("bash")]
    (ep,) = episodes(run(rules, items))
    assert ep.evidence.facts["waited_events"] == 2
    assert run(rules, [model("done"), tool("submit"), model("x", "tool_calls")]) == []


def test_absence_by_seconds_via_tick(tmp_path: Path) -> None:
    rules = load_text(tmp_path, ABSENT.format(within="{seconds: 30}", at_end="false"))
    watch = Engine(rules).open_sample(REF)
    assert watch.feed(materialise(0, dict(model("done"), timestamp=100.0))) == []
    assert watch.tick(120.0, SampleStatus()) == []
    (f,) = watch.tick(140.0, SampleStatus())
    assert f.status == "open" and f.evidence.facts["waited_seconds"] == 40.0


def test_absence_at_end(tmp_path: Path) -> None:
    quiet = load_text(tmp_path, ABSENT.format(within="{events: 5}", at_end="false"))
    assert run(quiet, [model("done")]) == []
    loud = load_text(tmp_path, ABSENT.format(within="{events: 5}", at_end="true"), "b.yaml")
    (ep,) = episodes(run(loud, [model("done")]))
    assert ep.evidence.facts["at_end"] is True


# --------------------------------------------------------------------------- idle

IDLE = """
id: stall
title: stalled
category: stall
severity: warning
detect:
  idle:
    thresholds: {model: 300, tool: 120, none: 60}
    functions: {long_job: 1000}
confidence_when:
  - when: {idle_seconds: {gte: 600}}
    raise: high
    reason: long
"""


def test_idle_needs_corroboration_and_threshold(tmp_path: Path) -> None:
    watch = Engine(load_text(tmp_path, IDLE)).open_sample(REF)
    busy = [{"type": "tool", "function": "bash", "since": 1000.0}]
    assert watch.tick(1200.0, SampleStatus(in_flight=busy, polls_without_change=1)) == []
    assert watch.tick(1100.0, SampleStatus(in_flight=busy, polls_without_change=5)) == []
    (f,) = watch.tick(1200.0, SampleStatus(in_flight=busy, polls_without_change=2))
    assert f.status == "open" and f.evidence.facts["kind"] == "tool"
    assert f.confidence == "medium"
    assert watch.tick(1250.0, SampleStatus(in_flight=busy, polls_without_change=3)) == []
    (g,) = watch.tick(1700.0, SampleStatus(in_flight=busy, polls_without_change=9))
    assert g.status == "escalated" and g.confidence == "high" and g.id == f.id
    (h,) = watch.feed(materialise(0, dict(tool(), timestamp=1701.0)))
    assert h.status == "ended"


def test_idle_per_function_and_none_kind(tmp_path: Path) -> None:
    watch = Engine(load_text(tmp_path, IDLE)).open_sample(REF)
    job = [{"type": "tool", "function": "long_job", "since": 0.0}]
    assert watch.tick(900.0, SampleStatus(in_flight=job, polls_without_change=4)) == []
    (f,) = watch.tick(90.0, SampleStatus(last_change_at=0.0, polls_without_change=3))
    assert f.evidence.facts["kind"] == "none"


# --------------------------------------------------------------------------- sample

SAMPLE = """
id: retries
title: retries exhausted
category: retry_exhausted
severity: critical
detect:
  sample:
    row:
      where: "status == 'error' && retries >= `2`"
confidence: medium
confidence_when:
  - when: {task_wide: true}
    raise: high
    reason: the same error hit other samples, so it is the environment
message: "{retries} retries; last error: {error}"
---
id: token-outlier
title: token outlier
category: limit
severity: info
detect:
  sample:
    outlier: {field: total_tokens, factor: 3, min_samples: 3}
"""


def test_sample_rows(tmp_path: Path) -> None:
    rules = load_text(tmp_path, SAMPLE)
    watch = Engine(rules).open_sample(REF)
    assert watch.sample_row({"status": "running", "retries": 0}) == []
    ctx = RunContext.from_rows([{"error": "sandbox 12 died", "status": "error"},
                                {"error": "sandbox 13 died", "status": "error"},
                                {"error": "sandbox 14 died", "status": "error"}])
    (f,) = watch.sample_row({"status": "error", "retries": 2, "error": "sandbox 9 died"},
                            ctx, now=5.0)
    assert f.rule == "retries" and f.confidence == "high"
    assert f.summary == "2 retries; last error: sandbox 9 died"
    # same row again: deduplicated
    assert watch.sample_row({"status": "error", "retries": 2, "error": "x"}, ctx) == []


def test_sample_outlier(tmp_path: Path) -> None:
    watch = Engine(load_text(tmp_path, SAMPLE)).open_sample(REF)
    ctx = RunContext.from_rows([{"total_tokens": t, "status": "completed"}
                                for t in (100, 120, 110, 90)])
    assert watch.sample_row({"status": "completed", "total_tokens": 200}, ctx) == []
    (f,) = watch.sample_row({"status": "completed", "total_tokens": 500}, ctx)
    assert f.rule == "token-outlier" and f.evidence.facts["outlier_ratio"] > 3


def test_outliers_are_judged_over_the_whole_task_only(tmp_path: Path) -> None:
    """A median over the samples a live watch has seen finish depends on when it looked;
    outliers wait for the complete context and its late pass, where only they answer."""
    rows = [{"total_tokens": t, "status": "completed"} for t in (100, 120, 110, 90, 100)]
    partial = RunContext.from_rows(rows, complete=False)
    watch = Engine(load_text(tmp_path, SAMPLE)).open_sample(REF)
    big = {"status": "completed", "total_tokens": 500}
    assert [f.rule for f in watch.sample_row(big, partial)] == []
    partial.complete = partial.outliers_only = True
    (f,) = watch.sample_row(big, partial)
    assert f.rule == "token-outlier" and f.evidence.facts["compared_with"] == 5
    # the late pass leaves the other sample rules alone (they judged the row already)
    failed = {"status": "error", "retries": 2, "error": "sandbox 9 died"}
    assert Engine(load_text(tmp_path, SAMPLE)).open_sample(REF).sample_row(
        failed, partial) == []


def _unseen_rule(tmp_path: Path) -> Any:
    from watcher.engine import Engine, load_rules

    path = tmp_path / "unseen.yaml"
    path.write_text(
        "id: guessed\ntitle: t\ndescription: d\ncategory: shortcut\nseverity: info\n"
        "events: [tool]\nneeds: content\n"
        "detect:\n  unseen:\n    value: args.answer\n"
        "    when: {where: \"function == 'submit'\"}\n"
        "    seen_in: {where: \"function != 'submit'\"}\n    keep: 2\n"
        "confidence: {base: low, reason: r}\nmessage: m\n")
    return Engine(load_rules(paths=[str(path)], builtin=False))


def _tool(fn: str, args: dict[str, Any], result: str = "", ts: float = 1.0) -> dict[str, Any]:
    import json as _json

    from watcher.events import normalise as _n

    return _n({"event": "tool", "uuid": f"{fn}{ts}", "timestamp": ts, "function": fn,
               "arguments": _json.dumps(args), "result": result, "has_error": False})


def test_unseen_fires_only_for_values_no_remembered_output_holds(tmp_path: Path) -> None:
    from watcher.findings import SampleRef

    engine = _unseen_rule(tmp_path)
    w = engine.open_sample(SampleRef("t", "t", "e", "m", "s", 1))
    assert not w.feed(_tool("bash", {"cmd": "x"}, "The Flag is FLAG{abc}", 1.0))
    assert not w.feed(_tool("submit", {"answer": "flag{ABC}"}, "", 2.0))  # seen (case folded)
    w.feed(_tool("bash", {"cmd": "y"}, "nothing", 3.0))
    w.feed(_tool("bash", {"cmd": "z"}, "still nothing", 4.0))  # keep=2: FLAG{abc} forgotten
    (f,) = w.feed(_tool("submit", {"answer": "flag{abc}"}, "", 5.0))
    assert f.rule == "guessed" and f.evidence.facts["searched"] == 2
    assert f.evidence.facts["value"] == "flag{abc}"


def test_unseen_value_never_matches_across_two_remembered_outputs(tmp_path: Path) -> None:
    """Outputs are kept joined in one string; a value must not match across the seam."""
    from watcher.findings import SampleRef

    engine = _unseen_rule(tmp_path)
    w = engine.open_sample(SampleRef("t", "t", "e", "m", "s", 1))
    w.feed(_tool("bash", {"cmd": "x"}, "zzab", 1.0))
    w.feed(_tool("bash", {"cmd": "y"}, "cdzz", 2.0))
    (f,) = w.feed(_tool("submit", {"answer": "abcd"}, "", 3.0))
    assert f.evidence.facts["value"] == "abcd"
    assert not w.feed(_tool("submit", {"answer": "zzab"}, "", 4.0))  # each output still found
    assert not w.feed(_tool("submit", {"answer": "cdzz"}, "", 5.0))


# --------------------------------------------------------------- whole values, iteration


def test_repeat_identity_is_judged_on_whole_values(tmp_path: Path) -> None:
    """Display texts are cut to 256 characters; calls and results are compared whole."""
    head = "x" * 400
    same_head = [tool(arguments={"cmd": head + str(i)}, result="r") for i in range(3)]
    assert run(rep(tmp_path), same_head) == []  # three different calls
    results = [tool(arguments="ls", result=head + str(i)) for i in range(3)]
    (ep,) = episodes(run(rep(tmp_path), results))
    assert ep.evidence.facts["results_changed"] is True
    assert ep.evidence.facts["compared_on"] == "whole values"


def test_repeat_on_a_served_prefix_is_capped_low_and_says_so(tmp_path: Path) -> None:
    long = "y" * 400
    compact = [tool(arguments="ls", result=long, compact=True)] * 3
    (ep,) = episodes(run(rep(tmp_path), compact))
    assert ep.confidence == "low"
    assert ep.evidence.facts["compared_on"] == "the first 256 characters"
    assert "compared on the first 256 characters only" in ep.confidence_reason


def test_repeat_streak_and_calls_between(tmp_path: Path) -> None:
    """``between`` counts the other calls between the repeats; ``streak`` the longest run
    of back-to-back repeats with one result (never shrinking)."""
    rules = rep(tmp_path)
    a = tool(arguments="pytest", result="1 failed")
    edit = [tool(arguments=f"sed -i s/{i}/x/ f", result="") for i in range(2)]
    (ep,) = episodes(run(rules, [a, edit[0], a, edit[1], a]))
    assert (ep.evidence.facts["between"], ep.evidence.facts["streak"]) == (2, 1)
    (ep,) = episodes(run(rules, [a, a, a, edit[0], a]))
    assert (ep.evidence.facts["between"], ep.evidence.facts["streak"]) == (1, 3)


def test_threshold_reset_event_may_start_the_next_window(tmp_path: Path) -> None:
    rules = load_text(tmp_path, """
        id: texty
        title: t
        category: narration_loop
        severity: warning
        events: [model, tool]
        needs: content
        macro: is_plain_text_turn
        detect: {threshold: {count: 2, window: {events: 10}, reset: {macro: is_user_reply}}}
        confidence: medium
        message: "{count}"
    """)
    user = {"prompt_role": "user", "prompt": "a new question"}
    # the second turn answers a user (resets) and is itself counted, with the third
    found = run(rules, [model("a"), model("b", **user), model("c")])
    assert [f.count for f in episodes(found)] == [2]


UNSEEN = """
id: unseen-answer
title: u
category: shortcut
severity: info
events: [tool]
needs: content
type: tool
detect:
  unseen: {value: args.answer, when: {macro: is_submit_call},
           seen_in: {where: "function != 'submit'"}, keep: 50}
confidence: low
message: "{searched}"
"""


def test_unseen_searches_whole_outputs_within_a_budget(tmp_path: Path) -> None:
    from watcher.engine.detectors.unseen import UNSEEN_BUDGET

    rules = load_text(tmp_path, UNSEEN)
    late = tool(arguments="cat log", result="z" * 1000 + " the flag is picoCTF{late}")
    found = run(rules, [late, tool("submit", arguments={"answer": "picoCTF{late}"})])
    assert found == []  # printed after the first 256 characters: seen
    outputs = [tool(arguments=f"cat f{i}", result=f"{i} " + "q" * 5000) for i in range(40)]
    watch = Engine(rules).open_sample(REF)
    for i, it in enumerate(outputs):
        watch.feed(materialise(i, it))
    state = next(iter(watch.states.values()))
    state._merge()
    assert len(state.blob) <= UNSEEN_BUDGET + len(state.lens)
    assert 1 <= len(state.lens) < 40
