"""`watch --log-dir DIR --once --jobs N`: samples split over forked processes.

The split must not change what is found: the same findings (ids, levels, statuses)
and the same summary as one process, over real logs, including sample rules that
compare a sample with the rest of its task.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.corpus import CORPUS
from tests.evalproc import default_sigint
from watcher.engine import Engine, load_rules
from watcher.findings import Finding, Notice
from watcher.run.values import RunOptions
from watcher.run.watch import Watch, WatchConfig
from watcher.state import WatchState

pytestmark = pytest.mark.slow  # forked scans of real logs, signals


class Sink:
    def __init__(self) -> None:
        self.findings: list[Finding] = []
        self.notices: list[Notice] = []

    def finding(self, f: Finding) -> None:
        self.findings.append(f)

    def notice(self, n: Notice) -> None:
        self.notices.append(n)

    def status(self, s: object) -> None:
        return None


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("logs")
    for f in CORPUS.glob("*.eval"):
        shutil.copy(f, d / f.name)
    return d


def scan(logs: Path, jobs: int, state: WatchState | None = None) -> tuple[Sink, Watch]:
    sink = Sink()
    watch = Watch(Engine(load_rules(builtin=True, user_dir=False)),
                  WatchConfig(log_dir=str(logs), once=True, jobs=jobs),
                  state or WatchState(), [sink])
    watch.run()
    return sink, watch


def key(f: Finding) -> tuple[str, str, str, int]:
    return (f.id, f.confidence, f.status, f.count)


def test_shards_partition_the_samples() -> None:
    keys = [(str(i), e) for i in range(200) for e in (1, 2)]
    owners = [[k for k in keys if RunOptions(shard=(s, 3)).owns(*k)] for s in range(3)]
    assert sorted(sum(owners, [])) == sorted(keys)  # every sample once
    assert all(len(o) > 50 for o in owners)  # and spread out


def test_parallel_scan_finds_exactly_what_one_process_finds(logs: Path) -> None:
    one, w1 = scan(logs, 1)
    two, w2 = scan(logs, 2)
    assert one.findings, "the corpus has known problems; a scan that finds none is broken"
    assert sorted(map(key, one.findings)) == sorted(map(key, two.findings))
    assert not [n for n in one.notices + two.notices if n.kind == "source_error"]
    s1, s2 = w1.summary(), w2.summary()
    assert sorted((s.eval_id, s.sample_id, s.epoch, s.status) for s in s1.samples) == \
        sorted((s.eval_id, s.sample_id, s.epoch, s.status) for s in s2.samples)
    assert {t.eval_id for t in s1.tasks} == {t.eval_id for t in s2.tasks}
    assert sorted(f.id for f in s1.findings) == sorted(f.id for f in s2.findings)


def test_parallel_scan_respects_state_between_runs(logs: Path, tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    first, _ = scan(logs, 2, WatchState.load(path))
    assert first.findings
    again, _ = scan(logs, 2, WatchState.load(path))
    assert again.findings == []  # all reported before, and finished samples are skipped


def test_cli_jobs_needs_a_log_dir_and_once(logs: Path, tmp_path: Path) -> None:
    bad = subprocess.run([sys.executable, "-m", "watcher", "watch", "--jobs", "2"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--log-dir and --once" in bad.stderr
    out = tmp_path / "f.jsonl"
    ok = subprocess.run([sys.executable, "-m", "watcher", "watch", "--log-dir", str(logs),
                         "--once", "--jobs", "2", "--format", "jsonl", "-o", str(out)],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert any(x.get("kind") == "finding" for x in lines)


def test_a_result_that_cannot_be_unpickled_fails_the_scan_instead_of_hanging(
        logs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """multiprocessing's result thread dies on a result it cannot unpickle, and map()
    then waits for ever (compiled frozen dataclasses once did this): workers pickle
    their own results, so the failure is raised in the scanning process."""
    import multiprocessing.pool  # noqa: F401  (its connections bind pickle.loads first)
    import pickle

    def broken(data: bytes) -> object:
        raise TypeError("cannot rebuild this object")

    # the scan imports pickle where it unpickles the workers' results (run_shards)
    monkeypatch.setattr(pickle, "loads", broken)
    with pytest.raises(TypeError, match="cannot rebuild"):
        scan(logs, jobs=2)


def _children(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("how", ["SIGTERM", "Ctrl+C"])
def test_signalled_parallel_scan_stops_and_writes_its_summary(tmp_path: Path, how: str) -> None:
    """SIGTERM to the watcher, or Ctrl+C (SIGINT to the whole process group) while its
    workers scan: each used to leave the pool waiting for workers that handled the signal
    themselves, for ever. Now the parent stops them, writes its summary and state, and
    exits 130."""
    import os
    import signal
    import time

    logs = tmp_path / "logs"
    logs.mkdir()
    for i in range(40):  # long enough a scan (seconds) to be signalled in the middle
        for f in CORPUS.glob("*.eval"):
            shutil.copy(f, logs / f"{i}-{f.name}")
    summary, state = tmp_path / "s.md", tmp_path / "state.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "watcher", "watch", "--log-dir", str(logs), "--once", "-j", "2",
         "-q", "--format", "jsonl", "-o", str(tmp_path / "f.jsonl"), "--summary", str(summary),
         "--state", str(state)],
        stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=default_sigint)
    try:
        deadline = time.time() + 60
        while len(_children(proc.pid)) < 2 and proc.poll() is None and time.time() < deadline:
            time.sleep(0.01)
        workers = _children(proc.pid)
        assert len(workers) == 2, "the workers never started"
        time.sleep(0.2)
        if how == "SIGTERM":
            proc.send_signal(signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    assert summary.read_text().strip() and state.exists()
    assert not any(Path(f"/proc/{w}").exists() for w in workers)
