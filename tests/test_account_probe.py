"""The live replay's CPU accounting (benchmarks/account_probe.py) follows the code."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def _probe() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "account_probe", REPO / "benchmarks" / "account_probe.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_accounted_method_exists() -> None:
    """A renamed method would drop out of the accounting table (listed as missing, but
    easy to overlook): each one named must be there."""
    for module, cls, method, _ in _probe().METHODS:
        owner = getattr(importlib.import_module(module), cls)
        assert callable(getattr(owner, method)), f"{module}.{cls}.{method}"


def test_installed_probe_counts_calls_and_writes_its_line(tmp_path: Path) -> None:
    """As the watcher's sitecustomize: wrapped calls are counted, one line at exit."""
    out = tmp_path / "account.jsonl"
    probe_dir = _probe().probe_dir(tmp_path / "probe")  # as bench_live_replay does
    # a call that fails is counted too (the wrapper times it in a ``finally``)
    code = ("from watcher.run.router import Router\n"
            "try:\n    Router.flush(None)\nexcept AttributeError:\n    pass\n")
    env = {"PYTHONPATH": os.pathsep.join([str(probe_dir), str(REPO)]), "IW_ACCOUNT": str(out),
           "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=tmp_path)
    [line] = out.read_text().splitlines()
    run = json.loads(line)
    assert run["missing"] == []
    assert run["stats"]["router flush (main thread)"][0] == 1  # the one call above
    assert run["stats"]["thread: main"][0] == 1


def test_table_puts_live_beside_post_hoc() -> None:
    probe = _probe()
    live = {"cpu": 1.5, "stats": {"buffer tail (moved)": [36, 0.19]}, "missing": []}
    post = {"cpu": 0.8, "stats": {"log read (decode, project)": [125, 0.2]},
            "missing": ["x.Y.z"]}
    text = probe.table(live, post)
    rows = {line[:40].strip(): line[40:].split() for line in text.splitlines()[1:]}
    assert rows["buffer tail (moved)"] == ["36", "0.190", "0", "0.000"]
    assert rows["log read (decode, project)"] == ["0", "0.000", "125", "0.200"]
    assert "not found, not accounted: x.Y.z" in text
