"""Which live evals a watch reads and acts on (issue 34, item 16): every eval of the user
on the host unless narrowed, said in the banner; ``--evals-from DIR`` narrows it to the
evals whose logs are written under DIR (the ones a script or ``launch`` started there)."""

from __future__ import annotations

import io
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.fakeserver import FakeControlServer, model_event, tool_event
from watcher import app
from watcher.reporters import TextReporter
from watcher.run.values import Selector, under
from watcher.sources.base import TaskInfo
from watcher.summary import ReportContext


def _task(log: str | None) -> TaskInfo:
    return TaskInfo(eval_id="e", task="t", task_id="ti", model="m", log_location=log)


def test_a_log_root_matches_logs_below_it_only(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    (mine / "sub").mkdir(parents=True)
    (tmp_path / "mine-too").mkdir()
    os.symlink(mine, tmp_path / "link")
    sel = Selector(log_root=str(tmp_path / "link"))
    assert sel.task_matches(_task(str(mine / "sub" / "x.eval")))
    assert sel.task_matches(_task("file://" + str(mine / "x.eval")))
    assert not sel.task_matches(_task(str(tmp_path / "mine-too" / "x.eval")))  # a prefix
    assert not sel.task_matches(_task(str(mine / ".." / "other.eval")))
    assert not sel.task_matches(_task(None))  # no log named: not known to be there
    assert under("s3://b/runs/a/x.eval", "s3://b/runs/a") and not under(
        "s3://b/runs/ab/x.eval", "s3://b/runs/a")


def _banner(options: app.WatchOptions) -> str:
    out = io.StringIO()
    rep = TextReporter(out, tty=False, color=False)
    rep.start(ReportContext(sources=("live",), acting="act", scope=app.scope_words(
        app.check(options))))
    return out.getvalue()


def test_the_banner_says_what_act_may_act_on(tmp_path: Path) -> None:
    everything = _banner(app.WatchOptions(act=True))
    assert "on every eval of yours on this host, whoever started it" in everything
    assert "--evals-from DIR" in everything
    scoped = _banner(app.WatchOptions(act=True, evals_from=str(tmp_path)))
    assert f"only evals logging under {tmp_path}" in scoped and "every eval" not in scoped
    with pytest.raises(app.OptionsError, match="--log-dir"):
        app.check(app.WatchOptions(evals_from=str(tmp_path), log_dir=str(tmp_path)))


def _fake(control_dir: Path, pid: int, eval_id: str, log: Path) -> FakeControlServer:
    fake = FakeControlServer(control_dir, pid=pid, eval_id=eval_id, task=f"task_{eval_id}")
    events = []
    for i in range(6):
        events += [model_event(2 * i), tool_event(2 * i + 1, "cat /tmp/status")]
    fake.add_sample("s1", events, status="completed")
    fake.task_status = "completed"
    fake.start()
    fake.tasks_override = [{"eval_id": eval_id, "task": f"task_{eval_id}",
                            "task_id": f"{eval_id}-t", "model": "m", "status": "success",
                            "log_location": str(log), "api_version": fake.api_version,
                            "samples": {"total": 1}}]
    return fake


def test_evals_from_reads_only_the_evals_logging_there(control_dir: Path,
                                                       tmp_path: Path) -> None:
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    mine.mkdir()
    theirs.mkdir()
    import subprocess

    other = subprocess.Popen(["sleep", "120"])  # a second live pid for the second server
    a = _fake(control_dir, os.getpid(), "evalA", mine / "a.eval")
    b = _fake(control_dir, other.pid, "evalB", theirs / "b.eval")
    try:
        seen: list[Any] = []

        class Keep:
            def start(self, context: Any) -> None: ...
            def notice(self, n: Any) -> None: ...
            def status(self, snapshot: Any) -> None: ...
            def stop(self, summary: Any = None) -> None: ...

            def finding(self, f: Any) -> None:
                seen.append(f)

        done = threading.Event()
        codes: list[Any] = []

        def go() -> None:
            codes.append(app.run(app.WatchOptions(once=True, transport="http", format=None,
                                                  evals_from=str(mine)), sinks=[Keep()]))
            done.set()

        threading.Thread(target=go, daemon=True).start()
        assert done.wait(120)
        assert seen and {f.sample.eval_id for f in seen} == {"evalA"}
        assert b.count("/samples") == 0  # the other eval's samples were never asked for
    finally:
        a.stop()
        b.stop()
        other.kill()
        other.wait()
