"""The pull loop against real ``inspect eval`` processes and their real logs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from watcher.discovery import list_servers
from watcher.sources.base import BadResponse, SourceBusy, TaskInfo
from watcher.sources.http import HttpSource
from watcher.stream import SampleStream

pytestmark = pytest.mark.e2e


def _source(proc: Any) -> HttpSource:
    proc.discovery()
    servers = [s for s in list_servers() if s.pid == proc.proc.pid]
    assert servers, "the eval's discovery file was not found by list_servers()"
    return HttpSource(servers[0])


def _wait_task(src: HttpSource, timeout: float = 60) -> TaskInfo:
    deadline = time.time() + timeout
    while time.time() < deadline:
        tasks = src.tasks()
        if tasks:
            return tasks[0]
        time.sleep(0.1)
    raise TimeoutError("no task registered")


def watch_all(src: HttpSource, poll: float = 0.2, timeout: float = 120,
              types: frozenset[str] | None = None) -> dict[str, Any]:
    """Drive SampleStreams by hand until every sample is done; record what they saw."""
    task = _wait_task(src)
    streams: dict[tuple[str, int], SampleStream] = {}
    seen: dict[tuple[str, int], list[dict[str, Any]]] = {}
    pending_seen: dict[tuple[str, int], set[str]] = {}
    first_seen_at: dict[tuple[str, int], float] = {}
    deadline = time.time() + timeout
    while time.time() < deadline:
        task = next((t for t in src.tasks() if t.eval_id == task.eval_id), task)
        for row in src.samples(task, all_rows=True).samples:
            key = (row.sample_id, row.epoch)
            if row.status in ("pending", "queued") or key in streams:
                continue
            streams[key] = SampleStream(task, *key, types=types, tier="content")
            seen[key] = []
            pending_seen[key] = set()
            first_seen_at[key] = time.time()
        for key, stream in streams.items():
            if stream.done:
                continue
            try:
                item = stream.poll(src)
            except (BadResponse, SourceBusy):
                continue  # transient (a log read mid-write); the runner retries the same way
            seen[key].extend(item.events)
            pending_seen[key].update(stream.in_flight)
        if streams and all(s.done for s in streams.values()) and task.finished:
            break
        time.sleep(poll)
    return {"task": task, "events": seen, "pending": pending_seen, "first": first_seen_at}


def log_events(log_dir: Path) -> dict[tuple[str, int], list[dict[str, Any]]]:
    from inspect_ai.log import read_eval_log

    logs = sorted(log_dir.glob("*.eval"))
    assert len(logs) == 1
    log = read_eval_log(str(logs[0]))
    return {(str(s.id), s.epoch): [e.model_dump(mode="json") for e in s.events]
            for s in log.samples or []}


def test_live_events_equal_the_log(eval_runner: Any) -> None:
    proc = eval_runner("multi", "--max-samples", "2", "-T", "samples=5", "--ctl-server", "keep",
                       tool_delay=0.3)
    src = _source(proc)
    got = watch_all(src)
    proc.stop()
    expected = log_events(proc.log_dir)
    # every sample seen, including the three that could only start later
    assert set(got["events"]) == set(expected) == {(f"s{i}", 1) for i in range(5)}
    for key, events in got["events"].items():
        assert [e["uuid"] for e in events] == [e["uuid"] for e in expected[key]], key
        assert not any(e["pending"] for e in events)
    # samples s2.. started after s0/s1 finished their first turns
    assert max(got["first"].values()) - min(got["first"].values()) > 0.3
    src.close()


def test_pending_tool_event_reaches_consumer_once_completed(eval_runner: Any) -> None:
    proc = eval_runner("multi", "-T", "samples=1", "-T", "steps=3", "--ctl-server", "keep",
                       tool_delay=1.5)
    src = _source(proc)
    got = watch_all(src, poll=0.1, types=frozenset({"model", "tool"}))
    key = ("s0", 1)
    tools = [e for e in got["events"][key] if e["type"] == "tool"]
    uuids = [e["uuid"] for e in tools]
    # the stream saw tool events while they were pending ...
    assert set(uuids) & got["pending"][key]
    # ... and delivered each one exactly once, in its completed form
    assert len(uuids) == len(set(uuids)) == 4
    assert all(e["pending"] is False and e["result"].startswith("output of") for e in tools
               if e["function"] == "shell")
    src.close()


def test_http_and_cli_transports_give_the_same_events(eval_runner: Any) -> None:
    from watcher.sources.cli import CliSource

    proc = eval_runner("multi", "-T", "samples=1", "-T", "steps=2", "--ctl-server", "keep")
    src = _source(proc)
    task = _wait_task(src)
    deadline = time.time() + 90
    while time.time() < deadline and not next(t for t in src.tasks()
                                              if t.eval_id == task.eval_id).finished:
        time.sleep(0.2)

    def read(source: Any, t: TaskInfo) -> list[dict[str, Any]]:
        stream = SampleStream(t, "s0", 1, types=frozenset({"model", "tool"}), tier="content",
                              page_limit=7)
        events: list[dict[str, Any]] = []
        while not stream.done:
            events.extend(stream.poll(source).events)
        return events

    via_http = read(src, task)
    cli = CliSource()
    cli_task = next(t for t in cli.tasks() if t.eval_id == task.eval_id)
    via_cli = read(cli, cli_task)
    assert via_http and via_http == via_cli
    assert cli.calls >= 3  # it really paged through the subprocess
    src.close()
