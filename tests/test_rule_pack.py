"""The built-in rule pack as a product: coverage, honesty, inline tests, and a real run.

Per-case inline tests are also parametrised in ``tests/engine/test_pack.py``; here
they run as one aggregate so a pack change is caught even when only this file
runs. The e2e test runs a few quality-eval scenarios for real (scripted model)
and checks the expected categories appear on the pattern samples and nothing at
medium or above on their look-alikes.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from watcher.engine import load_rules, run_rule_tests
from watcher.engine.model import BUILTIN_CATEGORIES
from watcher.findings import confidence_rank

ROOT = Path(__file__).resolve().parent.parent
PACK = load_rules(user_dir=False)


def _quality() -> ModuleType:
    """``benchmarks/quality.py`` (benchmarks is not a package)."""
    name = "inspect_watch_quality_bench"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "quality.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_every_inline_case_passes() -> None:
    results = run_rule_tests(PACK.rules)
    failed = [f"{r.rule}::{r.name}: {r.problem}" for r in results if not r.passed]
    assert results and not failed, "\n".join(failed)


def test_pack_covers_every_builtin_category() -> None:
    categories = {r.category for r in PACK}
    assert set(BUILTIN_CATEGORIES) <= categories, set(BUILTIN_CATEGORIES) - categories
    assert "sentinel" in categories


@pytest.mark.parametrize("rule", list(PACK), ids=PACK.ids)
def test_rule_has_cases_both_ways_and_an_honest_description(rule: object) -> None:
    r = rule
    cases = r.tests  # type: ignore[attr-defined]
    assert any(c["expect"] for c in cases), "needs a true-positive case"
    assert any(not c["expect"] for c in cases), "needs a false-positive case"
    desc = " ".join(r.description.split())  # type: ignore[attr-defined]
    assert len(desc) >= 120, "the description must say what, why and what it cannot know"
    assert "cannot" in desc or "only" in desc, "say what the watcher cannot know"
    assert r.falsepositives and r.handoff  # type: ignore[attr-defined]


def test_shortcut_rules_never_claim_high_confidence() -> None:
    shortcut = [r for r in PACK if r.category == "shortcut"]
    assert len(shortcut) >= 5
    for r in shortcut:
        levels = [r.confidence_base] + [c.level for c in r.confidence_when]
        assert max(confidence_rank(lv) for lv in levels) <= confidence_rank("medium"), r.id
    # shortcut rules start low: the watcher sees commands, not intent; medium only where
    # the shape is the shortcut itself (an answer written in for a test-named input)
    assert {r.id for r in shortcut if r.confidence_base != "low"} <= {
        "shortcut-hardcode-answer"}


def test_benchmark_scores_recall_at_the_labelled_level() -> None:
    """A behaviour labelled `high` found only at `medium` is found, but not at its level:
    the figure the issue measures (a real loop reported below its level is a miss)."""
    q = _quality()
    label = q._label({"expect": {"repeated_tool_call": "high", "error_storm": "medium"}})
    assert label.level("repeated_tool_call") == "high" and label.level("x") == "low"
    corpus = q.Corpus("real: t", real=True, labels={("t", "a", 1): label})
    found = {("t", "a", 1): {"repeated_tool_call": ("medium", {"near-identical-failing-calls"}),
                             "error_storm": ("high", {"error-storm-output"})}}
    sc = q.score(corpus, found, {("t", "a", 1)})
    assert sc.recall["repeated_tool_call"] == [1, 1, 1, 0]
    assert sc.recall["error_storm"] == [1, 1, 1, 1]
    assert sc.at_level() == (1, 2)
    assert sc.below and "labelled high" in sc.below[0]
    with pytest.raises(SystemExit):
        q._label({"expect": {"repeated_tool_call": "huge"}})


def test_shortcut_lists_are_shared_and_extendable() -> None:
    lists = PACK.registry.lists
    for name in ("answer_key_paths", "test_tamper", "check_disablers", "answer_search",
                 "network_fetch", "hardcode_markers"):
        assert lists[name][0], name


def test_benchmark_scoring_counts_recall_precision_and_false_highs() -> None:
    q = _quality()
    corpus = q.Corpus("real: t", real=True, labels={
        ("t", "loop", 1): q.Label({"submit_loop"}, set()),
        ("t", "lookalike", 1): q.Label(set(), {"shortcut"}),
        ("t", "missed", 1): q.Label({"shortcut"}, set()),
        ("t", "limited", 1): q.Label(set(), set()),
        ("t", "not-scanned", 1): q.Label({"shortcut"}, set())})
    found = {("t", "loop", 1): {"submit_loop": ("high", {"submit-loop"})},
             ("t", "lookalike", 1): {"repeated_tool_call": ("high", {"repeated-tool-call"}),
                                     "shortcut": ("low", {"shortcut-read-answer-key"})},
             # a fact Inspect records is not scored on a real corpus
             ("t", "limited", 1): {"limit": ("high", {"sample-limit"})}}
    listed = {k for k in corpus.labels if k[1] != "not-scanned"}
    sc = q.score(corpus, found, listed)
    assert sc.samples == 4
    # [found at any level, at medium+, labelled, at the labelled level ("low": any)]
    assert sc.recall["submit_loop"] == [1, 1, 1, 1]
    assert sc.recall["shortcut"] == [0, 0, 1, 0]
    assert sc.precision["high"] == [1, 2]
    assert sc.precision["medium+"] == [1, 2]
    assert sc.precision["low"] == [0, 0]  # weak labels count neither way
    assert len(sc.false["high"]) == 1 and "lookalike" in sc.false["high"][0]
    assert sc.missed == ["t/missed: shortcut"]
    assert not sc.ok()
    lo, hi = q.wilson(9, 10)
    assert 0.59 < lo < 0.6 and 0.98 < hi < 0.99  # the Wilson interval of 9/10


def test_labels_name_only_known_scenarios() -> None:
    q = _quality()
    spec = importlib.util.spec_from_file_location(
        "inspect_watch_quality_evals", ROOT / "tests" / "evals" / "quality_evals.py")
    assert spec is not None and spec.loader is not None
    evals = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(evals)
    scripted = q.load_corpora()[0]
    assert not scripted.real

    def ids(task: str) -> set[str]:
        return {sid for t, sid, _ in scripted.labels if t == task}

    scenarios = {**evals.PATTERNS, **evals.LOOKALIKES}
    assert ids("quality") == set(scenarios)
    assert ids("quality_limits") == set(evals.LIMITED)
    assert ids("quality_errors") == set(evals.ERRORING)
    assert ids("quality_conversation") == set(evals.CONVERSATIONS) | set(evals.AIRLINE)
    assert ids("quality_weak") == set(evals.WEAK)
    assert all(not scripted.labels[("quality", k, 1)].expect for k in evals.LOOKALIKES)


def test_real_labels_follow_the_method() -> None:
    """Every real label file names its corpus log, labels only known categories, and the
    SWE-bench set is the METHOD.md selection, split in two equal halves."""
    q = _quality()
    corpora = [c for c in q.load_corpora() if c.real]
    names = {c.name for c in corpora}
    assert "real: SWE-bench replay (Gemini 3 Pro), tune" in names
    swe = [c for c in corpora if c.name.startswith("real: SWE-bench")]
    assert [len(c.labels) for c in swe] == [120, 120]
    known = set(q.BEHAVIOURS) | q.RECORDED
    for c in corpora:
        for label in c.labels.values():
            assert label.expect <= known and label.weak <= known, (c.name, label)


E2E_PATTERNS = {
    "submit-loop-identical": "submit_loop",
    "repeat-identical": "repeated_tool_call",
    "repeat-cycle-2": "repeated_tool_call",
    "shortcut-write-readback": "shortcut",
    "shortcut-edit-tests": "shortcut",
    "narration-loop": "narration_loop",
}
E2E_LOOKALIKES = ["final-answer-then-submit", "polling-progress", "retest-between-fixes",
                  "long-exploration", "debug-read-test"]


@pytest.mark.e2e
def test_quality_subset_end_to_end(tmp_path: Path) -> None:
    q = _quality()
    log_dir = tmp_path / "logs"
    q.run_quality_eval(str(log_dir), samples=list(E2E_PATTERNS) + E2E_LOOKALIKES,
                       task="quality")
    results = q.scan([str(log_dir)])
    found = {sid: cats for (task, sid, _), cats in results.items() if task == "quality"}
    assert set(q.listed_samples([str(log_dir)])) == {
        ("quality", s, 1) for s in set(E2E_PATTERNS) | set(E2E_LOOKALIKES)}
    for sid, category in E2E_PATTERNS.items():
        assert category in found.get(sid, {}), (sid, found.get(sid))
    assert found["submit-loop-identical"]["submit_loop"][0] == "high"
    assert found["repeat-identical"]["repeated_tool_call"][0] == "high"
    for sid in E2E_LOOKALIKES:
        loud = {c: lv for c, (lv, _) in found.get(sid, {}).items()
                if confidence_rank(lv) >= confidence_rank("medium")}
        assert not loud, (sid, loud)


def test_continue_messages_recognise_the_installed_inspects_defaults() -> None:
    """The list continue_messages knows the continue messages of react() (with and without
    a submit tool) and basic_agent() in the installed Inspect, as a model event's prompt
    shows them (newlines read as spaces), and no reply with new content."""
    import re

    from inspect_ai.agent._types import (
        DEFAULT_CONTINUE_PROMPT,
        DEFAULT_CONTINUE_PROMPT_NO_SUBMIT,
    )
    from inspect_ai.solver._basic_agent import DEFAULT_CONTINUE_MESSAGE

    from watcher.events import truncate

    patterns = [re.compile(p) for p in PACK.registry.lists["continue_messages"][0]]
    nudges = [DEFAULT_CONTINUE_PROMPT.replace("{submit}", name) for name in ("submit", "answer")]
    nudges += [DEFAULT_CONTINUE_PROMPT_NO_SUBMIT, DEFAULT_CONTINUE_MESSAGE]
    for text in nudges:
        assert any(p.search(truncate(text)) for p in patterns), text
    replies = ["Please proceed to the next step using your best judgement. Also, my flight "
               "is at 5pm.", "Yes, please go ahead.", "My reservation id is ZFA04Y."]
    for text in replies:
        assert not any(p.search(truncate(text)) for p in patterns), text
