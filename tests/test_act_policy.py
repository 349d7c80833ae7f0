"""The action policy language (watcher/act/policy.py): ``act:`` blocks, the
``--act-policy`` file, the built-in defaults, located and coded errors."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from watcher.act.policy import (
    DEFAULTS,
    ActSpec,
    PolicyErrors,
    RuleInfo,
    check_references,
    load_policy,
    parse_act,
    parse_policy,
    rule_act_block,
    rule_acts,
)
from watcher.engine import load_rules
from watcher.engine.errors import RuleError
from watcher.engine.yamlsrc import load_docs
from watcher.findings import Evidence, Finding, SampleRef

RULE = """\
id: my-loop
title: My loop
category: submit_loop
events: [model]
detect:
  threshold: {count: 2, window: {events: 10}}
act:
  verb: cancel_sample
  action: cancel
  when:
    confidence: medium
    count: {gte: 4}
    tokens_since_first_seen: {gte: 1000, lt: 50000}
  grace: {events: 12}
"""


def finding(rule: str = "my-loop", category: str = "submit_loop", confidence: str = "high",
            count: int = 5, **facts: object) -> Finding:
    return Finding(id="x", rule=rule, title="t", category=category, severity="warning",
                   confidence=confidence, score=0.9,  # type: ignore[arg-type]
                   confidence_reason="", sample=SampleRef("t", "ti", "e", "m", "s", 1),
                   summary="", evidence=Evidence(facts=dict(facts)), first_seen=0.0,
                   last_seen=0.0, count=count, status="open", handoff="")


def test_parse_act_reads_a_rule_documents_act_block() -> None:
    """What the rule engine will call with a rule's own ``act:`` block."""
    errors: list[RuleError] = []
    [doc] = load_docs(RULE, "rules/my-loop.yaml", errors)
    assert not errors
    spec = parse_act(doc.data["act"], doc, ("act",))
    assert isinstance(spec, ActSpec)
    assert (spec.verb, spec.action, spec.confidence, spec.grace_events, spec.grace_seconds) == (
        "cancel_sample", "cancel", "medium", 12, None)
    assert spec.source == "rules/my-loop.yaml:8"
    assert spec.args == {"action": "cancel"}
    assert spec.wants(finding(count=4, tokens_since_first_seen=1000))
    assert not spec.wants(finding(count=3, tokens_since_first_seen=1000))  # count
    assert not spec.wants(finding(count=4, tokens_since_first_seen=999))  # tokens
    assert not spec.wants(finding(count=4))  # a fact not known does not hold
    assert not spec.wants(finding(confidence="low", count=9, tokens_since_first_seen=2000))
    assert spec.wants(finding(confidence="medium", count=9, tokens_since_first_seen=2000))


def test_parse_act_locates_its_errors() -> None:
    text = RULE.replace("verb: cancel_sample", "verb: cancel_sampel").replace(
        "confidence: medium", "confidence: low").replace("{events: 12}", "{evnts: 12}")
    errors: list[RuleError] = []
    [doc] = load_docs(text, "r.yaml", errors)
    got = parse_act(doc.data["act"], doc, ("act",))
    assert isinstance(got, list)
    rendered = {e.code: e.render() for e in got}
    assert set(rendered) == {"W114", "W103"}
    by_line = sorted((e.line, e.col, e.code) for e in got)
    assert by_line == [(8, 9, "W114"), (11, 17, "W114"), (14, 11, "W103")]
    verb = next(e for e in got if e.line == 8)
    assert "did you mean 'cancel_sample'?" in verb.render()
    low = next(e for e in got if e.line == 11)
    assert "never acts on a low finding" in low.render()
    assert "did you mean 'events'?" in next(e for e in got if e.code == "W103").render()


