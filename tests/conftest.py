"""Shared fixtures: isolated control directories and real eval processes."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# parsed rule files and the like (watcher/cachefiles.py) are kept for the session, not in
# the home directory of whoever runs the tests; the watchers the tests start inherit it.
# Set before the package is imported: its first import reads a cache (codecache.py)
_RULE_CACHE = None if "INSPECT_WATCH_CACHE_DIR" in os.environ else tempfile.mkdtemp(
    prefix="iw-rule-cache-")
if _RULE_CACHE is not None:
    os.environ["INSPECT_WATCH_CACHE_DIR"] = _RULE_CACHE

from tests.evalproc import EvalProc, start_eval  # noqa: E402


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _RULE_CACHE is not None:
        shutil.rmtree(_RULE_CACHE, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every end-to-end test (a real ``inspect eval``: seconds to minutes each) is also
    ``slow``: ``python -m pytest -m "not slow"`` runs the fast ones (README,
    "Development"); ``.ci/run`` and the README's test command run everything."""
    for item in items:
        if item.get_closest_marker("e2e") is not None:
            item.add_marker(pytest.mark.slow)


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


@pytest.fixture
def control_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A control directory of this test's own (no real eval's discovery files)."""
    d = tmp_path / "control"
    d.mkdir()
    monkeypatch.setenv("INSPECT_WATCH_CONTROL_DIR", str(d))
    return d
