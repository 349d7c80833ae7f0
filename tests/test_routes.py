"""Control-channel routes and verb names are spelled once (issue #30): a route literal
anywhere but ``watcher/act/routes.py``, or a verb's name anywhere but its declaration
in ``watcher/act/verbs.py``, fails here. Docstrings may name them (they are prose)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from watcher.act import routes
from watcher.act.verbs import INTERRUPT_RUN, VERBS

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not (ROOT / "watcher").is_dir(), reason="no sources here")

ROUTE_PREFIXES = ("/tasks", "/evals", "/release")


def _literals(path: Path) -> list[tuple[int, str]]:
    """The string constants of ``path`` that are not docstrings, with their lines."""
    tree = ast.parse(path.read_text(), str(path))
    docs: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docs.add(id(body[0].value))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docs:
            out.append((node.lineno, node.value))
    return out


def _sources() -> list[Path]:
    return sorted([*(ROOT / "watcher").rglob("*.py"), *(ROOT / "inspect_watch").rglob("*.py")])


def test_every_route_is_declared_in_one_module() -> None:
    declared = {v for k, v in vars(routes).items() if k.isupper()}
    assert {v.route for v in VERBS.values()} <= declared
    outside = [f"{p.relative_to(ROOT)}:{line}: {text!r}"
               for p in _sources() if p != ROOT / "watcher/act/routes.py"
               for line, text in _literals(p) if text.startswith(ROUTE_PREFIXES)]
    assert outside == []


def test_verb_names_are_literals_only_in_their_declarations() -> None:
    names = {*VERBS, INTERRUPT_RUN}
    outside = [f"{p.relative_to(ROOT)}:{line}: {text!r}"
               for p in _sources() if p != ROOT / "watcher/act/verbs.py"
               for line, text in _literals(p) if text in names]
    assert outside == []


def test_the_checks_see_a_route_and_a_verb_spelled_by_hand(tmp_path: Path) -> None:
    """The scan is not blind: a hand-spelled route and verb name are found."""
    bad = tmp_path / "bad.py"
    bad.write_text('"""Docstring naming /tasks is fine."""\n'
                   'x = "/evals/{eval_id}/sample/cancel"\ny = "drain_task"\n')
    found = [t for _, t in _literals(bad)]
    assert found == ["/evals/{eval_id}/sample/cancel", "drain_task"]
