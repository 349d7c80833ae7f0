"""The ``inspect ctl … --json`` subprocess source.

The fallback for a control server whose ``api_version`` this watcher does not
know (the CLI that ships with the eval's Inspect does), and ``--transport
cli``. It serves the same events as :mod:`watcher.sources.http` but each call
is a new Python process (over a second of CPU), so it is for a few samples,
not a fleet.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from typing import Any

from watcher.events import Tier
from watcher.sources.base import (
    BadResponse,
    EventPage,
    NotFound,
    ProcessGone,
    SampleListing,
    Source,
    SourceBusy,
    TaskInfo,
    sample_row,
)
from watcher.sources.http import event_page, task_info


def inspect_command() -> list[str]:
    """How to run ``inspect``: the console script if on PATH, else ``python -m``."""
    exe = shutil.which("inspect")
    return [exe] if exe else [sys.executable, "-m", "inspect_ai._cli.main"]


class CliSource(Source):
    """Every running eval, through ``inspect ctl`` subprocesses."""

    name = "cli"
    live = True

    def __init__(self, *, timeout: float = 60.0, pid: int | None = None) -> None:
        self.timeout = timeout
        self.pid = pid
        self.calls = 0

    def _run(self, args: list[str]) -> Any:
        self.calls += 1
        cmd = [*inspect_command(), "ctl", *args, "--json"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            raise SourceBusy(f"inspect ctl {' '.join(args[:2])} timed out") from e
        except OSError as e:
            raise ProcessGone(f"cannot run inspect ctl: {e}") from e
        try:
            body = json.loads(proc.stdout) if proc.stdout.strip() else None
        except ValueError as e:
            raise BadResponse(f"inspect ctl {' '.join(args[:2])}: malformed JSON ({e})") from e
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            err = body["error"]
            message = str(err.get("message") or err)
            if err.get("status") == 404 or "not found" in message.lower():
                raise NotFound(message)
            raise BadResponse(f"inspect ctl: {message}")
        if proc.returncode != 0:
            raise BadResponse(f"inspect ctl exited {proc.returncode}: {proc.stderr[-300:]}")
        return body

    def tasks(self) -> list[TaskInfo]:
        body = self._run(["task", "list"])
        rows = body.get("tasks") if isinstance(body, dict) else body
        if not isinstance(rows, list):
            raise BadResponse("inspect ctl task list: no task rows")
        out = [task_info(r, r.get("pid")) for r in rows if isinstance(r, dict)]
        return [t for t in out if self.pid is None or t.pid in (None, self.pid)]

    def samples(self, task: TaskInfo, active_since: float | None = None,
                all_rows: bool = False) -> SampleListing:
        args = ["sample", "list", task.task_id or task.eval_id, "--all"]
        if active_since is not None:
            args += ["--active-since", repr(active_since)]
        body = self._run(args)
        if not isinstance(body, dict) or not isinstance(body.get("samples"), list):
            raise BadResponse("inspect ctl sample list: malformed listing")
        rows = [r for r in body["samples"] if isinstance(r, dict)]
        if task.eval_id:
            rows = [r for r in rows if r.get("eval_id") in (None, task.eval_id)]
        return SampleListing(as_of=float(body.get("as_of") or 0.0),
                             samples=[sample_row(r) for r in rows],
                             truncated=bool(body.get("truncated")))

    def events(self, task: TaskInfo, sample_id: str, epoch: int, *, since: str | None,
               types: frozenset[str] | None, tier: Tier, limit: int = 500) -> EventPage:
        args = ["sample", "events", task.task_id or task.eval_id, sample_id, str(epoch),
                "--limit", str(limit), "--type", ",".join(sorted(types)) if types else "all"]
        args += ["--cursor", since] if since else ["--from-start"]
        if tier == "content":
            args.append("--content")
        elif tier == "full":
            args.append("--full")
        return event_page(self._run(args), "inspect ctl sample events")

    def close(self) -> None:
        return None
