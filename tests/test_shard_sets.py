"""A log directory read the way Inspect reads it (issue 34, item 4): a merged log and
its per-worker shards (``<name>.shards/<k>/``), ``-recovered`` copies and
``<name>.checkpoints/`` hold each sample once, not two or three times.

The logs are Inspect's own: two real ``inspect eval`` workers write a shard each, a
third run of the whole task writes the merged log after them; the layout around them is
inspect_ai's (``inspect_ai/_util/log_layout.py``)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.evalproc import start_eval
from watcher.engine import Engine, load_rules
from watcher.findings import Finding
from watcher.run.watch import Watch, WatchConfig
from watcher.sources.logfiles import LogSource
from watcher.state import WatchState

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


class Sink:
    def __init__(self) -> None:
        self.findings: dict[str, Finding] = {}

    def start(self, context: object) -> None: ...
    def notice(self, n: object) -> None: ...
    def status(self, snapshot: object) -> None: ...
    def stop(self, summary: object = None) -> None: ...

    def finding(self, f: Finding) -> None:
        self.findings[f.id] = f


def scan(where: Path) -> dict[str, Finding]:
    sink = Sink()
    Watch(Engine(load_rules(builtin=True, user_dir=False)),
          WatchConfig(log_dir=str(where), once=True), WatchState(), [sink]).run()
    return sink.findings


def episodes(found: dict[str, Finding]) -> list[tuple[str, str, int, int]]:
    return sorted((f.rule, f.sample.sample_id, f.sample.epoch, f.episode)
                  for f in found.values())


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("shards")
    workers = [start_eval(tmp / f"w{k}", "loops", "--sample-id", ids, "--epochs", "2")
               for k, ids in enumerate(("repeat,clean", "submit-loop"))]
    try:
        for w in workers:
            assert w.wait() == 0, w.output.read_text()[-2000:]
    finally:
        for w in workers:
            w.stop()
    merged_run = start_eval(tmp / "merged", "loops", "--epochs", "2")
    try:
        assert merged_run.wait() == 0, merged_run.output.read_text()[-2000:]
    finally:
        merged_run.stop()
    [merged] = merged_run.logs()
    name = merged.name[: -len(".eval")]
    d = tmp / "dir"
    d.mkdir()
    shutil.copy2(merged, d / merged.name)  # (copy2 keeps the times the layout rests on)
    for k, w in enumerate(workers):
        [shard] = w.logs()
        (d / f"{name}.shards" / str(k)).mkdir(parents=True)
        shutil.copy2(shard, d / f"{name}.shards" / str(k) / shard.name)
    # a recovery's copy of the merged log, and sandbox checkpoints holding a log
    shutil.copy2(merged, d / f"{name}-recovered.eval")
    (d / f"{name}.checkpoints").mkdir()
    shutil.copy2(workers[0].logs()[0], d / f"{name}.checkpoints" / workers[0].logs()[0].name)
    # elsewhere, an unsharded log and its -recovered copy
    (d / "other").mkdir()
    [one] = workers[1].logs()
    shutil.copy2(one, d / "other" / one.name)
    shutil.copy2(one, d / "other" / (one.name[: -len(".eval")] + "-recovered.eval"))
    return {"dir": d, "merged": merged, "shard1": one, "name": Path(name)}


def test_a_shard_set_covered_by_its_finished_merged_log_is_read_once(
        layout: dict[str, Path]) -> None:
    from inspect_ai.log import list_eval_logs
    from inspect_ai.log._file import without_merged_shards

    alone = scan(layout["merged"])
    assert alone and {f.sample.sample_id for f in alone.values()} >= {"repeat", "submit-loop"}
    other = scan(layout["shard1"])
    found = scan(layout["dir"])
    # the merged log (its newest copy) once, and the other log once: nothing twice
    assert episodes(found) == sorted(episodes(alone) + episodes(other))
    read = {t.log_location for t in LogSource(str(layout["dir"])).tasks()}
    assert {Path(x).name for x in read} == {f"{layout['name']}-recovered.eval",
                                           layout["shard1"].name[:-5] + "-recovered.eval"}
    # Inspect's viewer listing agrees: it hides the shards the merged log covers
    listed = list_eval_logs(str(layout["dir"]))
    assert any(".shards" in i.name for i in listed)
    assert not any(".shards" in i.name for i in without_merged_shards(listed))


def test_shards_written_after_the_merge_are_read_instead_of_it(
        layout: dict[str, Path], tmp_path: Path) -> None:
    d = tmp_path / "dir"
    shutil.copytree(layout["dir"], d, copy_function=shutil.copy2)
    shutil.rmtree(d / "other")
    # shard 1 was retried after the merge: the merged log no longer covers the set,
    # which is then read as inspect ctl --log-dir reads it, from its shards
    shard = next((d / f"{layout['name']}.shards" / "1").glob("*.eval"))
    later = (d / f"{layout['name']}.eval").stat().st_mtime + 60
    os.utime(shard, (later, later))
    found = scan(d)
    read = [Path(t.log_location or "") for t in LogSource(str(d)).tasks()]
    assert sorted(p.parent.name for p in read) == ["0", "1"]
    alone = scan(layout["merged"])
    assert sorted(e[:3] for e in episodes(found)) == sorted(e[:3] for e in episodes(alone))
