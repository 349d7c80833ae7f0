"""Page budgets never truncate a read: small pages give the same findings as large ones."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from tests.corpus import CORPUS
from watcher.app import WatchOptions, load_engine
from watcher.run.watch import Watch, WatchConfig
from watcher.state import WatchState


class Collect:
    def __init__(self) -> None:
        self.findings: dict[str, Any] = {}

    def finding(self, f: Any) -> None:
        self.findings[f.id] = (f.rule, f.sample.sample_id, f.count, f.confidence)

    def notice(self, n: Any) -> None: ...
    def status(self, s: Any) -> None: ...


def _run(log_dir: Path, page_limit: int) -> tuple[dict[str, Any], list[int]]:
    sink = Collect()
    watch = Watch(load_engine(WatchOptions()), WatchConfig(log_dir=str(log_dir), once=True),
                  WatchState(), [sink])
    watch.opts.page_limit = page_limit
    watch.run()
    delivered = [t.stream.delivered for sw in watch.runner.watchers.values()
                 for tw in sw.tasks.values() for t in tw.samples.values()]
    return sink.findings, delivered


def test_one_event_pages_read_everything(tmp_path: Path) -> None:
    shutil.copy(CORPUS / "docent-intercode-ctf-gpt4o.eval", tmp_path)
    big, big_n = _run(tmp_path, 500)
    small, small_n = _run(tmp_path, 1)  # far more pages than one poll's budget
    assert big and small == big
    assert small_n == big_n
    assert max(small_n) > 20  # a sample needed more one-event pages than one poll allows


def test_finished_samples_release_their_rule_state(tmp_path: Path) -> None:
    """A long run must not keep every finished sample's rule state."""
    shutil.copy(CORPUS / "docent-intercode-ctf-gpt4o.eval", tmp_path)
    watch = Watch(load_engine(WatchOptions()), WatchConfig(log_dir=str(tmp_path), once=True),
                  WatchState(), [Collect()])
    watch.run()
    (tw,) = [tw for sw in watch.runner.watchers.values() for tw in sw.tasks.values()]
    assert len(tw.samples) == 15 and all(t.stream.done for t in tw.samples.values())
    assert [t.watch for t in tw.samples.values() if t.watch is not None] == []


def test_source_notices_reach_the_watch(tmp_path: Path, monkeypatch: Any) -> None:
    """A log's unresolvable attachment references are reported, not silently passed over."""
    from watcher.sources.base import SourceNotice
    from watcher.sources.logfiles import LogSource

    shutil.copy(CORPUS / "docent-intercode-ctf-gpt4o.eval", tmp_path)
    notices: list[Any] = []

    class Sink(Collect):
        def notice(self, n: Any) -> None:
            notices.append(n)

    watch = Watch(load_engine(WatchOptions()), WatchConfig(log_dir=str(tmp_path), once=True),
                  WatchState(), [Sink()])
    # the corpus resolves every reference, so add one loss to what the source reports
    original = LogSource.pop_notices
    monkeypatch.setattr(LogSource, "pop_notices", lambda self: [
        *original(self), SourceNotice(kind="gap", message="2 attachment reference(s) lost")])
    watch.run()
    assert any(n.kind == "gap" and "attachment" in n.message for n in notices)
