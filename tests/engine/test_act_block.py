"""A rule's optional ``act:`` block: kept as written, with its location, never
interpreted by the engine (the watchdog parses it; docs/watchdog.md)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.engine.util import REPO, episodes, load_text, run, tool
from watcher.engine import RuleLoadErrors
from watcher.engine.rule import ACT_PATH
from watcher.rules_cli import rules

RULE = """\
id: with-act
title: a rule with an action block
category: shortcut
severity: warning
events: [tool]
needs: metadata
type: tool
detect: match
"""
ACT = """\
act:
  when: {confidence: high}
  do: [{pause: {reason: "x"}}, {unknown_to_the_engine: 3}]
"""


def test_act_is_kept_raw_with_its_location(tmp_path: Path) -> None:
    (rule,) = load_text(tmp_path, RULE + ACT, library=False)
    assert rule.act_block == {"when": {"confidence": "high"},
                              "do": [{"pause": {"reason": "x"}}, {"unknown_to_the_engine": 3}]}
    assert rule.act_location == (str(tmp_path / "rules.yaml"), 10, 3)
    # what a parser needs to locate an error inside the block: the document's marks
    assert rule.act_doc.loc(ACT_PATH + ("do", 1)) == (11, 32)
    assert rule.act_doc.file == str(tmp_path / "rules.yaml")


def test_no_act_is_none(tmp_path: Path) -> None:
    (rule,) = load_text(tmp_path, RULE, library=False)
    assert rule.act_block is None and rule.act_doc is None and rule.act_location is None


@pytest.mark.parametrize("value", ["pause", "[pause]", "3"])
def test_act_that_is_not_a_mapping_is_a_located_error(tmp_path: Path, value: str) -> None:
    with pytest.raises(RuleLoadErrors) as info:
        load_text(tmp_path, RULE + f"act: {value}\n", library=False)
    (err,) = info.value.errors
    assert (err.name, err.line, err.col) == ("wrong-type", 9, 6)
    assert "act must be" in err.message


def test_act_does_not_change_what_a_rule_finds(tmp_path: Path) -> None:
    plain = load_text(tmp_path, RULE, library=False, name="a.yaml")
    acting = load_text(tmp_path, RULE + ACT, library=False, name="b.yaml")
    items = [tool("bash"), tool("python")]
    assert ([(f.rule, f.count, f.status) for f in episodes(run(plain, items))]
            == [(f.rule, f.count, f.status) for f in episodes(run(acting, items))])
    assert [f.count for f in episodes(run(acting, items))] == [2]


def test_schema_has_act_as_an_object() -> None:
    import jsonschema

    res = CliRunner().invoke(rules, ["schema"])
    schema = json.loads(res.output)
    act = schema["$defs"]["rule"]["properties"]["act"]
    assert act["type"] == "object" and "docs/watchdog.md" in act["description"]
    v = jsonschema.Draft202012Validator(schema)
    doc = {"id": "x", "title": "x", "category": "shortcut", "severity": "info",
           "events": ["tool"], "needs": "metadata", "detect": "match"}
    assert v.is_valid({**doc, "act": {"anything": [1, 2]}})
    assert not v.is_valid({**doc, "act": "pause"})


def test_the_engine_does_not_import_the_watchdog() -> None:
    """watcher.act sits above the engine: no module of watcher/engine imports it."""
    for path in sorted((REPO / "watcher" / "engine").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n == "watcher.act" or n.startswith("watcher.act.")
                           for n in names), path
