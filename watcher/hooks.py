"""``--on-finding CMD``: run a user's command for each new or escalated finding.

The command gets the finding's JSON (schema 1) on stdin. It is set only on the
command line (never by a rule file: rules are data and cannot run anything),
runs without a shell, is time-limited, and a failure is reported on stderr and
never stops the watch.

Commands run one at a time on a worker thread (:class:`~watcher.alertqueue.AlertWorker`),
never on the thread that routes findings: a slow command delays only the commands
queued behind it, not the other outputs. What a full queue drops, and what is still
queued when the watch ends, is reported as an ``alert_dropped`` notice.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
from typing import Any

from watcher.alertqueue import HOOK_TIMEOUT, QUEUE_SIZE, AlertWorker
from watcher.findings import Finding, Notice

TIMEOUT = HOOK_TIMEOUT  # seconds one run of the command may take (--on-finding-timeout)


class CommandHook:
    """A sink that pipes each new or escalated finding to a command, off the watch's thread."""

    def __init__(self, command: str, timeout: float = TIMEOUT,
                 queue_size: int = QUEUE_SIZE) -> None:
        self.argv = shlex.split(command)
        self.timeout = timeout
        self.failures = 0
        self.runs = 0
        self._proc: subprocess.Popen[str] | None = None
        self._proc_lock = threading.Lock()
        self.worker: AlertWorker[str] = AlertWorker("--on-finding", self._run,
                                                    maxsize=queue_size, cancel=self._kill)

    def start(self, context: Any) -> None:
        return None

    def finding(self, f: Finding) -> None:
        if f.status == "ended":
            return
        self.worker.submit(json.dumps(f.to_dict()) + "\n")

    def _run(self, payload: str) -> None:
        self.runs += 1
        try:
            with self._proc_lock:
                # its own process group, so a timeout or the end of the watch stops what
                # the command started too (``sh -c 'sleep 30'``)
                self._proc = proc = subprocess.Popen(
                    self.argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL, text=True, start_new_session=True)
            try:
                proc.communicate(payload, timeout=self.timeout)
            except subprocess.TimeoutExpired:
                self._kill()
                proc.wait()
                self._failed(f"timed out after {self.timeout:g} s: --on-finding-timeout")
                return
            finally:
                with self._proc_lock:
                    self._proc = None
        except OSError as e:
            self._failed(f"{type(e).__name__}: {e}")
            return
        if proc.returncode != 0 and not (self.worker.closing and proc.returncode < 0):
            self._failed(f"exit {proc.returncode}")

    def _kill(self) -> None:
        """Stop the running command and its children (a timeout, or the watch's end)."""
        with self._proc_lock:
            proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()

    def _failed(self, why: str) -> None:
        self.failures += 1
        self.worker.count_failure()
        print(f"inspect-watch: --on-finding command failed ({why}); the watch goes on",
              file=sys.stderr)

    def pop_notices(self) -> list[Notice]:
        return self.worker.pop_notices()

    def drain(self, timeout: float) -> None:
        """The watch is ending: run what is queued for at most ``timeout`` seconds."""
        self.worker.close(timeout)

    def notice(self, n: Notice) -> None:
        return None

    takes_status = False  # (the watch builds no snapshot for it)

    def status(self, snapshot: Any) -> None:
        return None

    def stop(self, summary: Any = None) -> None:
        self.worker.close(0.0)  # normally drained by the watch already
