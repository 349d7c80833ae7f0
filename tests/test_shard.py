"""`watch --log-dir DIR --once --shard K/N`: a stable share of the logs per scanner.

N scanners with K = 0..N-1 (a Kubernetes Indexed Job, a CI matrix, a Slurm array) must
together find exactly what one unsharded scan finds, each log read by exactly one of
them, whatever machine or Python runs them; `report` merges their JSONL.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.corpus import CORPUS
from tests.evalproc import SCENARIOS, default_sigint
from watcher.reporters.jsonl import summary_from_jsonl
from watcher.shard import log_name, owns, parse_shard, shard_of

pytestmark = pytest.mark.slow  # real `inspect eval` runs and scans of the whole corpus

N = 3


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "watcher", *args], capture_output=True,
                          text=True, timeout=600, stdin=subprocess.DEVNULL,
                          env={**os.environ, **(env or {})})


def test_parse_shard() -> None:
    assert parse_shard("0/4") == (0, 4) and parse_shard(" 3/4 ") == (3, 4)
    for bad in ("4/4", "-1/4", "1/0", "x", "1", "1/2/3", "a/b"):
        with pytest.raises(ValueError, match="K"):
            parse_shard(bad)


def test_the_hash_is_stable_across_machines_and_pythons() -> None:
    """Pinned values: SHA-256 of the file name, not Python's salted hash(), and not the
    path (a bucket on one machine, a mount on another)."""
    name = "2026-12-01T11-14-41-00-00_slow_bwH6gARt6mvYhMBQtioUNP.eval"
    assert [shard_of(name, n) for n in (2, 3, 4, 7, 16)] == PINNED
    for where in (f"s3://bucket/logs/{name}", f"file:///mnt/logs/{name}", f"/x/y/{name}",
                  f"memory://logs/{name}", f"C:\\logs\\{name}"):
        assert log_name(where) == name
        assert [shard_of(where, n) for n in (2, 3, 4, 7, 16)] == PINNED
    # another interpreter with another hash seed agrees
    code = f"from watcher.shard import shard_of; print(shard_of({name!r}, 7))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONHASHSEED": "12345"}, check=True).stdout
    assert int(out) == PINNED[3]


PINNED = [1, 1, 3, 2, 7]


def test_shards_partition_the_logs() -> None:
    names = [f"2026-01-{d:02d}T00-00-00-00-00_task_{i}.eval" for d in range(1, 29)
             for i in range(20)]
    for n in (1, 2, 3, 8):
        shares = [[x for x in names if owns((k, n), x)] for k in range(n)]
        assert sorted(sum(shares, [])) == sorted(names)  # every log exactly once
        assert min(map(len, shares)) > len(names) / n / 2  # and spread out
    assert all(owns(None, x) for x in names)


def _copy_log(src: Path, dst: Path, eval_id: str) -> None:
    """A copy of a log as another eval (its own eval id, so its findings are its own)."""
    from inspect_ai.log import read_eval_log, write_eval_log

    log = read_eval_log(str(src))
    log.eval.eval_id = eval_id
    write_eval_log(log, str(dst))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared corpus plus generated logs: real `inspect eval` runs of the test
    scenarios (each with known findings), copied as more evals, in subdirectories as a
    log store grows."""
    root = tmp_path_factory.mktemp("store")
    logs = root / "logs"
    (logs / "corpus").mkdir(parents=True)
    for f in CORPUS.glob("*.eval"):
        shutil.copy(f, logs / "corpus" / f.name)
    gen = root / "gen"
    cmd = [sys.executable, "-m", "inspect_ai._cli.main", "eval", f"{SCENARIOS}@loops",
           f"{SCENARIOS}@truth", "--log-dir", str(gen), "--display", "none"]
    env = {**os.environ, "XDG_DATA_HOME": str(root / "data"), "SCENARIO_TOOL_DELAY": "0",
           "INSPECT_LOG_LEVEL": "warning"}
    subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=root, timeout=300,
                   stdin=subprocess.DEVNULL, preexec_fn=default_sigint)
    made = sorted(gen.glob("*.eval"))
    assert len(made) == 2
    for i in range(5):
        for j, src in enumerate(made):
            sub = logs / f"run{i}"
            sub.mkdir(exist_ok=True)
            _copy_log(src, sub / src.name.replace(".eval", f"-copy{i}.eval"),
                      f"copy{i}x{j}x{'z' * 12}")
    # every corpus log (the corpus grows: counted, not assumed) and the ten copies
    assert len(list(logs.rglob("*.eval"))) == len(list(CORPUS.glob("*.eval"))) + 10
    return logs


