"""The built-in pack: every rule's inline tests pass, and every rule has real tests.

A rule needs at least one case expecting a finding (true positive) and one
expecting none (false positive guard), so neither direction can silently rot.
"""

from __future__ import annotations

import pytest

from watcher.engine import builtin_dir, load_rules, run_case

PACK = load_rules(user_dir=False)
CASES = [(r, c) for r in PACK for c in r.tests]


def test_pack_is_packaged_and_nonempty() -> None:
    assert builtin_dir().name == "rules" or builtin_dir().joinpath("library.yaml").exists()
    assert {"repeated-tool-call", "submit-loop", "error-storm"} <= set(PACK.ids)
    assert all(r.source.startswith(str(builtin_dir())) for r in PACK)


@pytest.mark.parametrize("rule", list(PACK), ids=PACK.ids)
def test_rule_has_true_and_false_cases(rule: object) -> None:
    tests = rule.tests  # type: ignore[attr-defined]
    assert tests, f"{rule.id} has no inline tests"  # type: ignore[attr-defined]
    assert any(c["expect"] for c in tests), "needs a case that expects a finding"
    assert any(not c["expect"] for c in tests), "needs a case that expects no finding"


@pytest.mark.parametrize("rule,case", CASES, ids=[f"{r.id}::{c['name']}" for r, c in CASES])
def test_inline_case(rule: object, case: dict) -> None:
    result = run_case(rule, case)  # type: ignore[arg-type]
    assert result.passed, f"{result.problem}\nexpected {result.expected}\nactual {result.actual}"


@pytest.mark.parametrize("rule", list(PACK), ids=PACK.ids)
def test_rule_documents_itself(rule: object) -> None:
    r = rule
    assert r.description and r.handoff and r.falsepositives  # type: ignore[attr-defined]
    assert r.confidence_reason.endswith(".")  # type: ignore[attr-defined]
