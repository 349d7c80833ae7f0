"""The library entry (watcher.app): a watch run from a program, with its own sinks and
deciders, as the CLI runs it. Live front ends are tested in tests/test_watch_e2e.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from tests.corpus import CORPUS
from watcher import app
from watcher.cli import main
from watcher.exit_codes import ExitCode
from watcher.findings import Finding, Notice
from watcher.run.values import Origin
from watcher.summary import ReportContext, RunSummary, StatusSnapshot

LOG = "docent-intercode-ctf-gpt4o.eval"


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    d = tmp_path / "logs"
    d.mkdir()
    shutil.copy(CORPUS / LOG, d / LOG)
    return d


class Front:
    """A front end's sink: everything the watch hands it, in order."""

    def __init__(self) -> None:
        self.context: ReportContext | None = None
        self.findings: list[Finding] = []
        self.notices: list[Notice] = []
        self.snapshots: list[StatusSnapshot] = []
        self.summary: RunSummary | None = None

    def start(self, context: ReportContext) -> None:
        self.context = context

    def finding(self, f: Finding) -> None:
        self.findings.append(f)

    def notice(self, n: Notice) -> None:
        self.notices.append(n)

    def status(self, snapshot: StatusSnapshot) -> None:
        self.snapshots.append(snapshot)

    def stop(self, summary: RunSummary | None = None) -> None:
        self.summary = summary


class Audit:
    """A decider that acts on nothing and records what it was shown."""

    def __init__(self) -> None:
        self.seen: list[tuple[Finding, Origin | None]] = []

    def decide(self, finding: Finding, origin: Origin | None) -> list[Notice]:
        self.seen.append((finding, origin))
        return [Notice(kind="watchdog", message=f"looked at {finding.id}", at=finding.last_seen,
                       details={"finding": finding.id})]

    def pop_notices(self) -> list[Notice]:
        return []


def test_the_cli_defaults_are_the_library_defaults() -> None:
    """`inspect-watch watch` with no options is WatchOptions() (the CLI declares its own
    defaults for --help; they must not drift from the library's)."""
    ctx = main.commands["watch"].make_context("watch", [])
    defaults = app.WatchOptions()
    names = {f.name for f in fields(app.WatchOptions)}
    cli_params = {k: v for k, v in ctx.params.items() if k not in ("task", "sample_id", "epoch")}
    assert set(cli_params) <= names
    assert {k: getattr(defaults, k) for k in cli_params} == cli_params


def test_a_watch_collects_the_young_generation_less_often() -> None:
    """Loading a watch's rules raises the young collection's threshold (the older
    generations' stay as they were)."""
    import gc

    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 11, 12)
        app.load_engine(app.WatchOptions(only=("repeated-tool-call",)))
        assert gc.get_threshold() == (app.YOUNG_COLLECTION, 11, 12)
        assert app.YOUNG_COLLECTION > 700
    finally:
        gc.set_threshold(*before)


def test_run_hands_sinks_what_the_reporters_get(logs: Path, tmp_path: Path) -> None:
    out = tmp_path / "f.jsonl"
    front = Front()
    code = app.run(app.WatchOptions(log_dir=str(logs), once=True, format="jsonl",
                                    output=str(out)), sinks=[front])
    assert code is ExitCode.OK
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert [d["id"] for d in written if d["kind"] == "finding"] == [f.id for f in front.findings]
    assert front.findings and front.context is not None
    assert front.context.log_dirs == (str(logs),)
    assert front.summary is not None and len(front.summary.samples) == 15