@pytest.mark.parametrize("block, code, words", [
    ("{action: score}", "W111", "missing required field 'verb'"),
    ("{verb: drain_task, action: score}", "W103", "'action' is for cancel_sample"),
    ("{verb: cancel_sample, action: error}", "W114", "never marks a sample errored"),
    ("{verb: pause_task, now: yes please}", "W104", "now must be true or false"),
    ("{verb: cancel_sample, when: {count: [1, 2]}}", "W104", "{in: [...]}"),
    ("{verb: cancel_sample, when: {count: {gt: many}}}", "W104", "gt must be a number"),
    ("{verb: cancel_sample, when: {count: {atleast: 3}}}", "W103", "unknown operator"),
    ("{verb: cancel_sample, grace: {events: 0}}", "W114", "events must be 1 or more"),
    ("{verb: cancel_sample, grace: {}}", "W111", "grace needs events or seconds"),
    ("[cancel_sample]", "W104", "act must be a mapping or 'off'"),
])
def test_bad_act_blocks(block: str, code: str, words: str) -> None:
    errors: list[RuleError] = []
    [doc] = load_docs(f"act: {block}\n", "p.yaml", errors)
    got = parse_act(doc.data["act"], doc, ("act",))
    assert isinstance(got, list) and got
    assert code in {e.code for e in got}
    assert any(words in e.render() for e in got), [e.render() for e in got]


def test_off_is_an_act_block_that_does_nothing() -> None:
    errors: list[RuleError] = []
    for text in ("act: off\n", "act: false\n", "act: 'off'\n"):
        [doc] = load_docs(text, "p.yaml", errors)
        spec = parse_act(doc.data["act"], doc, ("act",))
        assert isinstance(spec, ActSpec) and spec.off


POLICY = """\
rules:
  my-loop: {verb: cancel_sample, when: {confidence: high}}
  repeated-tool-call: off
categories:
  submit_loop: {verb: drain_task, when: {confidence: medium}, grace: {seconds: 5}}
  stall: {verb: cancel_tool_call, when: {confidence: medium}}
run:
  interrupt: {share: 0.5, min_samples: 3, categories: [submit_loop]}
"""


