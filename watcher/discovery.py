"""Find running eval processes from Inspect's control discovery files.

Each eval process writes ``<user data dir>/inspect_ai/control/<pid>.json``
(the directory ``inspect_ai._util.appdirs.inspect_data_dir("control")``
computes, via platformdirs). We read it without importing inspect_ai, never
create or chmod it (the watcher must not loosen its permissions), and skip
files whose pid is dead or whose JSON is malformed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from platformdirs import user_data_path

# The newest control-API version this watcher was written against.
KNOWN_API_VERSION = 8


@dataclass(frozen=True)
class ControlServer:
    """One running eval process's control endpoint."""

    pid: int
    socket_path: Path
    started_at: float
    api_version: int
    run_id: str | None = None
    eval_set_id: str | None = None

    @property
    def api_known(self) -> bool:
        """Whether this watcher speaks the server's API version over HTTP."""
        return self.api_version <= KNOWN_API_VERSION


def discovery_dir() -> Path:
    """The directory Inspect writes discovery files to (not created here)."""
    override = os.environ.get("INSPECT_WATCH_CONTROL_DIR")
    if override:
        return Path(override)
    return user_data_path("inspect_ai") / "control"


def pid_alive(pid: int) -> bool:
    """True if ``pid`` is a live process (signal 0 probe)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def list_servers(directory: Path | None = None) -> list[ControlServer]:
    """Alive control servers, most recently started first."""
    directory = directory or discovery_dir()
    found: list[ControlServer] = []
    try:
        entries = sorted(directory.glob("*.json"))
    except OSError:
        return []
    for path in entries:
        try:
            data = json.loads(path.read_text())
            pid = int(data["pid"])
            sock = Path(str(data["socket_path"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not pid_alive(pid):
            continue
        try:
            api_version = int(data.get("api_version", 0))
        except (TypeError, ValueError):
            api_version = 0
        try:
            started = float(data.get("started_at", 0.0))
        except (TypeError, ValueError):
            started = 0.0
        found.append(
            ControlServer(
                pid=pid, socket_path=sock, started_at=started, api_version=api_version,
                run_id=data.get("run_id") or None, eval_set_id=data.get("eval_set_id") or None,
            )
        )
    found.sort(key=lambda s: s.started_at, reverse=True)
    return found
