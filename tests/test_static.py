"""The code is ruff-clean and type-checks: CI runs the test suite, so both are checked
there (ruff and mypy come with the ``test`` extra)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# the suite also runs from a copy of tests/ beside no sources (against the compiled
# wheel: tests/test_compiled.py); there is nothing to check there
pytestmark = pytest.mark.skipif(not (ROOT / "watcher").is_dir(), reason="no sources here")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)


def test_ruff_clean() -> None:
    pytest.importorskip("ruff")
    res = _run("ruff", "check", ".")
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.slow  # mypy over the package: a minute of CPU
def test_mypy_clean(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    res = _run("mypy", "watcher", "--cache-dir", str(tmp_path / "cache"))
    assert res.returncode == 0, res.stdout + res.stderr
