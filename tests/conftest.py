"""Shared fixtures: isolated control directories and real eval processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.evalproc import EvalProc, start_eval


@pytest.fixture
def eval_runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator:
    """Start real evals whose discovery files this test process (and only it) sees."""
    data_home = tmp_path / "data"
    monkeypatch.setenv("XDG_DATA_HOME", str(data_home))
    procs: list[EvalProc] = []

    def run(task: str, *args: str, **kw: object) -> EvalProc:
        sub = tmp_path / f"run{len(procs)}"
        sub.mkdir()
        p = start_eval(sub, task, *args, data_home=data_home, **kw)  # type: ignore[arg-type]
        procs.append(p)
        return p

    yield run
    for p in procs:
        p.stop()
