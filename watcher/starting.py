"""Evals that are starting: an ``inspect eval`` process whose control channel is not up yet.

An eval process writes its discovery file only when its control server binds, several
seconds into start-up (about 6 s on a busy 2-core machine: Inspect imports, the task
loads, the model is resolved). A watch started at the same time as the eval finds
nothing to watch; it must say "no eval yet", not "no evals", and ``watch --wait
SECONDS`` waits for it.

An eval counts here when it is a process of the current user whose command line is
Inspect's ``eval``, ``eval-set`` or ``eval-retry`` (run as ``inspect`` or ``python -m
inspect_ai``), that would write its discovery file to the directory this watch reads
(its ``XDG_DATA_HOME``, as platformdirs resolves it), and that has not written one yet.
Linux only (``/proc``); elsewhere nothing is found, and the watch says "no evals" as
before. Nothing here signals or changes a process: it reads ``/proc``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from watcher.discovery import discovery_dir

PROC = Path("/proc")
# Inspect's commands that start an eval process (and so, a control server)
EVAL_COMMANDS = frozenset({"eval", "eval-set", "eval-retry"})
MAX_CMDLINE = 64 * 1024
MAX_ENVIRON = 1024 * 1024


@dataclass(frozen=True)
class StartingEval:
    """An eval process whose control channel is not up yet."""

    pid: int
    command: str  # eval | eval-set | eval-retry
    ctl_server_off: bool = False  # started with --ctl-server false: it never will be


def starting_evals(directory: Path | None = None, proc: Path = PROC) -> list[StartingEval]:
    """The current user's ``inspect eval`` processes that will write their discovery file
    to ``directory`` (this watch's) and have not yet, oldest first."""
    directory = directory or discovery_dir()
    try:
        entries = [p for p in proc.iterdir() if p.name.isdigit()]
    except OSError:
        return []
    uid = os.getuid()
    me = os.getpid()
    found: list[StartingEval] = []
    for entry in entries:
        pid = int(entry.name)
        if pid == me:
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            argv = _read(entry / "cmdline", MAX_CMDLINE).split(b"\0")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        command = _inspect_command([a.decode("utf-8", "replace") for a in argv if a])
        if command is None:
            continue
        if (directory / f"{pid}.json").exists():
            continue  # its control channel is up: the watch finds it
        try:
            env = _environ(entry)
        except OSError:
            continue
        if _control_dir(env) != directory.resolve():
            continue  # it writes where another watch (another XDG_DATA_HOME) reads
        args = [a.decode("utf-8", "replace") for a in argv if a]
        found.append(StartingEval(pid=pid, command=command,
                                  ctl_server_off=_ctl_server_off(args)))
    found.sort(key=lambda e: e.pid)
    return found


def _read(path: Path, cap: int) -> bytes:
    with path.open("rb") as fh:
        return fh.read(cap)


def _inspect_command(argv: list[str]) -> str | None:
    """``eval``, ``eval-set`` or ``eval-retry`` if ``argv`` runs that Inspect command
    (``inspect eval …``, ``python -m inspect_ai eval …``, ``python …/inspect eval …``)."""
    for i, arg in enumerate(argv[:4]):
        name = os.path.basename(arg)
        is_inspect = name == "inspect" or (
            arg in ("inspect_ai", "inspect_ai._cli.main") and i > 0 and argv[i - 1] == "-m")
        if is_inspect and i + 1 < len(argv) and argv[i + 1] in EVAL_COMMANDS:
            return argv[i + 1]
    return None


def _environ(entry: Path) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in _read(entry / "environ", MAX_ENVIRON).split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key in (b"XDG_DATA_HOME", b"HOME"):
            env[key.decode()] = value.decode("utf-8", "replace")
    return env


def _control_dir(env: dict[str, str]) -> Path | None:
    """Where the process will write its discovery file (platformdirs' user data dir on
    Linux: ``$XDG_DATA_HOME``, else ``~/.local/share``)."""
    data = env.get("XDG_DATA_HOME", "").strip()
    if not data:
        home = env.get("HOME")
        if not home:
            return None
        data = os.path.join(home, ".local", "share")
    return (Path(data).expanduser() / "inspect_ai" / "control").resolve()


def _ctl_server_off(args: list[str]) -> bool:
    for i, arg in enumerate(args):
        value = arg.split("=", 1)[1] if arg.startswith("--ctl-server=") else (
            args[i + 1] if arg == "--ctl-server" and i + 1 < len(args) else None)
        if value is not None and value.lower() in ("false", "off", "no", "0", "none"):
            return True
    return False
