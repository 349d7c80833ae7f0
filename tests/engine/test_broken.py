"""Broken rule files: every problem reported at once, located, coded, with a hint.

Each ``broken/*.yaml`` has a golden ``*.expected`` holding the rendered errors
(paths relative to ``broken/``). Regenerate with ``UPDATE_GOLDEN=1 pytest tests/engine``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from watcher.engine import ERROR_KINDS, RuleLoadErrors, load_rules

BROKEN = Path(__file__).parent / "broken"
CASES = sorted(BROKEN.glob("*.yaml"))


def render(path: Path) -> RuleLoadErrors:
    with pytest.raises(RuleLoadErrors) as info:
        load_rules(paths=[path], builtin=False, user_dir=False)
    return info.value


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_broken_golden(path: Path) -> None:
    err = render(path)
    text = err.render().replace(str(BROKEN) + os.sep, "") + "\n"
    golden = path.with_suffix(".expected")
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(text)
    assert golden.exists(), f"missing golden {golden.name}; run with UPDATE_GOLDEN=1"
    assert text == golden.read_text()


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_broken_file_reports_its_own_code(path: Path) -> None:
    """Files are named after the error kind they exercise."""
    err = render(path)
    names = {e.name for e in err.errors}
    assert path.stem in names
    for e in err.errors:
        assert e.file.endswith(path.name) and e.line is not None and e.line >= 1
        d = e.to_dict()
        assert d["code"].startswith("W1") and d["file"] == e.file


def test_every_error_kind_has_a_broken_example() -> None:
    covered = {p.stem for p in CASES}
    # not a file's content: a path, and --only/--disable names (tests/test_cli_unit.py)
    untested = {k.name for k in ERROR_KINDS} - covered - {"file-error", "unknown-selection"}
    assert not untested


def test_all_errors_of_a_pack_at_once(tmp_path: Path) -> None:
    for name in ("bad-regex.yaml", "bad-id.yaml", "unknown-key.yaml"):
        (tmp_path / name).write_text((BROKEN / name).read_text())
    with pytest.raises(RuleLoadErrors) as info:
        load_rules(paths=[tmp_path], builtin=False, user_dir=False)
    assert {e.code for e in info.value.errors} >= {"W106", "W118", "W103"}
    assert info.value.to_dict()["ok"] is False


def test_unknown_key_suggests(tmp_path: Path) -> None:
    err = render(BROKEN / "unknown-key.yaml")
    hints = [e.hint for e in err.errors if e.code == "W103"]
    assert "did you mean 'severity'?" in hints and "did you mean 'window'?" in hints


def test_missing_path_is_a_file_error(tmp_path: Path) -> None:
    with pytest.raises(RuleLoadErrors) as info:
        load_rules(paths=[tmp_path / "nope.yaml"], builtin=False, user_dir=False)
    assert info.value.errors[0].code == "W120"


def test_unsafe_yaml_never_executes(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    bad = tmp_path / "x.yaml"
    bad.write_text(f"id: x\nseverity: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(RuleLoadErrors):
        load_rules(paths=[bad], builtin=False, user_dir=False)
    assert not marker.exists()


def test_alias_bomb_is_refused(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lines) + "\n")
    with pytest.raises(RuleLoadErrors) as info:
        load_rules(paths=[bomb], builtin=False, user_dir=False)
    assert any(e.code == "W116" for e in info.value.errors)