def test_status_snapshots_are_built_only_when_a_sink_takes_them(
        logs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A JSONL watch (no sink shows status) builds no snapshot: each walks every sample
    read. A front end's sink that takes them still gets the last word, every task."""
    import watcher.run.watch as watch_mod

    built: list[int] = []
    real = watch_mod.status_snapshot

    def counted(*args: object, **kwargs: object) -> StatusSnapshot:
        built.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(watch_mod, "status_snapshot", counted)
    code = app.run(app.WatchOptions(log_dir=str(logs), once=True, format="jsonl",
                                    output=str(tmp_path / "a.jsonl")))
    assert code is ExitCode.OK and built == []
    front = Front()
    app.run(app.WatchOptions(log_dir=str(logs), once=True, format="jsonl",
                             output=str(tmp_path / "b.jsonl")), sinks=[front])
    assert built and front.snapshots and front.snapshots[-1].tasks


def test_a_decider_sees_news_with_its_origin_and_its_records_reach_the_outputs(
        logs: Path, tmp_path: Path) -> None:
    out = tmp_path / "f.jsonl"
    state = tmp_path / "state.json"
    audit = Audit()
    options = app.WatchOptions(log_dir=str(logs), once=True, format="jsonl", output=str(out),
                               state_path=str(state), min_confidence="medium")
    assert app.run(options, deciders=[audit]) is ExitCode.OK
    assert audit.seen
    assert all(f.confidence in ("medium", "high") for f, _ in audit.seen)  # the floor first
    origin = audit.seen[0][1]
    assert origin is not None and origin.key == "logs" and origin.server is None
    assert not origin.source.live and origin.label == f"log dir {logs}"
    # each audit record is written right after the finding it is about
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    for i, d in enumerate(lines):
        if d["kind"] == "finding":
            assert lines[i + 1]["notice"] == "watchdog"
            assert lines[i + 1]["details"]["finding"] == d["id"]
    assert sum(d.get("notice") == "watchdog" for d in lines) == len(audit.seen)
    # news only: what the state has seen is not shown again
    again = Audit()
    assert app.run(options, deciders=[again]) is ExitCode.OK
    assert again.seen == []


def test_no_format_writes_nothing_but_the_sinks(logs: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    front = Front()
    code = app.run(app.WatchOptions(log_dir=str(logs), once=True, format=None), sinks=[front])
    assert code is ExitCode.OK and front.findings
    assert capsys.readouterr().out == ""


def test_invalid_options_raise_before_anything_starts(tmp_path: Path) -> None:
    front = Front()
    cases = [
        (app.WatchOptions(poll=0), "--poll"),
        (app.WatchOptions(format="nosuch"), "--format"),
        (app.WatchOptions(jobs=2), "--jobs"),
        (app.WatchOptions(log_dir=str(tmp_path / "typo")), "--log-dir"),
        (app.WatchOptions(output=str(tmp_path / "no" / "f.jsonl")), "--output"),
    ]
    for options, option in cases:
        with pytest.raises(app.OptionsError) as e:
            app.run(options, sinks=[front])
        assert e.value.option == option
    assert front.context is None  # nothing started


def test_a_handle_stops_a_watch_that_would_wait_for_ever(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """start() runs the watch on a thread; stop() ends it as Ctrl+C does (exit 130), with
    the summary written and the status snapshots it sent readable meanwhile."""
    monkeypatch.setenv("INSPECT_WATCH_CONTROL_DIR", str(tmp_path / "none"))
    front = Front()
    handle = app.start(app.WatchOptions(follow=True, poll=0.05, format=None), sinks=[front])
    for _ in range(200):
        if handle.status() is not None:
            break
        handle.wait(0.05)
    assert handle.running and handle.status() is not None
    handle.stop()
    assert handle.wait(30) is ExitCode.INTERRUPTED
    assert not handle.running and front.summary is not None


def test_the_cli_path_does_not_import_inspect() -> None:
    """Importing Inspect costs seconds: a live watch must not pay for it."""
    code = ("import sys, watcher.cli, watcher.app, watcher.run.watch, watcher.reporters; "
            "sys.exit(1 if 'inspect_ai' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_the_library_and_the_demo_do_not_import_the_cli() -> None:
    """The demo runs its watch through the library, not the CLI (the circle cli <-> demo
    it replaced), and nothing below the CLI climbs back up into it."""
    import ast

    root = Path(app.__file__).parent
    for path in [*root.glob("*.py"), *root.glob("*/**/*.py")]:
        if path.name in ("cli.py", "__main__.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            imported = [*names, *(f"{n}.{a.name}" for n in names if isinstance(
                node, ast.ImportFrom) for a in node.names)]
            assert "watcher.cli" not in imported, f"{path} imports watcher.cli"