def test_a_policy_file_overrides_adds_and_disables(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    policy = load_policy(path)
    # the file's rule entry first, then its category entry, then the defaults
    assert policy.lookup(finding("my-loop")).verb == "cancel_sample"  # type: ignore[union-attr]
    other = policy.lookup(finding("submit-loop", confidence="medium"))
    assert other is not None and other.verb == "drain_task"  # the category beat the default
    assert policy.lookup(finding("repeated-tool-call", "repeated_tool_call")) is None  # off
    stall = policy.lookup(finding("stalled-sample", "stall", "medium"))
    assert stall is not None and stall.verb == "cancel_tool_call" and stall.wants(
        finding("stalled-sample", "stall", "medium"))
    assert policy.interrupt is not None and policy.interrupt.share == 0.5
    assert policy.interrupt.min_samples == 3
    assert policy.interrupt.categories == frozenset({"submit_loop"})
    # without the file: the defaults alone
    plain = load_policy()
    spec = plain.lookup(finding("repeated-tool-call", "repeated_tool_call"))
    assert spec is not None and spec.verb == "cancel_sample" and spec.action == "score"
    assert plain.lookup(finding("narration-loop", "narration_loop")) is None
    # `defaults: false` drops them
    path.write_text("defaults: false\nrules:\n  my-loop: {verb: cancel_sample}\n")
    bare = load_policy(path)
    assert bare.lookup(finding("repeated-tool-call", "repeated_tool_call")) is None
    assert bare.lookup(finding("my-loop")) is not None


def test_a_rules_own_act_block_is_below_the_file_and_above_the_defaults(
        tmp_path: Path) -> None:
    own = ActSpec(verb="pause_task")
    policy = load_policy(rule_acts={"repeated-tool-call": own})
    assert policy.lookup(finding("repeated-tool-call", "repeated_tool_call")) is own
    path = tmp_path / "p.yaml"
    path.write_text("categories:\n  repeated_tool_call: off\n")
    assert load_policy(path, rule_acts={"repeated-tool-call": own}).lookup(
        finding("repeated-tool-call", "repeated_tool_call")) is None


def test_policy_file_errors_are_all_reported_located(tmp_path: Path) -> None:
    text = ("rules:\n  a: {verb: cancel_sample}\n  a: {verb: drain_task}\n"
            "categries: {}\nrun: {interrupt: {share: 2}}\n")
    with pytest.raises(PolicyErrors) as exc:
        parse_policy(text, "p.yaml")
    codes = sorted((e.line, e.code) for e in exc.value.errors)
    assert codes == [(3, "W102"), (4, "W103"), (5, "W114")]
    assert "did you mean 'categories'?" in exc.value.render()
    assert exc.value.render().endswith("3 errors in the action policy")
    with pytest.raises(PolicyErrors, match="W101"):
        parse_policy("rules: [\n", "p.yaml")
    with pytest.raises(PolicyErrors, match="W120"):
        load_policy(tmp_path / "missing.yaml")


def test_references_are_checked_against_the_loaded_rules(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("rules:\n  submit-lop: {verb: cancel_sample}\n"
                    "  repeated-tool-call:\n    verb: cancel_sample\n"
                    "    when: {streek: {gte: 3}}\n"
                    "categories:\n  stalls: off\n")
    rules = {"submit-loop": RuleInfo("submit_loop", frozenset({"near_identical"})),
             "repeated-tool-call": RuleInfo("repeated_tool_call", frozenset({"streak"})),
             "stalled-sample": RuleInfo("stall")}
    with pytest.raises(PolicyErrors) as exc:
        check_references(load_policy(path), rules)
    found = {(e.code, e.line) for e in exc.value.errors}
    assert found == {("W121", 2), ("W119", 5), ("W121", 7)}
    text = exc.value.render()
    assert "did you mean 'submit-loop'?" in text and "did you mean 'streak'?" in text
    assert "did you mean 'stall'?" in text
    # spend facts and count are every rule's; unknown facts of an unknown detector pass
    path.write_text("rules:\n  repeated-tool-call:\n    verb: cancel_sample\n"
                    "    when: {count: {gte: 3}, tokens_since_high: {gte: 10}}\n"
                    "  stalled-sample: {verb: cancel_tool_call, when: {anything: 1}}\n")
    check_references(load_policy(path), rules)


def test_the_shipped_defaults_act_only_on_high_and_name_built_in_rules() -> None:
    layer, interrupt, _ = parse_policy(DEFAULTS.read_text(), str(DEFAULTS), "defaults")
    assert interrupt is None  # stopping a whole run is never a default
    # one category: the watch's own finding of a task past --task-budget, drained (no new
    # samples; nothing cancelled), at high only
    assert set(layer.categories) == {"budget"}
    budget = layer.categories["budget"]
    assert (budget.verb, budget.confidence) == ("drain_task", "high")
    assert set(layer.rules) == {"repeated-tool-call", "submit-loop"}
    pack = {r.id: r.category for r in load_rules(paths=[], builtin=True).rules}
    for rule, spec in layer.rules.items():
        assert rule in pack
        assert spec.confidence == "high" and spec.verb == "cancel_sample"
        assert spec.action == "score"  # keeps what was done
        assert spec.grace_events and spec.grace_seconds  # re-checked before acting
    f = finding("repeated-tool-call", "repeated_tool_call", "medium")
    assert load_policy().lookup(f) is not None and not load_policy().lookup(f).wants(f)  # type: ignore[union-attr]
    assert load_policy().lookup(replace(f, confidence="high")).wants(  # type: ignore[union-attr]
        replace(f, confidence="high"))


def test_a_loaded_rules_act_block_is_read_through_one_function() -> None:
    """``rule_act_block`` is the one place that reads ``rule.act_block`` (kept raw, with
    its location, by the rule loader): absent gives ``None``; present, it is parsed with
    its location, and its errors and unknown facts are located in the rule's file."""
    from types import SimpleNamespace

    errors: list[RuleError] = []
    [doc] = load_docs(RULE, "rules/my-loop.yaml", errors)
    plain = SimpleNamespace(id="plain")
    own = SimpleNamespace(id="my-loop", act_block=(doc.data["act"], doc, ("act",)))
    assert rule_act_block(plain) is None
    block = rule_act_block(own)
    assert block is not None and block.doc is doc and block.path == ("act",)
    acts = rule_acts([plain, own])
    assert set(acts) == {"my-loop"} and acts["my-loop"].action == "cancel"
    policy = load_policy(rule_acts=acts)
    assert policy.lookup(finding("my-loop")) is acts["my-loop"]
    check_references(policy, {"my-loop": RuleInfo("submit_loop", frozenset({"streak"}))})
    # the rule's facts are checked too (W119, at the line in the rule's file)
    [typo] = load_docs(RULE.replace("count:", "streek:"), "rules/my-loop.yaml", errors)
    policy = load_policy(rule_acts=rule_acts(
        [SimpleNamespace(id="my-loop", act_block=(typo.data["act"], typo, ("act",)))]))
    with pytest.raises(PolicyErrors) as exc:
        check_references(policy, {"my-loop": RuleInfo("submit_loop", frozenset({"streak"}))})
    [unknown] = exc.value.errors
    assert (unknown.code, unknown.file, unknown.line) == ("W119", "rules/my-loop.yaml", 12)
    assert "did you mean 'streak'?" in exc.value.render()
    # a bad block is a located error of the rule's file
    [bad] = load_docs(RULE.replace("cancel_sample", "cancel_sampel"), "r.yaml", errors)
    with pytest.raises(PolicyErrors) as exc:
        rule_acts([SimpleNamespace(id="my-loop", act_block=(bad.data["act"], bad))])
    assert [(e.code, e.file, e.line) for e in exc.value.errors] == [("W114", "r.yaml", 8)]


def test_a_rule_files_own_act_block_reaches_the_policy(tmp_path: Path) -> None:
    """The engine keeps a rule's ``act:`` as written with its document; the watchdog's
    policy parses it from there, and its errors point into the rule's file."""
    from watcher.engine import load_rules

    path = tmp_path / "my-loop.yaml"
    full = RULE.replace("category: submit_loop\n", "category: submit_loop\nseverity: warning\n"
                        "needs: content\ndescription: d\nconfidence: {base: medium, reason: r}\n"
                        "message: m\n")
    path.write_text(full)
    (rule,) = [r for r in load_rules(paths=[str(path)], builtin=False) if r.id == "my-loop"]
    acts = rule_acts([rule])
    assert set(acts) == {"my-loop"} and acts["my-loop"].action == "cancel"
    path.write_text(full.replace("cancel_sample", "cancel_sampel"))
    (bad,) = [r for r in load_rules(paths=[str(path)], builtin=False) if r.id == "my-loop"]
    with pytest.raises(PolicyErrors) as exc:
        rule_acts([bad])
    assert exc.value.errors[0].file == str(path)


# -- values that would switch an action off unsaid (issue 34, item 13) ---------------------


@pytest.mark.parametrize("text,words", [
    ("rules:\n  repeated-tool-call: {verb: cancel_sample, grace: {seconds: .nan}}\n",
     "seconds must be above 0"),
    ("rules:\n  repeated-tool-call: {verb: cancel_sample, grace: {seconds: .inf}}\n",
     "seconds must be above 0"),
    ("rules:\n  repeated-tool-call: {verb: cancel_sample, grace: {events: 1" + "0" * 400
     + "}}\n", "events must be 1 or more and at most 1,000,000"),
    ("rules:\n  repeated-tool-call: {verb: cancel_sample, when: {count: {gte: .nan}}}\n",
     "gte must be a finite number"),
    ("run: {interrupt: {share: .nan}}\n", "share must be above 0"),
    ("run: {interrupt: {share: 0.5, min_samples: 1" + "0" * 400 + "}}\n",
     "min_samples must be 1 or more and at most 1,000,000"),
])
def test_values_that_would_never_act_are_located_errors(text: str, words: str) -> None:
    with pytest.raises(PolicyErrors) as exc:
        parse_policy(text, "p.yaml")
    assert words in exc.value.render() and "p.yaml:" in exc.value.render()


def test_an_interrupt_of_categories_no_rule_has_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("run:\n  interrupt: {share: 0.5, categories: [submit_loops]}\n")
    rules = {"submit-loop": RuleInfo("submit_loop", frozenset())}
    with pytest.raises(PolicyErrors) as exc:
        check_references(load_policy(path), rules)
    assert "no loaded category 'submit_loops'" in exc.value.render()
    assert "did you mean 'submit_loop'?" in exc.value.render()


def test_a_policy_that_acts_on_nothing_stops_the_watch(tmp_path: Path) -> None:
    """``defaults: false`` alone left a watch that could do nothing while its banner
    said it acts."""
    from click.testing import CliRunner

    from watcher.cli import main

    path = tmp_path / "p.yaml"
    path.write_text("# no defaults\ndefaults: false\n")
    rules = {"submit-loop": RuleInfo("submit_loop", frozenset())}
    with pytest.raises(PolicyErrors) as exc:
        check_references(load_policy(path), rules)
    assert f"{path}:2" in exc.value.render() and "acts on nothing" in exc.value.render()
    res = CliRunner().invoke(main, ["watch", "--act", "--act-policy", str(path), "--once"])
    assert res.exit_code == 2 and "acts on nothing" in res.output
    # an action of its own, or an interrupt, is something to do
    path.write_text("defaults: false\nrun: {interrupt: {share: 0.5}}\n")
    check_references(load_policy(path), rules)
