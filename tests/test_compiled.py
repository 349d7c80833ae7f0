"""The compiled engine (what ``pip install .`` gives) behaves as the pure one.

The rest of the suite runs the sources in place; here the same wheel users get is
built from the working tree (``tests/compiled.py``), the engine tests run against
it, and its findings over the real corpus are compared with the pure engine's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.compiled import ROOT, compiled_tree
from tests.corpus import CORPUS

# building the wheel takes 40 s to two minutes on two cores, and each test runs a suite
# or a scan in a process of its own: slow, and timed by what it does, not by the default
pytestmark = [pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None,
                                 reason="no C compiler"),
              pytest.mark.slow, pytest.mark.timeout(3600)]


@pytest.fixture(scope="module")
def tree() -> Path:
    return compiled_tree()


def _run(args: list[str], cwd: Path, pythonpath: Path | None) -> subprocess.CompletedProcess:
    """``python ARGS`` to its end, in a session of its own: whatever ends this test
    (a failure, Ctrl+C, pytest-timeout) ends the whole group, so nothing it started (a
    suite's tmux server, a scan's workers) is left running."""
    env = dict(os.environ, INSPECT_WATCH_CORPUS=str(CORPUS))
    env.pop("PYTHONPATH", None)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    proc = subprocess.Popen([sys.executable, *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, err = proc.communicate()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        else:  # its own children too (a tmux server daemonises into the group)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_the_wheel_compiles_the_hot_path(tree: Path, tmp_path: Path) -> None:
    probe = ("import watcher.engine as e, watcher.engine.detectors.repeat as d, "
             "watcher.engine.text as c; print(e.COMPILED, d.__file__, c._FOLD is not None)")
    got = _run(["-c", probe], tmp_path, tree)
    assert got.returncode == 0, got.stderr
    compiled, where, fold = got.stdout.split()
    assert compiled == "True"
    assert where.endswith(".so") and where.startswith(str(tree))
    assert fold == "True"  # the C whitespace fold was built and is used
    pure = _run(["-c", probe], ROOT, None)
    assert pure.stdout.split()[0] == "False"


# what the compiled modules (setup.py's COMPILED: the engine) carry: the engine's own
# tests, the rule pack's inline tests run through it, and the loader's fuzzing. The rest
# of the suite (sources, reporters, terminals) runs no compiled code of its own and is
# run on the sources; the whole unit suite took over 6 minutes on 2 busy cores here
ENGINE_TESTS = ("tests/engine", "tests/test_rule_pack.py", "tests/test_loader_fuzz.py",
                "tests/test_event_values.py")


def test_unit_suite_passes_on_the_compiled_engine(tree: Path, tmp_path: Path) -> None:
    # the tests (and the rule files they read) beside no `watcher` package: the
    # compiled one on PYTHONPATH is imported
    for name in ("tests", "rules", "benchmarks", "docs"):
        shutil.copytree(ROOT / name, tmp_path / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    # (less the check of setup.py's lists against the source tree, not beside this one)
    got = _run(["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-m", "not e2e",
                "--timeout", "0", *ENGINE_TESTS,
                "--ignore", "tests/engine/test_compiled_list.py"], tmp_path, tree)
    assert got.returncode == 0, got.stdout[-4000:] + got.stderr[-2000:]
    assert " passed" in got.stdout and " failed" not in got.stdout
    # the C fold was tested, not skipped as it is on the sources
    assert "no C fold" not in got.stdout


def _findings(cwd: Path, pythonpath: Path | None, out: Path, jobs: int = 1) -> list[dict]:
    got = _run(["-m", "watcher", "watch", "--log-dir", str(CORPUS), "--once", "--jobs",
                str(jobs), "--format", "jsonl", "-o", str(out)], cwd, pythonpath)
    assert got.returncode in (0, 1), got.stderr[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    rows = [r for r in rows if r["kind"] == "finding"]  # (the closing notices are timed)
    for r in rows:  # a finding from a sample row is stamped with the time of the scan
        if not r["evidence"]["event_uuids"]:
            for d in (r, r["evidence"]["facts"]):
                d.pop("first_seen", None)
                d.pop("last_seen", None)
    return rows


def test_compiled_and_pure_engines_find_the_same_on_real_logs(tree: Path,
                                                               tmp_path: Path) -> None:
    pure = _findings(ROOT, None, tmp_path / "pure.jsonl")
    (tmp_path / "c").mkdir()
    compiled = _findings(tmp_path / "c", tree, tmp_path / "compiled.jsonl")
    assert len(pure) > 20  # the corpus holds real submit loops and repeats
    assert compiled == pure
    # findings cross a process boundary (pickled) when a scan is split between workers
    forked = _findings(tmp_path / "c", tree, tmp_path / "compiled-j2.jsonl", jobs=2)
    assert sorted(forked, key=lambda r: r["id"]) == sorted(pure, key=lambda r: r["id"])
