"""Launched runs, what became of them, and releasing finished kept-alive evals.

``inspect-watch launch`` (:mod:`watcher.launch`) writes one JSON record per run it
started (:class:`LaunchRecord`, in :func:`records_dir`): the exact command, its working
directory, the log dir, the tmux session (or ``headless``) and the eval's pid. This
module reads them back and says what each run is now (:func:`run_status`): ``running``,
``finished, kept alive`` (the eval is over and its process is parked by
``--ctl-server=keep`` until released), ``finished`` (over, not parked: it is exiting), or
``gone`` (the process has exited).

Releasing is the ``release`` route of the eval's control socket, the route behind ``inspect
ctl process release``: a parked process exits; one still running will exit when its
eval is done (releasing never cancels it). :func:`release_finished` releases every
finished kept-alive process (running ones are left alone), and :class:`ReleaseWhenDone`
does it from inside a watch (``watch --release-when-done``) for each eval the watch has
read to its end. Nothing here imports inspect_ai.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from platformdirs import user_state_path

from watcher.discovery import ControlServer, list_servers, pid_alive
from watcher.findings import Finding, Notice
from watcher.sources.base import SourceError, TaskInfo

RELEASE_WAIT = 15.0  # seconds a release waits for the process to exit


def records_dir() -> Path:
    """Where launch records are kept (``INSPECT_WATCH_LAUNCHES``, else the user's state
    directory: ``~/.local/state/inspect-watch/launches`` on Linux)."""
    override = os.environ.get("INSPECT_WATCH_LAUNCHES")
    if override:
        return Path(override)
    return user_state_path("inspect-watch") / "launches"


@dataclass
class LaunchRecord:
    """One run ``inspect-watch launch`` started: enough to find it and to run it again."""

    id: str  # the record's name: <session>-<YYYYmmdd-HHMMSS>
    session: str  # the tmux session name (headless runs have a name too)
    mode: str  # "tmux" | "headless"
    command: list[str]  # what ran, with what launch added (the keep-alive flag, a log dir)
    given: list[str]  # what the user typed after `--`
    cwd: str
    log_dir: str  # absolute
    pid: int | None = None  # the eval process (the one that serves the control socket)
    started_at: float = 0.0
    tmux_socket: str | None = None  # tmux -L NAME, if not the default server
    keep: str | None = None  # the flag that keeps the control surface alive, if any
    output_file: str | None = None  # headless: where the process writes its output
    added: list[str] = field(default_factory=list)  # what launch added, in words

    @property
    def path(self) -> Path:
        return records_dir() / f"{self.id}.json"

    @property
    def exit_file(self) -> Path:
        """Where a tmux run's command leaves its exit code when it ends."""
        return records_dir() / f"{self.id}.exit"

    def save(self) -> None:
        d = records_dir()
        d.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.replace(self.path)

    @classmethod
    def load(cls, path: Path) -> LaunchRecord:
        data = json.loads(path.read_text())
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})

    def tmux(self) -> list[str]:
        """The tmux command line for this run's server."""
        return ["tmux", *(["-L", self.tmux_socket] if self.tmux_socket else [])]

    def exit_code(self) -> int | None:
        try:
            return int(self.exit_file.read_text().strip())
        except (OSError, ValueError):
            return None


def load_records() -> list[LaunchRecord]:
    """Every launch record, newest first (unreadable ones are skipped)."""
    out = []
    d = records_dir()
    if not d.is_dir():
        return []
    for path in d.glob("*.json"):
        try:
            out.append(LaunchRecord.load(path))
        except (OSError, ValueError, TypeError):
            continue
    out.sort(key=lambda r: r.started_at, reverse=True)
    return out


def find_record(key: str) -> LaunchRecord:
    """The newest record whose id, session name or pid is ``key``; ``KeyError``."""
    for r in load_records():
        if key in (r.id, r.session) or key == str(r.pid):
            return r
    raise KeyError(key)


# -- what a process is now --------------------------------------------------------------


