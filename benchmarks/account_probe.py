"""Thread CPU per watcher component, for ``bench_live_replay.py --account``.

Installed as the ``sitecustomize`` of the watcher processes only (a directory put
first on their ``PYTHONPATH``; the eval never imports it): it wraps the methods that
make up a watch's work with ``time.thread_time`` and, at exit, appends one JSON line
per process to the file ``IW_ACCOUNT`` names. Calls nest (a buffered read includes
the buffer reader's read), so rows are not to be summed. The wrapping itself costs
a few microseconds a call: the processes' CPU in an accounted run is not the
benchmark's figure.

A name that no longer exists is listed under ``missing`` instead of failing: the
accounting follows the code, and says when it lost a component.
"""

from __future__ import annotations

import atexit
import collections
import functools
import gc
import importlib
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

# (module, class, method, label): the components of a watch, live and post hoc
METHODS = [
    ("watcher.sources.buffer", "BufferedSource", "events", "buffered read (all paths)"),
    ("watcher.sources.buffer", "SampleBufferReader", "read", "  buffer reader read"),
    ("watcher.sources.buffer", "BufferedSource", "_first_page", "  first page from buffer"),
    ("watcher.sources.buffer", "BufferedSource", "_whole_over_http", "  whole over http"),
    ("watcher.sources.buffer", "BufferedSource", "moved_samples", "buffer tail (moved)"),
    ("watcher.sources.http", "HttpSource", "events", "control channel events"),
    ("watcher.sources.http", "HttpSource", "samples", "control channel listing"),
    ("watcher.sources.http", "HttpSource", "tasks", "control channel tasks"),
    ("watcher.sources.http", "HttpSource", "_get", "control channel requests (all)"),
    ("watcher.sources.logfiles.source", "LogSource", "events", "log read (decode, project)"),
    ("watcher.run.runner", "SourceWatcher", "_drain_from_log", "log drain after exit"),
    ("watcher.run.runner", "TaskWatcher", "cycle", "task cycle (all of a cycle)"),
    ("watcher.run.tracked", "TrackedSample", "apply", "  rules applied (apply)"),
    ("watcher.run.tracked", "TrackedSample", "tick", "  clock ticks"),
    ("watcher.run.router", "Router", "route", "router route (main thread)"),
    ("watcher.run.router", "Router", "flush", "router flush (main thread)"),
    ("watcher.run.sources", "SourcePicker", "discover", "discovery (main thread)"),
    # the buffer reader's statements, within its reads (the tail: within the reads that
    # start a view or end a sample, and within "buffer tail (moved)")
    ("watcher.sources.buffer", "SampleBufferReader", "_tail", "    reader: tail new rows"),
    ("watcher.sources.buffer", "SampleBufferReader", "_tail_pool_rows",
     "      of which message pool rows"),
    ("watcher.sources.buffer", "SampleBufferReader", "_tail_attachment_rows",
     "      of which attachment rows"),
    ("watcher.sources.buffer", "SampleBufferReader", "_ends", "    reader: ends (summaries)"),
    ("watcher.sources.buffer", "SampleBufferReader", "_still_there",
     "    reader: rows not replaced (one)"),
    ("watcher.sources.buffer", "SampleBufferReader", "_views_intact",
     "    reader: rows not replaced (batch)"),
    ("watcher.sources.buffer", "SampleBufferReader", "_status", "    reader: sample status"),
    ("watcher.sources.buffer", "SampleBufferReader", "_prompts", "    reader: prompts"),
    ("watcher.sources.buffer", "SampleBufferReader", "_attachments",
     "    reader: attachments"),
    ("watcher.sources.buffer", "SampleBufferReader", "_load", "    reader: view loaded"),
]

stats: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
missing: list[str] = []


