"""Choosing what a watch reads, and adding it to the runner.

A log directory, recordings to replay, or ``inspect ctl`` (``--transport cli``) are
one source each, known at the start; a log directory with ``--follow`` is a live one
(:mod:`watcher.sources.shared`: new logs, and running evals on any machine through the
sample buffers they share beside their logs). Otherwise the watch reads live evals: every
control server that discovery finds (again each poll with ``--follow``) gets a
source of its own, chosen by ``--transport``: HTTP over the control socket, with
running samples' events read from the eval's sample buffer (``auto``, the
default), HTTP alone (``http``), or ``inspect ctl`` for a server that speaks a newer
control API than this watcher knows.

The state file remembers live tasks an earlier watch did not read to their end
(``open_evals``): if such an eval has exited since, its log is read for the rest
(:meth:`SourcePicker.resume_exited`), and what the state should remember now is
:meth:`SourcePicker.open_evals`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from watcher.discovery import ControlServer, list_servers
from watcher.limits import READ_TIMEOUT
from watcher.run.runner import Runner
from watcher.run.values import Selector
from watcher.shard import Shard
from watcher.sources.base import Source, TaskInfo
from watcher.state import WatchState

if TYPE_CHECKING:
    from watcher.sources.shared import SharedLogSource


class SourcePicker:
    """The sources of one watch. ``notice(kind, message)`` says what it decided."""

    def __init__(self, runner: Runner, state: WatchState, notice: Callable[[str, str], None],
                 *, log_dir: str | None = None, replay: list[str] | None = None,
                 transport: str = "auto", selector: Selector | None = None,
                 shard: Shard | None = None, follow: bool = False,
                 once: bool = False, read_timeout: float = READ_TIMEOUT) -> None:
        self.runner = runner
        self.state = state
        self.notice = notice
        self.log_dir = log_dir
        self.replay = list(replay or [])
        self.transport = transport
        self.read_timeout = read_timeout  # a control socket's per-read timeout
        self.selector = selector or Selector()
        self.shard = shard  # --shard K/N: only the logs of that share (watcher.shard)
        self.follow, self.once = follow, once
        # --log-dir --follow: the log directory as a live source (running evals' shared
        # sample buffers, and new logs as they come)
        self.shared: SharedLogSource | None = None
        self._follow_logs = bool(log_dir) and follow and not once
        # findings read from logs or recordings are about runs that are over
        self.live = not (log_dir or self.replay)
        self._known_pids: set[int] = set()
        self._skipped: set[str] = set()  # discovery files said to be skipped
        # runner keys of sources reading the logs of evals that exited since the last
        # watch (see resume_exited), and those evals' ids
        self.resumed: dict[str, list[str]] = {}
        self.resumed_evals: set[str] = set()

    def reads_live(self, eval_id: str) -> bool:
        """Whether the eval is read while it runs (not from a log it left)."""
        if self.shared is not None:
            return self.shared.running(eval_id)
        return self.live and eval_id not in self.resumed_evals

    def reads_remote(self, eval_id: str) -> bool:
        """Whether the eval runs elsewhere, read through its shared sample buffer (what
        can stop one of its samples must be done on the machine that runs it)."""
        return self.shared is not None and self.shared.running(eval_id)

    # -- the start -------------------------------------------------------------------

    def add_static(self) -> bool:
        """Add the one source the options name, if they name one (not live discovery)."""
        if self.log_dir and self._follow_logs:
            from watcher.sources.shared import SharedLogSource

            self.shared = SharedLogSource(self.log_dir, shard=self.shard)
            self.runner.add("logs", self.shared, f"log dir {self.log_dir}", forever=True)
            return True
        if self.log_dir:
            from watcher.sources.logfiles import LogSource

            self.runner.add("logs", LogSource(self.log_dir, shard=self.shard),
                            f"log dir {self.log_dir}")
            return True
        if self.replay:
            from watcher.sources.replay import ReplaySource

            self.runner.add("replay", ReplaySource(list(self.replay)), "replay")
            return True
        if self.transport == "cli":
            from watcher.sources.cli import CliSource

            self.runner.add("cli", CliSource(), "inspect ctl")
            return True
        return False

    # -- live evals --------------------------------------------------------------------

    def servers(self) -> list[ControlServer]:
        """The alive control servers; a discovery file skipped as not the user's alone is
        said once, as a ``discovery`` notice."""
        skipped: list[str] = []
        servers = list_servers(skipped=skipped)
        for message in skipped:
            if message not in self._skipped:
                self._skipped.add(message)
                self.notice("discovery", message)
        return servers

    def discover(self) -> None:
        """Add a source for every control server not seen before."""
        for server in self.servers():
            if server.pid in self._known_pids:
                continue
            self._known_pids.add(server.pid)
            if server.api_known and self.transport != "cli":
                from watcher.sources.http import HttpSource

                source: Source = HttpSource(server, timeout=self.read_timeout)
                if self.transport == "auto":
                    from watcher.sources.buffer import BufferedSource

                    source = BufferedSource(source)  # running samples' pages from the buffer
                self.runner.add(f"pid{server.pid}", source, f"pid {server.pid}", server=server)
            else:
                from watcher.sources.cli import CliSource

                self.notice("transport", f"pid {server.pid} speaks control API "
                            f"{server.api_version}, newer than this watcher knows; "
                            "reading it through `inspect ctl` instead (slower)")
                self.runner.add(f"pid{server.pid}", CliSource(pid=server.pid),
                                f"pid {server.pid} (cli)", server=server)

    # -- evals an earlier watch left unfinished ------------------------------------------

    def resume_exited(self) -> None:
        """Read, from their logs, the live tasks an earlier watch left unfinished whose eval
        has exited since (``watch --once`` called while an eval ran, then after it ended):
        their open findings end, and what happened after that watch is reported."""
        from watcher.sources.logfiles import LogSource

        alive = {s.pid for s in self.servers()}
        by_log: dict[str, list[str]] = {}
        for eval_id, entry in self.state.open_evals.items():
            log, pid = entry.get("log"), entry.get("pid")
            info = TaskInfo(eval_id=eval_id, task=str(entry.get("task") or ""),
                            task_id=str(entry.get("task_id") or ""), model="",
                            log_location=str(log) if log else None)
            if not log or (isinstance(pid, int) and pid in alive) or not (
                    self.selector.task_matches(info)):
                continue
            by_log.setdefault(str(log), []).append(eval_id)
        for i, (log, eval_ids) in enumerate(sorted(by_log.items())):
            key = f"exited{i}"
            self.resumed[key] = eval_ids
            self.resumed_evals.update(eval_ids)
            tasks = ", ".join(sorted({str(self.state.open_evals[e].get("task"))
                                      for e in eval_ids}))
            self.notice("process_exited", f"the eval of task {tasks} exited since the last "
                        f"watch; reading the rest of it from its log {log}")
            self.runner.add(key, LogSource(log), f"log {log}", once=True)

    def open_evals(self) -> dict[str, dict[str, Any]]:
        """What the state remembers of live tasks not read to their end: the earlier
        entries, less those read to their end (live, or from the log) in this watch."""
        out = dict(self.state.open_evals)
        for key, sw in list(self.runner.watchers.items()):
            if key in self.resumed:
                if sw.finished:  # the log is all there is: read once (or said unreadable)
                    for eval_id in self.resumed[key]:
                        out.pop(eval_id, None)
                continue
            if not self.live:
                continue
            for tw in list(sw.tasks.values()):
                t = tw.task
                if t.finished and t.eval_id and tw.read_to_end:
                    out.pop(t.eval_id, None)
                elif t.log_location:
                    out[t.eval_id] = {"log": t.log_location, "pid": t.pid, "task": t.task,
                                      "task_id": t.task_id}
        return out

    def remember_open_evals(self) -> None:
        """Before a save: the state's ``open_evals`` as of now (live watches, and watches
        that resumed exited evals, change it)."""
        if self.live or self.resumed:
            self.state.open_evals = self.open_evals()
