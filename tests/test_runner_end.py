"""A source watcher that returns says so on the queue: the consumer is not left to
notice on a timeout (every ``--once`` scan waited 0.2 s after its last sample)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.corpus import CORPUS
from watcher.app import WatchOptions, load_engine
from watcher.findings import Finding
from watcher.run.runner import Runner
from watcher.run.values import RunOptions
from watcher.sources.logfiles.source import LogSource
from watcher.state import WatchState


def test_a_returned_watcher_wakes_the_consumer_and_is_not_active(tmp_path: Path) -> None:
    shutil.copy(CORPUS / "docent-intercode-ctf-gpt4o.eval", tmp_path)
    runner = Runner(load_engine(WatchOptions()), RunOptions(), WatchState())
    runner.add("logs", LogSource(str(tmp_path)), "log dir", once=True)
    runner.threads["logs"].join()  # the watcher has returned: what it put is all there is
    assert not runner.active()
    batches = []
    while not runner.queue.empty():
        batches.append(runner.queue.get_nowait())
    assert batches[-1] == ("logs", [])  # the last word: the wake, after every output
    assert any(isinstance(x, Finding) for _, batch in batches for x in batch)
    runner.shutdown()