def probe_dir(directory: Path) -> Path:
    """``directory`` made into the watcher's ``sitecustomize`` (this module beside one
    that installs it): put it first on the watcher processes' ``PYTHONPATH``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "account_probe.py").write_text(Path(__file__).read_text())
    (directory / "sitecustomize.py").write_text("import account_probe\n"
                                                "account_probe.install()\n")
    return directory


def _add(label: str, seconds: float) -> None:
    s = stats[label]
    s[0] += 1
    s[1] += seconds


def _wrap(cls: Any, name: str, label: str) -> None:
    orig = getattr(cls, name)

    @functools.wraps(orig)
    def timed(*a: Any, **k: Any) -> Any:
        t = time.thread_time()
        try:
            return orig(*a, **k)
        finally:
            _add(label, time.thread_time() - t)

    setattr(cls, name, timed)


class _FeedTimer:
    """A sample's rule state (a compiled class, not patchable) behind a timing proxy."""

    __slots__ = ("_w",)

    def __init__(self, w: Any) -> None:
        self._w = w

    def feed(self, e: Any) -> Any:
        t = time.thread_time()
        try:
            return self._w.feed(e)
        finally:
            _add(f"    engine feed: {e.get('type')} events", time.thread_time() - t)

    def __getattr__(self, k: str) -> Any:
        return getattr(self._w, k)


def _install() -> None:
    for module, cls_name, method, label in METHODS:
        try:
            _wrap(getattr(importlib.import_module(module), cls_name), method, label)
        except (ImportError, AttributeError):
            missing.append(f"{module}.{cls_name}.{method}")
    try:
        from watcher.run import tracked

        opened = tracked.TrackedSample._open_watch
        setattr(tracked.TrackedSample, "_open_watch",  # noqa: B010 - a proxy, not the type
                lambda self: _FeedTimer(opened(self)))
    except (ImportError, AttributeError):
        missing.append("watcher.run.tracked.TrackedSample._open_watch")
    run = threading.Thread.run

    def counted(self: threading.Thread) -> None:
        try:
            run(self)
        finally:
            _add(f"thread: {self.name.split('-')[0].split('_')[0]}", time.thread_time())

    threading.Thread.run = counted  # type: ignore[method-assign]
    started: list[float] = []

    def collected(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[:] = [time.perf_counter()]
        elif started:
            _add(f"gc: generation {info['generation']}", time.perf_counter() - started[0])

    gc.callbacks.append(collected)


def _dump(out: str) -> None:
    _add("thread: main", time.thread_time())
    with open(out, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"argv": sys.argv[1:], "cpu": time.process_time(),
                             "stats": stats, "missing": missing}) + "\n")


def install() -> None:
    """Wrap and register the dump, if ``IW_ACCOUNT`` names the output file."""
    out = os.environ.get("IW_ACCOUNT")
    if not out:
        return
    _install()
    atexit.register(_dump, out)


def table(live: dict[str, Any], post: dict[str, Any]) -> str:
    """The two processes' components side by side (calls, CPU seconds)."""
    order = [label for *_, label in METHODS]
    names = [n for n in order if n in live["stats"] or n in post["stats"]]
    names += sorted(n for n in set(live["stats"]) | set(post["stats"])
                    if n not in order)
    lines = [f"{'component (thread CPU; rows nest)':40}{'live n':>8}{'CPU s':>8}"
             f"{'post n':>8}{'CPU s':>8}"]
    for n in names:
        a = live["stats"].get(n, [0, 0.0])
        b = post["stats"].get(n, [0, 0.0])
        lines.append(f"{n:40}{a[0]:8d}{a[1]:8.3f}{b[0]:8d}{b[1]:8.3f}")
    lines.append(f"{'process CPU (accounted run)':40}{'':8}{live['cpu']:8.2f}{'':8}"
                 f"{post['cpu']:8.2f}")
    lost = sorted(set(live.get("missing", [])) | set(post.get("missing", [])))
    if lost:
        lines.append("not found, not accounted: " + ", ".join(lost))
    return "\n".join(lines)
