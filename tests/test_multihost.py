"""Several watchers (one per host) write findings through fsspec; `report` merges them.

fsspec's in-memory filesystem stands in for S3: same code path (``fsspec.open``),
no network.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import fsspec
from click.testing import CliRunner

from tests.corpus import CORPUS
from watcher.cli import load_engine, main, run_watch
from watcher.runner import Selector


def test_hosts_write_to_shared_location_and_report_merges(tmp_path: Path) -> None:
    engine = load_engine((), (), (), None)
    hosts = {"host-a": "docent-intercode-ctf-gpt4o.eval", "host-b": "metr-oxdna-claude-opus.eval"}
    urls = []
    for host, name in hosts.items():
        log_dir = tmp_path / host
        log_dir.mkdir()
        shutil.copy(CORPUS / name, log_dir / name)
        url = f"memory://shared-findings/{host}.jsonl"
        code = run_watch(engine, selector=Selector(), log_dir=str(log_dir), once=True,
                         fmt="jsonl", output=url, quiet=True)
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