@dataclass(frozen=True)
class ProcessState:
    """An eval process as its control socket shows it."""

    server: ControlServer
    tasks: tuple[TaskInfo, ...] = ()
    error: str | None = None  # the socket could not be read

    @property
    def finished(self) -> bool:
        """Every task it hosts is over (and it hosts one)."""
        return bool(self.tasks) and all(t.finished for t in self.tasks)

    @property
    def kept_alive(self) -> bool:
        return any(bool(t.raw.get("keep_alive")) for t in self.tasks)

    @property
    def status(self) -> str:
        if self.error is not None:
            return "running (control socket unreadable)"
        if self.finished:
            return "finished, kept alive" if self.kept_alive else "finished"
        return "running"


def process_state(server: ControlServer) -> ProcessState:
    from watcher.sources.http import HttpSource

    src = HttpSource(server, retries=1, timeout=5.0)
    try:
        return ProcessState(server, tuple(src.tasks()))
    except SourceError as e:
        return ProcessState(server, error=str(e))
    finally:
        src.close()


def processes() -> list[ProcessState]:
    """Every eval process discovery finds, as its control socket shows it."""
    return [process_state(s) for s in list_servers()]


@dataclass(frozen=True)
class RunStatus:
    record: LaunchRecord
    status: str  # running | finished, kept alive | finished | gone | starting
    tasks: tuple[TaskInfo, ...] = ()
    session_open: bool | None = None  # tmux runs: whether the session still exists
    exit_code: int | None = None


def tmux_session_open(record: LaunchRecord) -> bool | None:
    """Whether the record's tmux session exists (``None``: not a tmux run, or no tmux)."""
    if record.mode != "tmux" or shutil.which("tmux") is None:
        return None
    res = subprocess.run([*record.tmux(), "has-session", "-t", f"={record.session}"],
                         capture_output=True, timeout=30, check=False)
    return res.returncode == 0


def run_status(record: LaunchRecord, servers: Sequence[ControlServer] | None = None
               ) -> RunStatus:
    """What a launched run is now."""
    session = tmux_session_open(record)
    if record.pid is None or not pid_alive(record.pid):
        return RunStatus(record, "gone", session_open=session, exit_code=record.exit_code())
    servers = list_servers() if servers is None else servers
    server = next((s for s in servers if s.pid == record.pid), None)
    if server is None:
        return RunStatus(record, "running (no control endpoint)", session_open=session)
    state = process_state(server)
    return RunStatus(record, state.status, state.tasks, session_open=session)


# -- releasing --------------------------------------------------------------------------


@dataclass(frozen=True)
class Released:
    """What became of one release: the server's answer, and whether the process exited."""

    pid: int
    ok: bool
    message: str
    exited: bool = False
    was_finished: bool = True


