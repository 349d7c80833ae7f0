"""The predicate tree's lowered closures, specialisations and gates hold to its plain
reading (``nodes.evaluate``): the reference the fast path is pinned to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.engine.util import load_text
from watcher.engine import load_rules, materialise
from watcher.engine.lang.nodes import FALSE, TRUE, All, AnyOf, Not, evaluate, lower, specialise
from watcher.engine.rule import never

_RULES = load_rules(builtin=True, user_dir=False)
PACK = [r for r in _RULES if r.node is not None]
# every predicate tree of the pack: the rules' own and the macros (detectors' steps too)
TREES = [(r.id, r.node) for r in PACK] + sorted(_RULES.registry.macro_nodes.items())

_ARGS = ["cat tests/expected_output.txt", "ls -la", "pytest -x -q -k 'not slow' || true",
         "sed -i 's/assert/# assert/' tests/test_a.py", "grep -rn answer /grader",
         "curl https://example.com/solutions.json", "echo 'flag: picoCTF{abc}' > flag.txt",
         "İ ſ stray non-ASCII", "@pytest.mark.skip\ndef test_x(): pass", "find / -name '*key*'",
         "submit", "python -c 'print(open(\"/root/answers.json\").read())'"]
_RESULTS = ["", "ok", "Traceback (most recent call last):\n  File", "bash: foo: command not found",
            "<returncode>1</returncode>\n<output>\nError: nope", "picoCTF{abc}"]
_COMPLETIONS = ["final answer: 42", "Let me look", "I'll submit now", "The answer is 7",
                "submit(42)", ""]
_PROMPTS = ["Please proceed to the next step using your best judgement.", "Solve the task.",
            "What about the edge case?"]

events = st.one_of(
    st.builds(lambda fn, a, r, err: {"type": "tool", "function": fn, "arguments": {"cmd": a},
                                     "result": r, **({"error": "failed"} if err else {})},
              st.sampled_from(["bash", "submit", "python", "wait"]), st.sampled_from(_ARGS),
              st.sampled_from(_RESULTS), st.booleans()),
    st.builds(lambda c, s, p, seen: {"type": "model", "completion": c, "stop_reason": s,
                                     "prompt_role": "user", "prompt": p, "prompt_seen": seen},
              st.sampled_from(_COMPLETIONS), st.sampled_from(["stop", "tool_calls"]),
              st.sampled_from(_PROMPTS), st.booleans()),
    st.builds(lambda m: {"type": "error", "error": m}, st.sampled_from(["boom", "timeout"])),
)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(PACK) - 1), events)
def test_lowered_predicates_agree_with_the_tree(i: int, item: dict[str, Any]) -> None:
    rule = PACK[i]
    e = materialise(0, item)
    want = evaluate(rule.node, e)
    assert rule.predicate(e) is want, (rule.id, item)
    if e["type"] in rule.typed:  # specialised for this event type: the same answer
        typed = rule.typed[e["type"]]
        assert (True if typed is None else typed(e)) is want, (rule.id, item)
        assert evaluate(specialise(rule.node, e["type"]), e) is want
    if rule.gate is not None and not rule.gate.open(e):
        assert want is False, (rule.id, item)  # a closed gate never hides a match


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(TREES) - 1), events)
def test_every_tree_of_the_pack_lowers_to_its_reading(i: int, item: dict[str, Any]) -> None:
    name, node = TREES[i]
    e = materialise(0, item)
    assert lower(node, _RULES.registry.lowered)(e) is evaluate(node, e), (name, item)
    assert evaluate(specialise(node, e["type"]), e) is evaluate(node, e), (name, item)


def test_the_pack_exercises_every_kind_of_node() -> None:
    kinds: set[str] = set()

    def walk(node: Any) -> None:
        kinds.add(type(node).__name__)
        for part in getattr(node, "parts", ()):
            walk(part)
        if isinstance(node, Not):
            walk(node.part)

    for _, node in TREES:
        walk(node)
    assert {"TypeIs", "Where", "Text", "All", "AnyOf", "Not"} <= kinds


def test_constants_and_empty_combinators(tmp_path: Path) -> None:
    assert specialise(All((TRUE, FALSE)), "tool") is FALSE
    assert specialise(AnyOf((FALSE, TRUE)), "tool") is TRUE
    assert specialise(Not(TRUE), "tool") is FALSE
    assert lower(FALSE, {}) is never
    rules = load_text(tmp_path, """
    id: r
    title: r
    category: c
    severity: info
    events: [tool]
    needs: metadata
    any: []
    detect: match
    """, library=False)
    e = materialise(0, {"type": "tool", "function": "bash"})
    assert evaluate(rules.rules[0].node, e) is False and rules.rules[0].predicate(e) is False
