"""``inspect-watch report`` reads the logs its findings name (headers and sample summaries)
and says plainly what it could not know, instead of printing zeros."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.test_cli_e2e import cli
from watcher.logsummary import with_logs
from watcher.reporters import render_markdown, summary_from_jsonl

pytestmark = pytest.mark.e2e

ROW = "| loops | inspect\\_watch\\_scripted/test | 3 | 3 | 0 | 0 | accuracy 1, stderr 0 |"


def _watch_loops(eval_runner: Any, tmp_path: Path) -> tuple[Path, Path]:
    """A live watch of a real `loops` eval (its three samples all succeed, accuracy 1.0):
    the findings file, and the log it names."""
    proc = eval_runner("loops", "--ctl-server", "keep", tool_delay=0.1)
    proc.discovery()
    out = tmp_path / "findings.jsonl"
    res = cli("watch", "--poll", "0.3", "--quiet", "--format", "jsonl", "-o", str(out),
              "--release-when-done")
    assert res.returncode == 0, res.stderr
    proc.wait()
    [log] = proc.logs()
    named = {json.loads(line).get("log_location") for line in out.read_text().splitlines()}
    assert str(log) in named  # a live watch names the log as a plain path
    return out, log


def test_report_reads_counts_and_scores_from_the_log(eval_runner: Any, tmp_path: Path) -> None:
    """Before, this report said `? | 0 | 0 | 0 | —` for three succeeded samples scoring 1.0,
    and "None" for outliers and errors it had no data for."""
    out, log = _watch_loops(eval_runner, tmp_path)
    res = cli("report", str(out))
    assert res.returncode == 0, res.stderr
    assert ROW in res.stdout
    assert "Not known" not in res.stdout
    assert "None: no sample was far slower or heavier" in res.stdout
    html = cli("report", str(out), "--format", "html").stdout
    assert ("<td>3</td><td>3</td><td>0</td><td>0</td><td>accuracy 1, stderr 0</td>") in html

    # without the logs it says what it does not know, and why, instead of zeros
    res = cli("report", str(out), "--no-logs")
    assert ("| loops | inspect\\_watch\\_scripted/test | ? | ? | ? | ? | ? |") in res.stdout
    assert "its log was not read \\(\\-\\-no\\-logs\\); known only from its findings" in res.stdout
    assert res.stdout.count("Not known: no sample data was read (see Tasks).") == 2

    # a post-hoc scan's own summary has the scores too
    res = cli("watch", "--log-dir", str(log), "--once", "--quiet", "--summary",
              str(tmp_path / "scan.md"))
    assert res.returncode == 0, res.stderr
    assert ROW in (tmp_path / "scan.md").read_text()

    # a log that is gone (the demo's, say) is named as such
    log.unlink()
    res = cli("report", str(out))
    assert res.returncode == 0
    assert "| ? | ? | ? | ? | ? |" in res.stdout
    assert "its log could not be read" in res.stdout and "no such log file" in res.stdout


def test_report_reads_logs_through_fsspec_and_bounds_how_many(eval_runner: Any,
                                                              tmp_path: Path) -> None:
    import fsspec

    out, log = _watch_loops(eval_runner, tmp_path)
    url = "memory://report-test/logs/run.eval"
    fs = fsspec.filesystem("memory")
    with fs.open(url, "wb") as fh:
        fh.write(log.read_bytes())
    moved = tmp_path / "moved.jsonl"
    moved.write_text(out.read_text().replace(json.dumps(str(log)), json.dumps(url)))
    try:
        # a URL is read only over a scheme the user allowed
        [task] = with_logs(summary_from_jsonl([moved])).tasks
        assert "memory:// is not a scheme this report was allowed" in task.unknown
        summary = with_logs(summary_from_jsonl([moved]), schemes={"memory"})
        assert ROW in render_markdown(summary)
        assert {t.log_location for t in summary.tasks} == {url}
        [task] = with_logs(summary_from_jsonl([moved]), max_logs=0,
                           schemes={"memory"}).tasks
        assert task.unknown == ("its log was not read: the findings name 1 log(s) and at most "
                                "0 are read (--max-logs); known only from its findings")
    finally:
        fs.rm("/report-test", recursive=True)


def test_report_fetches_no_url_a_findings_file_names(tmp_path: Path) -> None:
    """A findings file from elsewhere names its logs (issue 34, item 10): an internal URL
    must not be requested, nor "/" walked; the user allows a scheme with --logs-from."""
    import http.server
    import threading

    from watcher.reporters.examples import example_snapshots
    from watcher.reporters.jsonl import finding_record

    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - stdlib name
            asked.append(self.path)
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    internal = f"http://127.0.0.1:{server.server_port}/admin/x.eval"
    f = example_snapshots()[0]
    records = [finding_record(replace(f, id=f"{f.id[:-1]}{i}", sample=replace(
        f.sample, eval_id=f"e{i}", log_location=where))) for i, where in enumerate(
        (internal, "/", "/etc/passwd"))]
    findings = tmp_path / "elsewhere.jsonl"
    findings.write_text("".join(json.dumps(r) + "\n" for r in records))
    try:
        res = cli("report", str(findings))
        assert res.returncode == 0, res.stderr
        said = res.stdout.replace("\\", "")  # (Markdown escapes)
        assert asked == []
        assert "http:// is not a scheme this report was allowed to read" in said
        assert said.count("not a .eval or .json file") == 2  # "/" and /etc/passwd
        # allowed by the user: asked (and it is no log)
        res = cli("report", "--logs-from", "http", str(findings))
        assert asked and "its log could not be read" in res.stdout
    finally:
        server.shutdown()