def release(server: ControlServer, *, wait: float = RELEASE_WAIT,
            finished: bool = True) -> Released:
    """Release one eval process (:meth:`ControlClient.release`); wait up to ``wait`` s
    for a parked one (``finished``) to exit. Never cancels anything: a running eval exits
    when done."""
    from watcher.act.control import ControlClient
    from watcher.sources.http import HttpSource

    src = HttpSource(server, retries=2)
    try:
        answer = ControlClient(src).release()
    except SourceError as e:
        return Released(server.pid, False, f"pid {server.pid}: the release could not be "
                        f"sent ({e})", was_finished=finished)
    finally:
        src.close()
    if answer.route_missing:
        return Released(server.pid, False, f"pid {server.pid}: this Inspect has no release "
                        "route (older than keep-alive support)", was_finished=finished)
    if not answer.ok:
        return Released(server.pid, False, f"pid {server.pid}: the server refused the "
                        f"release (HTTP {answer.status})", was_finished=finished)
    if not finished:
        return Released(server.pid, True, f"pid {server.pid}: released while its eval is "
                        "still running: it will exit when the eval is done (nothing was "
                        "cancelled)", was_finished=False)
    deadline = time.monotonic() + wait
    while pid_alive(server.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    exited = not pid_alive(server.pid)
    return Released(server.pid, True, f"pid {server.pid}: released; " + (
        "it has exited" if exited else f"it has not exited yet after {wait:g} s"),
        exited=exited)


def release_finished(pid: int | None = None, *, dry_run: bool = False,
                     wait: float = RELEASE_WAIT) -> tuple[list[Released], list[ProcessState]]:
    """Release every finished kept-alive process (or the one with ``pid``, finished or
    not). Returns what was released (or, with ``dry_run``, would be) and the processes
    left alone."""
    done: list[Released] = []
    left: list[ProcessState] = []
    for state in processes():
        chosen = state.server.pid == pid if pid is not None else (
            state.finished and state.kept_alive)
        if not chosen:
            left.append(state)
            continue
        if dry_run:
            done.append(Released(state.server.pid, True, f"pid {state.server.pid}: would be "
                                 "released (--dry-run: nothing was sent)",
                                 was_finished=state.finished))
            continue
        done.append(release(state.server, wait=wait, finished=state.finished))
    return done, left


class ReleaseWhenDone:
    """``watch --release-when-done``: a decider that releases each live eval process
    the watch has read to its end once every task it hosts is over. It acts on no
    finding; on each turn of the watch it looks at the runner (``watch`` is set by
    whoever builds the watch): a process is released once every task it hosts is over
    and read to its end (while the watch waits to see whether more tasks come), and
    waited for as the watch ends. Its records are ``released`` notices."""

    def __init__(self, wait: float = RELEASE_WAIT) -> None:
        self.watch: Any = None
        self.wait = wait
        self.released: dict[int, Released] = {}
        self._notices: list[Notice] = []

    def decide(self, finding: Finding, origin: Any) -> list[Notice]:
        return []

    def pop_notices(self) -> list[Notice]:
        self._check(final=False)
        out, self._notices = self._notices, []
        return out

    def drain(self, timeout: float) -> None:
        """The watch is ending: release what it read to the end, and wait (a while) for
        every process released to exit, so that the watch ends with nothing parked."""
        self._check(final=True)
        deadline = time.monotonic() + self.wait
        waiting = [r.pid for r in self.released.values() if r.ok and not r.exited]
        while waiting and time.monotonic() < deadline:
            time.sleep(0.1)
            waiting = [pid for pid in waiting if pid_alive(pid)]
        for pid in waiting:
            text = f"pid {pid} was released but has not exited after {self.wait:g} s"
            self._notices.append(Notice(kind="released", at=time.time(), message=text,
                                        details={"pid": pid, "ok": True, "exited": False}))
            import click

            click.echo(f"inspect-watch: {text}", err=True)

    def _check(self, final: bool) -> None:
        runner = getattr(self.watch, "runner", None)
        if runner is None:
            return
        for key, origin in list(runner.origins.items()):
            server = origin.server
            if server is None or server.pid in self.released:
                continue
            sw = runner.watchers.get(key)
            tasks = list(sw.tasks.values()) if sw is not None else []
            # every task over and read to its end (a watch stopped earlier releases
            # nothing), in a process that parks (one that does not exits on its own)
            if not tasks or not all(tw.finished for tw in tasks) or not any(
                    tw.task.raw.get("keep_alive") for tw in tasks) or not pid_alive(
                    server.pid):
                continue
            r = release(server, wait=0.0)  # its exit is waited for at the end
            self.released[server.pid] = r
            from watcher.sanitize import visible_text

            names = ", ".join(sorted({visible_text(tw.task.task, 80) for tw in tasks}))
            text = (f"released pid {server.pid} ({names}): its evals finished and were read "
                    "to the end" if r.ok else f"could not release pid {server.pid} ({names}): "
                    f"{r.message}")
            self._notices.append(Notice(kind="released", message=text, at=time.time(),
                                        details={"pid": server.pid, "ok": r.ok}))
            if final:  # (said this late, a notice reaches the summary, not the stream)
                import click

                click.echo(f"inspect-watch: {text}", err=True)
