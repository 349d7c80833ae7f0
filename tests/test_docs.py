"""docs/findings.md says what the code does: its examples have the fields, rule ids and
categories the watcher produces now, every notice kind the code can emit is documented
(and no other), and the commands it shows parse."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import click
import pytest

import watcher
from watcher.cli import main
from watcher.engine import load_rules
from watcher.findings import Notice, SampleRef
from watcher.reporters.examples import example_snapshots
from watcher.reporters.jsonl import finding_record

REPO = Path(__file__).resolve().parent.parent
DOC = (REPO / "docs" / "findings.md").read_text()
GENERATED = re.compile(r"<!-- generated: ([\w-]+) -->\n```json\n(.*?)\n```\n<!-- end generated -->",
                       re.S)

# every way the code names a notice kind: Notice(kind="x"), self.notice("x", …),
# self._notice("x", …), a stream's ("x", message, details) and a source's ("x", m)
KIND_PATTERNS = [
    re.compile(r'Notice\(\s*kind="(\w+)"'),
    re.compile(r'notice\(\s*"(\w+)"'),
    re.compile(r'notices\.append\(\(\s*"(\w+)"'),
    re.compile(r'\(\s*"(\w+)",\s*(?:m|message)\s*\)'),
    re.compile(r'kind="(\w+)"'),
]


def code_notice_kinds() -> set[str]:
    kinds: set[str] = set()
    # the package being tested (the sources, or a compiled build beside no sources)
    for path in Path(watcher.__file__).resolve().parent.rglob("*.py"):
        if path.name == "examples.py":
            continue  # the reporters' synthetic fixtures
        text = path.read_text()
        for pattern in KIND_PATTERNS:
            kinds.update(pattern.findall(text))
    return kinds


def documented_notice_kinds() -> set[str]:
    section = DOC[DOC.index("| `notice` | When |\n|---|---|\n"):].split("\n", 2)[2]
    section = section[: section.index("\n\n")]
    return set(re.findall(r"^\| `(\w+)` \|", section, re.M))


def examples() -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for name, body in GENERATED.findall(DOC):
        try:
            out[name] = [json.loads(body)]  # one object, wrapped over lines
        except ValueError:
            out[name] = [json.loads(line) for line in body.splitlines()]
    return out


def table_fields(heading: str) -> list[str]:
    section = DOC[DOC.index(heading):]
    table = section[section.index("| Field |"):]
    table = table[: table.index("\n\n")]
    return re.findall(r"^\| `(\w+)` \|", table, re.M)


@pytest.fixture(scope="module")
def pack() -> dict[str, str]:
    """Built-in rule id -> category."""
    return {r.id: r.category for r in load_rules(paths=[], builtin=True).rules}


def test_the_generated_examples_are_there() -> None:
    assert set(examples()) == {"finding-example", "snapshots-example", "notice-example"}


def test_finding_example_has_the_fields_of_a_finding_now(pack: dict[str, str]) -> None:
    [shown] = examples()["finding-example"]
    real = finding_record(example_snapshots()[0])
    assert list(shown) == list(real)  # same keys, same order
    assert set(shown["evidence"]) == set(real["evidence"])
    assert shown["schema"] == 1 and shown["kind"] == "finding"
    assert pack[shown["rule"]] == shown["category"]
    assert shown["confidence"] in ("low", "medium", "high")
    assert shown["status"] in ("open", "escalated", "ended")
    # the documented field table lists exactly those fields
    assert table_fields("## Finding lines") == list(real)
    assert set(table_fields("### `evidence`")) == {*real["evidence"], "agent_text_truncated"}


def test_snapshot_example_is_one_episode_of_a_real_rule(pack: dict[str, str]) -> None:
    lines = examples()["snapshots-example"]
    assert len({d["id"] for d in lines}) == 1 and all(d["rule"] in pack for d in lines)
    assert [d["status"] for d in lines][-1] == "ended"


def test_rule_ids_and_categories_named_in_the_table_exist(pack: dict[str, str]) -> None:
    finding_lines = DOC[:DOC.index("## Notice lines")]
    rows = {m[0]: m[1] for m in re.findall(r"^\| `(rule|category)` \| string \| (.*) \|$",
                                            finding_lines, re.M)}
    named_rules = re.findall(r"`([\w.-]+)`", rows["rule"].split("(")[0])
    assert named_rules and set(named_rules) <= set(pack)
    named = set(re.findall(r"`([\w.-]+)`", rows["category"])) - {"category"}
    assert named == set(pack.values())


def test_notice_example_and_fields() -> None:
    [shown] = examples()["notice-example"]
    real = Notice(kind="gap", message="m", at=1.0,
                  sample=SampleRef("t", "ti", "e", "m", "1", 1)).to_dict()
    assert set(shown) <= set(real) and set(real) - set(shown) <= {"sample"}
    assert shown["notice"] in code_notice_kinds()
    assert table_fields("## Notice lines") == [*list(real)[:2], "notice", *list(real)[3:]]


def test_every_notice_kind_the_code_emits_is_documented() -> None:
    kinds = code_notice_kinds()
    # the grep must see the kinds of every path (else it proves nothing)
    assert {"process_exited", "gap", "pending_at_end", "transport", "attempt", "no_logs",
            "alert_dropped"} <= kinds
    assert documented_notice_kinds() == kinds


def test_the_action_table_lists_the_fields_of_an_action_record() -> None:
    from watcher.findings import Action

    real = Action(verb="cancel_sample", sample=SampleRef("t", "ti", "e", "m", "1", 1)).to_dict()
    assert table_fields("## Action lines") == list(real)
    assert real["kind"] == "action" and real["schema"] == 1
    reasons = set(re.findall(r"`(\w+)`", DOC[DOC.index("| `reason` |"):].split("\n", 1)[0]))
    import watcher.act.watchdog as watchdog  # the imported one (the compiled tree's too)

    # the watchdog and its steps (watcher/act/*.py): every reason a record can carry
    code = "\n".join(p.read_text() for p in sorted(Path(watchdog.__file__).parent.glob("*.py")))
    used = set(re.findall(r'reason="(\w+)"', code)) | set(re.findall(
        r'return \("(\w+)",', code)) | set(re.findall(r'"(\w+)" if isinstance\(e, \w+\)', code))
    assert {"route_missing", "limit_run", "no_answer", "already_acted"} <= used
    assert used <= reasons - {"reason"}


def test_commands_in_the_doc_parse() -> None:
    commands = re.findall(r"`(inspect-watch [^`]+)`", DOC)
    assert commands
    for command in commands:
        args = [a for a in shlex.split(command)[1:] if a not in ("…", "...")]
        cmd: click.Command = main
        try:
            while isinstance(cmd, click.Group):  # down to the subcommand, as click does
                name, args = args[0], args[1:]
                sub = cmd.get_command(click.Context(cmd), name)
                if sub is None:
                    raise click.UsageError(f"no such command {name!r}")
                cmd = sub
            cmd.make_context(cmd.name or "", args)
        except click.UsageError as e:
            pytest.fail(f"docs/findings.md: `{command}`: {e}")


WATCHDOG_DOC = (REPO / "docs" / "watchdog.md").read_text()


def test_watchdog_doc_commands_policies_and_defaults_are_real() -> None:
    """docs/watchdog.md: its commands parse, its act block and policy file are valid
    against the built-in rules, and the defaults it names are the code's."""
    from watcher.act import MAX_ACTIONS, MAX_PER_TASK
    from watcher.act.policy import Policy, check_references, parse_act, parse_policy
    from watcher.app import rule_infos
    from watcher.engine import Engine
    from watcher.engine.errors import RuleError
    from watcher.engine.yamlsrc import load_docs

    commands = re.findall(r"^(inspect-watch watch [^#\n]*)", WATCHDOG_DOC, re.M)
    assert len(commands) >= 5
    for command in commands:
        args = shlex.split(command)[2:]
        try:
            main.get_command(click.Context(main), "watch").make_context(  # type: ignore[union-attr]
                "watch", args)
        except click.UsageError as e:
            pytest.fail(f"docs/watchdog.md: `{command}`: {e}")
    block, policy = re.findall(r"```yaml\n(.*?)```", WATCHDOG_DOC, re.S)
    errors: list[RuleError] = []
    [doc] = load_docs(block, "act.yaml", errors)
    assert not errors and not isinstance(parse_act(doc.data, doc, ()), list)
    layer, interrupt, keep = parse_policy(policy, "policy.yaml")
    assert keep and interrupt is not None and layer.rules and layer.categories
    # its rule ids, categories and facts exist in the built-in pack
    check_references(Policy([layer], interrupt),
                     rule_infos(Engine(load_rules(paths=[], builtin=True).rules)))
    assert f"(default {MAX_ACTIONS})" in WATCHDOG_DOC and f"task (default {MAX_PER_TASK})" in (
        WATCHDOG_DOC)
