"""Issue 23 item 12: deeply nested YAML, predicates, macros, ``where`` expressions and
regex groups in a rule file are located errors, not tracebacks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine.util import REPO
from watcher.engine import RuleLoadErrors, load_rules
from watcher.engine.yamlsrc import MAX_DEPTH

HEAD = """\
id: deep
title: deep
category: shortcut
severity: info
events: [model]
needs: content
"""


def _errors(tmp_path: Path, text: str) -> list[tuple[str, int | None, int | None, str]]:
    path = tmp_path / "deep.yaml"
    path.write_text(text)
    with pytest.raises(RuleLoadErrors) as info:
        load_rules(paths=[path], builtin=False, user_dir=False)
    return [(e.name, e.line, e.col, e.message) for e in info.value.errors]


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 300, 990, 5000])
def test_nested_yaml_is_located(tmp_path: Path, depth: int) -> None:
    """Both loaders (libyaml's stops at 1000 levels; the pure one then recursed to a
    RecursionError) refuse the same node: the first one too deep."""
    text = HEAD + "field: completion\nregex: x\ndetect: match\ntags: " + (
        "[" * depth + "]" * depth + "\n")
    got = _errors(tmp_path, text)
    assert ("unsafe-yaml", 10, 7 + MAX_DEPTH,
            f"lists and mappings nested more than {MAX_DEPTH} deep") in got


def test_nested_predicates_are_located(tmp_path: Path) -> None:
    pred = "{type: model}"
    for _ in range(3000):
        pred = "{not: " + pred + "}"
    (err,) = _errors(tmp_path, HEAD + "all: [" + pred + "]\ndetect: match\n")
    assert err[0] == "unsafe-yaml" and err[1] == 7


def test_macro_chains_are_located(tmp_path: Path) -> None:
    lines = ["macros:", "  m0: {type: model}"]
    lines += [f"  m{i}: {{macro: m{i - 1}}}" for i in range(1, 3000)]
    text = "\n".join(lines) + "\n---\n" + HEAD + "macro: m2999\ndetect: match\n"
    (err,) = _errors(tmp_path, text)
    assert err[0] == "unknown-reference" and "nested more than" in err[3]
    assert err[1] is not None and 2 < err[1] <= 3001  # inside the macros document


def test_a_chain_within_the_bound_loads(tmp_path: Path) -> None:
    lines = ["macros:", "  m0: {type: model}"]
    lines += [f"  m{i}: {{macro: m{i - 1}}}" for i in range(1, 20)]
    path = tmp_path / "ok.yaml"
    path.write_text("\n".join(lines) + "\n---\n" + HEAD + "macro: m19\ndetect: match\n")
    assert [r.id for r in load_rules(paths=[path], builtin=False, user_dir=False)] == ["deep"]


@pytest.mark.parametrize("where", ["(" * 3000 + "a" + ")" * 3000, "!" * 3000 + "a"])
def test_nested_where_is_located(tmp_path: Path, where: str) -> None:
    (err,) = _errors(tmp_path, HEAD + f'where: "{where}"\ndetect: match\n')
    assert err[:2] == ("bad-jmespath", 7) and "nested too deep" in err[3]


@pytest.mark.parametrize("depth", [600, 2000])
def test_nested_regex_groups_are_located(tmp_path: Path, depth: int) -> None:
    regex = "(" * depth + "a" + ")" * depth
    (err,) = _errors(tmp_path, HEAD + f"field: completion\nregex: '{regex}'\ndetect: match\n")
    assert err[:2] == ("bad-regex", 8) and "nested too deep" in err[3]


def test_rules_validate_exits_2_not_1(tmp_path: Path) -> None:
    """The command a user runs: exit 2 with the located error (a traceback was exit 1)."""
    path = tmp_path / "deep.yaml"
    path.write_text(HEAD + "field: completion\nregex: x\ndetect: match\ntags: "
                    + "[" * 5000 + "]" * 5000 + "\n")
    got = subprocess.run([sys.executable, "-m", "watcher", "rules", "validate", str(path)],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert got.returncode == 2, got.stderr[-2000:]
    assert "W116 unsafe-yaml: lists and mappings nested more than" in got.stdout + got.stderr
    assert "Traceback" not in got.stderr
