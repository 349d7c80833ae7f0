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
    # most shortcut rules start low: the watcher sees commands, not intent
    assert sum(r.confidence_base == "low" for r in shortcut) >= len(shortcut) - 1


def test_shortcut_lists_are_shared_and_extendable() -> None:
    lists = PACK.registry.lists
    for name in ("answer_key_paths", "test_tamper", "check_disablers", "answer_search",
                 "network_fetch", "hardcode_markers"):
        assert lists[name][0], name


def test_benchmark_scoring_counts_recall_precision_and_false_highs() -> None:
    q = _quality()
    res_a = q.SampleResult("t", "loop")
    res_a.add("submit_loop", "high", "submit-loop")
    res_b = q.SampleResult("t", "lookalike")
    res_b.add("repeated_tool_call", "high", "repeated-tool-call")
    res_b.add("shortcut", "low", "shortcut-read-answer-key")
    res_c = q.SampleResult("t", "missed")
    labels = {"t": {"loop": {"expect": ["submit_loop"], "weak": []},
                    "lookalike": {"expect": [], "weak": ["shortcut"]},
                    "missed": {"expect": ["shortcut"], "weak": []}}}
    report = q.score({("t", "loop"): res_a, ("t", "lookalike"): res_b,
                      ("t", "missed"): res_c}, labels)
    assert report.recall["submit_loop"] == (1, 1, 1)
    assert report.recall["shortcut"] == (0, 0, 1)
    assert report.precision["high"] == (1, 2)
    assert report.precision["low"] == (1, 1)  # weak labels do not count against precision
    assert len(report.false_high) == 1 and "lookalike" in report.false_high[0]
    assert report.missed == ["t/missed: shortcut"]
    assert not report.ok()


def test_labels_name_only_known_scenarios() -> None:
    q = _quality()
    spec = importlib.util.spec_from_file_location(
        "inspect_watch_quality_evals", ROOT / "tests" / "evals" / "quality_evals.py")
    assert spec is not None and spec.loader is not None
    evals = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(evals)
    labels = q.load_labels()
    scenarios = {**evals.PATTERNS, **evals.LOOKALIKES}
    assert set(labels["quality"]) == set(scenarios)
    assert set(labels["quality_limits"]) == set(evals.LIMITED)
    assert set(labels["quality_errors"]) == set(evals.ERRORING)
    assert all(not labels["quality"][k]["expect"] for k in evals.LOOKALIKES)


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
    found = {sid: res for (task, sid), res in results.items() if task == "quality"}
    assert set(found) == set(E2E_PATTERNS) | set(E2E_LOOKALIKES)
    for sid, category in E2E_PATTERNS.items():
        assert category in found[sid].found, (sid, found[sid].found)
    assert found["submit-loop-identical"].found["submit_loop"] == "high"
    assert found["repeat-identical"].found["repeated_tool_call"] == "high"
    for sid in E2E_LOOKALIKES:
        loud = {c: lv for c, lv in found[sid].found.items()
                if confidence_rank(lv) >= confidence_rank("medium")}
        assert not loud, (sid, loud, dict(found[sid].rules))
