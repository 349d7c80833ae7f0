"""Small, hand-built ``.eval`` logs for hostile-input tests.

An ``.eval`` log is a zip of JSON documents; the watcher's fast path reads
``header.json``, ``summaries.json`` and ``samples/<id>_epoch_<n>.json``. These
helpers write just those, so a test can put exactly the damage it needs (invalid
JSON, deep nesting, attachment bombs, oversized entries) into one sample.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

STARTED = "2026-01-01T00:00:00+00:00"


def header(eval_id: str, task: str = "hostile") -> dict[str, Any]:
    return {"version": 2, "status": "success",
            "eval": {"eval_id": eval_id, "run_id": "run-" + eval_id, "task": task,
                     "task_id": "tid-" + eval_id, "model": "inspect_watch_scripted/test",
                     "created": STARTED},
            "stats": {"started_at": STARTED, "completed_at": STARTED}}


def summary(sample_id: str, epoch: int = 1) -> dict[str, Any]:
    return {"id": sample_id, "epoch": epoch, "input": "", "target": "", "completed": True,
            "started_at": STARTED, "completed_at": STARTED, "uuid": f"u-{sample_id}-{epoch}"}


def tool_event(n: int, arguments: Any, result: str = "ok") -> dict[str, Any]:
    return {"event": "tool", "uuid": f"ev-{n}", "span_id": "s1",
            "timestamp": f"2026-01-01T00:00:{n % 60:02d}+00:00", "id": f"call-{n}",
            "function": "bash", "arguments": arguments, "result": result}


def sample(sample_id: str, events: list[dict[str, Any]], epoch: int = 1,
           attachments: dict[str, str] | None = None) -> dict[str, Any]:
    return {"id": sample_id, "epoch": epoch, "uuid": f"u-{sample_id}-{epoch}",
            "events": events, "attachments": attachments or {}, "error_retries": []}


def repeat_events(n: int = 8) -> list[dict[str, Any]]:
    """The same tool call over and over: the built-in repeat rules find it."""
    return [tool_event(i, {"cmd": "cat /tmp/status"}, "same output") for i in range(n)]


def write_eval(path: Path, eval_id: str, samples: dict[str, bytes | dict[str, Any]], *,
               summaries: list[Any] | None = None) -> Path:
    """A finished ``.eval`` log at ``path`` holding ``samples`` (id -> JSON or raw bytes),
    with summaries made for them unless given."""
    if summaries is None:
        summaries = [summary(sid) for sid in samples]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("header.json", json.dumps(header(eval_id)))
        z.writestr("summaries.json", json.dumps(summaries))
        for sid, body in samples.items():
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            z.writestr(f"samples/{sid}_epoch_1.json", data)
    return path


def log_name(tag: str) -> str:
    """A file name Inspect's listing accepts."""
    return f"2026-01-01T00-00-00+00-00_{tag}_AAAAAAAAAAAAAAAAAAAAAA.eval"
