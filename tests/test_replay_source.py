"""ReplaySource and the recording format: round trip, fixture shape, errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from watcher.events import normalise
from watcher.sources.base import BadResponse, EventPage, NotFound
from watcher.sources.replay import (
    SCHEMA,
    RecordingWriter,
    ReplaySource,
    read_recordings,
    write_recording,
)

DATA = Path(__file__).parent / "data"

HEADER = {"task": "demo", "task_id": "T1", "eval_id": "E1", "model": "scripted/demo",
          "sample_id": "repeated-call", "epoch": 1, "tier": "content"}


def _event(kind: str, n: int, **extra: Any) -> dict[str, Any]:
    return {"event": kind, "uuid": f"u{n}", "span_id": "s", "timestamp": 1000.0 + n,
            "pending": False, **extra}


PAGES = [
    EventPage(events=[_event("model", 1, model="scripted/demo", tokens=5, has_error=False)],
              next="srv-1", done=False),
    EventPage(events=[], next="srv-1", done=False),
    EventPage(events=[_event("tool", 2, function="shell", has_error=False,
                             arguments='{"cmd": "ls"}'),
                      _event("info", 3, source="x", data="hello")],
              next="srv-3", done=True),
]


def _drain(src: ReplaySource, eval_id: str, sample_id: str, **kw: Any) -> list[EventPage]:
    task = next(t for t in src.tasks() if t.eval_id == eval_id)
    pages, since = [], None
    for _ in range(100):
        page = src.events(task, sample_id, 1, since=since, types=kw.get("types"),
                          tier="content", limit=kw.get("limit", 500))
        pages.append(page)
        since = page.next
        if page.done:
            return pages
    raise AssertionError("replay never reported done")


def test_round_trip_serves_the_recorded_pages(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    write_recording(path, HEADER, PAGES)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["kind"] == "header" and lines[0]["schema"] == SCHEMA
    assert lines[0]["sample_id"] == "repeated-call"
    assert [line["kind"] for line in lines[1:]] == ["page"] * 3

    src = ReplaySource([str(path)])
    [task] = src.tasks()
    assert (task.eval_id, task.task, task.task_id, task.model) == (
        "E1", "demo", "T1", "scripted/demo")
    assert task.status == "success" and task.finished
    got = _drain(src, "E1", "repeated-call")
    assert [p.events for p in got] == [p.events for p in PAGES]
    assert [p.done for p in got] == [p.done for p in PAGES]


def test_recorded_server_cursor_resumes_after_its_page(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    write_recording(path, HEADER, PAGES)
    src = ReplaySource(path)
    task = src.tasks()[0]
    page = src.events(task, "repeated-call", 1, since="srv-3", types=None, tier="content")
    assert page.events == [] and page.done
    page = src.events(task, "repeated-call", 1, since="srv-1", types=None, tier="content")
    assert page.events == []  # the recorded empty poll comes next
    page = src.events(task, "repeated-call", 1, since=page.next, types=None, tier="content")
    assert [e["uuid"] for e in page.events] == ["u2", "u3"]


def test_type_filter_and_rows(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    row = {"sample_id": "repeated-call", "epoch": 1, "status": "completed", "retries": 2,
           "total_tokens": 77}
    write_recording(path, HEADER, PAGES, rows=[row])
    src = ReplaySource([path])
    task = src.tasks()[0]
    [listed] = src.samples(task).samples
    assert (listed.sample_id, listed.epoch, listed.status, listed.retries) == (
        "repeated-call", 1, "completed", 2)
    assert listed.raw["total_tokens"] == 77
    pages = _drain(src, "E1", "repeated-call", types=frozenset({"tool"}))
    assert [e["event"] for p in pages for e in p.events] == ["tool"]


def test_unfinished_recording_ends_done_and_lists_running(tmp_path: Path) -> None:
    path = tmp_path / "partial.jsonl"
    with RecordingWriter(path, {**HEADER, "eval_id": "E2"}) as writer:
        writer.page(PAGES[0])  # recording interrupted before the sample ended
    src = ReplaySource([path])
    task = src.tasks()[0]
    # nothing more will arrive: the task is over (partial), its sample as recorded
    assert task.status == "partial" and task.finished
    assert src.samples(task).samples[0].status == "running"
    pages = _drain(src, "E2", "repeated-call")
    assert len(pages) == 1 and pages[0].done
    [notice] = src.pop_notices()
    kind, message = notice.kind, notice.message
    assert kind == "partial" and "repeated-call" in message and str(path) in message
    assert src.pop_notices() == []


def test_several_files_share_a_task(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_recording(a, HEADER, PAGES)
    write_recording(b, {**HEADER, "sample_id": "clean"}, PAGES[:1])
    src = ReplaySource([a, b])
    [task] = src.tasks()
    assert sorted(r.sample_id for r in src.samples(task).samples) == ["clean", "repeated-call"]
    assert task.counts == {"total": 2}
    with pytest.raises(NotFound):
        src.events(task, "nope", 1, since=None, types=None, tier="content")


def test_plain_event_fixture_is_one_synthetic_sample() -> None:
    path = DATA / "replay_plain.jsonl"
    src = ReplaySource([path])
    [task] = src.tasks()
    assert task.task == "replay_plain"
    [row] = src.samples(task).samples
    assert (row.sample_id, row.epoch, row.status) == ("1", 1, "completed")
    pages = _drain(src, task.eval_id, "1", limit=3)
    assert [len(p.events) for p in pages] == [3, 1]  # the blank line is skipped
    assert [p.done for p in pages] == [False, True]
    tools = [normalise(e, "content") for p in pages for e in p.events if e["event"] == "tool"]
    assert [t["args"] for t in tools] == [{"cmd": "cat /tmp/status.txt"}] * 2


def test_bad_line_names_file_and_line() -> None:
    path = DATA / "replay_bad.jsonl"
    with pytest.raises(BadResponse, match=rf"{path.name}:3: not JSON"):
        ReplaySource([path])


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"kind": "page", "events": [], "next": null, "done": true}'], ":1: 'page' line before"),
        (['{"kind": "header", "schema": 9, "eval_id": "e", "sample_id": "s"}'], ":1: unsupported"),
        (['{"kind": "header", "schema": 1, "eval_id": "e"}'], ":1: header lacks sample_id"),
        (['{"event": "tool"}', '{"kind": "header", "schema": 1}'], ":2: 'header' line after"),
        (['[1, 2]'], ":1: expected a JSON object"),
        (['{"kind": "header", "schema": 1, "eval_id": "e", "sample_id": "s"}',
          '{"kind": "page", "events": "nope"}'], ":2: page 'events' must be"),
        (['{"kind": "header", "schema": 1, "eval_id": "e", "sample_id": "s"}',
          '{"kind": "weird"}'], ":2: unknown line kind"),
    ],
)
def test_malformed_recordings(tmp_path: Path, lines: list[str], message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(BadResponse, match=message):
        read_recordings(path)


def test_missing_file_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        ReplaySource([tmp_path / "absent.jsonl"])


@pytest.mark.slow  # a process of its own
def test_replay_of_a_recording_taken_mid_sample_ends(tmp_path: Path) -> None:
    """`record ... && replay ...` run while the sample was live: the file ends with a page
    that is not done (and a pending event). Replay reads to its end, says it is
    partial, and exits (it waited for ever before)."""
    import subprocess
    import sys

    path = tmp_path / "live.jsonl"
    pending = _event("tool", 9, function="shell", has_error=False, arguments="{}",
                     pending=True)
    write_recording(path, {**HEADER, "partial": True},
                    [PAGES[0], EventPage(events=[pending], next="srv-9", done=False)])
    proc = subprocess.run([sys.executable, "-m", "watcher", "replay", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "partial" in proc.stdout and "pending_at_end" in proc.stdout


def test_record_of_a_live_sample_says_it_is_partial(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from tests.fakeserver import FakeControlServer, tool_event
    from watcher.cli import main

    control = tmp_path / "control"
    monkeypatch.setenv("INSPECT_WATCH_CONTROL_DIR", str(control))
    live, done = tmp_path / "live.jsonl", tmp_path / "done.jsonl"
    with FakeControlServer(control) as fake:
        fake.add_sample("s1", [tool_event(1, "ls")])  # still running
        first = CliRunner().invoke(main, ["record", fake.eval_id, "s1", "-o", str(live)])
        fake.samples[("s1", 1)].status = "completed"
        second = CliRunner().invoke(main, ["record", fake.eval_id, "s1", "-o", str(done)])
    assert first.exit_code == 0 and "partial, the sample was still running" in first.output
    assert second.exit_code == 0 and "partial" not in second.output
    assert read_recordings(live)[0].header["partial"] is True
    assert read_recordings(done)[0].header["partial"] is False


# -- hostile input to `replay` (issue 34, item 9) -------------------------------------------


def _replay_cli(*files: str) -> Any:
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "watcher", "replay", "--format", "jsonl",
                           *files], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def _header_line(**kw: Any) -> str:
    head = {"kind": "header", "schema": 1, "task": "t", "task_id": "t", "eval_id": "e",
            "model": "m", "sample_id": "s", "epoch": 1, "tier": "content", **kw}
    return json.dumps(head)


def test_replay_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)  # no writer: reading it would block for ever
    for path in ("/dev/zero", str(fifo)):  # /dev/zero: read until memory ran out
        res = _replay_cli(path)
        assert res.returncode == 2, (path, res.stderr[-500:])
        assert "not a regular file" in res.stderr and "Traceback" not in res.stderr


def test_replay_refuses_a_recording_past_its_size_limit(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INSPECT_WATCH_MAX_RECORDING_MB", "0.001")
    big = tmp_path / "big.jsonl"
    big.write_text(_header_line() + "\n" + json.dumps({"kind": "page", "events": [
        _event("info", 1, data="x" * 5000)], "done": True}) + "\n")
    with pytest.raises(BadResponse, match="INSPECT_WATCH_MAX_RECORDING_MB"):
        read_recordings(big)


@pytest.mark.parametrize("line,message", [
    ('{"kind": "page", "events": [' + "[" * 100_000 + "]" * 100_000 + "]}",
     "nested too deep"),
    (None, "epoch must be a whole number"),
])
def test_replay_of_hostile_lines_is_a_located_error(tmp_path: Path, line: str | None,
                                                    message: str) -> None:
    bad = tmp_path / "bad.jsonl"
    head = _header_line().replace('"epoch": 1', '"epoch": 1e400') if line is None else (
        _header_line())
    bad.write_text(head + "\n" + (line or "") + "\n")
    res = _replay_cli(str(bad))
    assert res.returncode == 2, res.stderr[-800:]
    assert message in res.stderr and f"{bad}:" in res.stderr
    assert "Traceback" not in res.stderr