def _stable(record: dict[str, Any]) -> dict[str, Any]:
    """A finding without the times a listing row's finding takes from the clock (when
    the row was read: they differ between two runs of the same scan, sharded or not)."""
    if record["evidence"]["timestamps"]:
        return record
    out = {k: v for k, v in record.items() if k not in ("first_seen", "last_seen")}
    facts = {k: v for k, v in record["evidence"]["facts"].items()
             if k not in ("first_seen", "last_seen")}
    out["evidence"] = {**record["evidence"], "facts": facts}
    return out


def _scan(logs: Path, out: Path, *args: str) -> list[dict[str, Any]]:
    res = cli("watch", "--log-dir", str(logs), "--once", "--format", "jsonl", "--output",
              str(out), "--jobs", "1", *args)
    assert res.returncode == 0, res.stderr
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_n_shards_find_exactly_what_one_scan_finds(store: Path, tmp_path: Path) -> None:
    whole = _scan(store, tmp_path / "whole.jsonl")
    found = {r["id"]: _stable(r) for r in whole if r["kind"] == "finding"}
    assert len(found) > 100  # the corpus and the scenarios have known problems
    shards = [_scan(store, tmp_path / f"shard-{k}.jsonl", "--shard", f"{k}/{N}")
              for k in range(N)]
    per_shard = [{r["id"]: _stable(r) for r in s if r["kind"] == "finding"} for s in shards]
    # each finding is found by exactly one shard, with the same content
    assert sum(map(len, per_shard)) == len(found)
    assert {k: v for s in per_shard for k, v in s.items()} == found
    # each log is read by exactly one shard: the one its name hashes to (generated logs'
    # names carry the time they ran, so which shards get some varies from run to run)
    logs = [{r["log_location"] for r in s.values()} for s in per_shard]
    assert sum(map(len, logs)) == len(set().union(*logs))
    assert all(shard_of(loc, N) == k for k, part in enumerate(logs) for loc in part)
    assert sum(1 for part in logs if part) >= 2  # the work was shared
    assert not [r for s in shards for r in s if r["kind"] == "notice"
                and r["notice"] in ("source_error", "unreadable")]
    # `report` merges the shards' JSONL into the report of the whole scan
    merged = summary_from_jsonl([tmp_path / f"shard-{k}.jsonl" for k in range(N)])
    single = summary_from_jsonl([tmp_path / "whole.jsonl"])
    assert sorted(f.id for f in merged.findings) == sorted(f.id for f in single.findings)
    res = cli("report", *[str(tmp_path / f"shard-{k}.jsonl") for k in range(N)], "--format",
              "markdown", "-o", str(tmp_path / "merged.md"))
    assert res.returncode == 0, res.stderr
    res = cli("report", str(tmp_path / "whole.jsonl"), "--format", "markdown", "-o",
              str(tmp_path / "whole.md"))
    assert res.returncode == 0, res.stderr
    assert _findings_part(tmp_path / "merged.md") == _findings_part(tmp_path / "whole.md")
    # the notices are the whole scan's (one spend for all shards), but for a shard that
    # happened to own no log saying so (which shards own one varies with the names)
    extra = [n for n in merged.notices if n.kind not in {m.kind for m in single.notices}]
    assert all(n.kind == "no_logs" for n in extra), [(n.kind, n.message) for n in extra]
    assert [n.kind for n in merged.notices].count("spend") == 1


def _findings_part(path: Path) -> str:
    """The report from its first section on (the header names the input files), without
    the times row findings take from the clock (see :func:`_stable`) nor the notices
    (compared as records: each scan says its own)."""
    text = path.read_text()
    text = re.sub(r"- seen: [^\n]*", "- seen: …", text[text.index("## "):])
    # the notices are compared apart, as records (see the test)
    return re.sub(r"\n## Notices \(\d+\)\n.*?\n(?=## Logs)", "\n", text, flags=re.S)


def test_a_shard_of_no_logs_says_so(tmp_path: Path) -> None:
    """Shards of a store with fewer logs than shards: the empty ones say which share of
    what they read, not that the directory has no logs."""
    shutil.copy(next(CORPUS.glob("*.eval")), tmp_path / "one.eval")
    empty = next(k for k in range(4) if not owns((k, 4), "one.eval"))
    res = cli("watch", "--log-dir", str(tmp_path), "--once", "--format", "jsonl", "--shard",
              f"{empty}/4")
    assert res.returncode == 0, res.stderr
    [notice] = [json.loads(line) for line in res.stdout.splitlines()]
    assert notice["notice"] == "no_logs"
    assert notice["message"] == f"no Inspect logs (.eval or .json) found in shard {empty}/4 of " \
        f"{tmp_path}"
