"""Several watchers (one per host) write findings through fsspec; `report` merges them.

fsspec's in-memory filesystem stands in for S3: same code path (``fsspec.open``),
no network.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import fsspec
import pytest
from click.testing import CliRunner
from fsspec.implementations.memory import MemoryFileSystem

from tests.corpus import CORPUS
from watcher.app import WatchOptions, load_engine, run
from watcher.cli import main
from watcher.reporters.examples import example_snapshots
from watcher.reporters.jsonl import JsonlReporter
from watcher.reporters.remote import RemoteReporter
from watcher.run.values import Selector
from watcher.summary import ReportContext


def test_hosts_write_to_shared_location_and_report_merges(tmp_path: Path) -> None:
    engine = load_engine(WatchOptions())
    hosts = {"host-a": "docent-intercode-ctf-gpt4o.eval", "host-b": "metr-oxdna-claude-opus.eval"}
    urls = []
    for host, name in hosts.items():
        log_dir = tmp_path / host
        log_dir.mkdir()
        shutil.copy(CORPUS / name, log_dir / name)
        url = f"memory://shared-findings/{host}.jsonl"
        code = run(WatchOptions(selector=Selector(), log_dir=str(log_dir), once=True,
                                format="jsonl", output=url, quiet=True, jobs=1), engine=engine)
        assert code == 0
        urls.append(url)
    with fsspec.open(urls[0], "r") as fh:
        lines = [json.loads(line) for line in fh.read().splitlines()]
    assert any(d["kind"] == "finding" and d["task"] == "inspect_evals/luce_intercode_ctf"
               for d in lines)
    result = CliRunner().invoke(main, ["report", *urls, "--format", "markdown"])
    assert result.exit_code == 0, result.output
    text = result.output.replace("\\", "")  # Markdown escapes punctuation in names
    assert "luce_intercode_ctf" in text and "oxdna_simple" in text


# --- an object store that fails: what a real S3 cannot be made to do here -----------------

class FlakyFS(MemoryFileSystem):
    """fsspec's memory store whose writes fail once ``writes_ok`` writes have been made."""

    protocol = "flaky"
    writes_ok: int | None = None  # None: never fail
    down = False  # listings fail too

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> Any:
        if FlakyFS.down:
            raise ConnectionError("the network is down")
        return super().ls(path, detail=detail, **kwargs)

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        if "w" in mode and FlakyFS.writes_ok is not None:
            if FlakyFS.writes_ok <= 0:
                raise ConnectionError("the network is down")
            FlakyFS.writes_ok -= 1
        return super()._open(path, mode, **kwargs)


fsspec.register_implementation("flaky", FlakyFS, clobber=True)


def _lines(url: str) -> list[dict]:
    with fsspec.open(url, "r") as fh:
        return [json.loads(line) for line in fh.read().splitlines()]


def _scan_corpus_to(url: str, writes_ok: int) -> int:
    """The corpus scanned with findings to ``url``, whose store takes ``writes_ok`` writes."""
    FlakyFS.writes_ok = writes_ok
    try:
        return run(WatchOptions(selector=Selector(), log_dir=str(CORPUS), once=True,
                                format="jsonl", output=url, quiet=True, jobs=1),
                   engine=load_engine(WatchOptions()))
    finally:
        FlakyFS.writes_ok = None


def test_unwritable_remote_output_refuses_to_start(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert _scan_corpus_to("flaky://bucket/host-a.jsonl", writes_ok=0) == 2
    err = capsys.readouterr().err
    assert "cannot write flaky://bucket/host-a.jsonl" in err and "network is down" in err


def test_failed_uploads_never_stop_the_watch_and_lose_nothing(
        capsys: pytest.CaptureFixture[str]) -> None:
    url = "flaky://bucket/host-b.jsonl"
    rep = RemoteReporter(url, JsonlReporter, every=0.0)
    findings = example_snapshots()[:3]
    rep.start(ReportContext())
    FlakyFS.writes_ok = 0  # an outage: both findings stay in the spool
    try:
        rep.finding(findings[0])
        rep.finding(findings[1])
    finally:
        FlakyFS.writes_ok = None
    err = capsys.readouterr().err
    assert err.count("could not upload") == 1 and rep.spool in err  # said once, not per line
    assert rep.error and rep.lost
    rep.finding(findings[2])  # the network is back: the whole spool goes up
    assert "uploaded to flaky://bucket/host-b.jsonl again" in capsys.readouterr().err
    assert [d["id"] for d in _lines(url)] == [f.id for f in findings]
    rep.stop()
    assert not rep.lost and not Path(rep.spool).exists()


@pytest.mark.slow  # uploads retried in time
def test_last_upload_failing_keeps_the_spool_and_says_where(
        capsys: pytest.CaptureFixture[str]) -> None:
    # the empty object at the start, then nothing more: the findings did not get there
    assert _scan_corpus_to("flaky://bucket/host-c.jsonl", writes_ok=1) == 3
    err = capsys.readouterr().err
    assert "were not uploaded to flaky://bucket/host-c.jsonl" in err
    spool = err.split("they are in ")[-1].split()[0]
    kept = [json.loads(line) for line in Path(spool).read_text().splitlines()]
    assert any(d["kind"] == "finding" for d in kept)
    assert _lines("flaky://bucket/host-c.jsonl") == []
    Path(spool).unlink()


def test_log_dir_that_cannot_be_listed_is_exit_3_not_a_clean_scan(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--once over logs that could not be read found nothing because it read nothing: a
    script must not take that for a clean run."""
    FlakyFS.down = True
    try:
        code = run(WatchOptions(selector=Selector(), log_dir="flaky://bucket/logs", once=True,
                                format="jsonl", quiet=True, jobs=1),
                   engine=load_engine(WatchOptions()))
    finally:
        FlakyFS.down = False
    assert code == 3
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [d["notice"] for d in out] == ["source_error"]
    assert "cannot list logs" in out[0]["message"]
