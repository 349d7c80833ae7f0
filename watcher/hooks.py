"""``--on-finding CMD``: run a user's command for each new or escalated finding.

The command gets the finding's JSON (schema 1) on stdin. It is set only on the
command line (never by a rule file: rules are data and cannot run anything),
runs without a shell, is time-limited, and a failure is reported on stderr and
never stops the watch.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from typing import Any

from watcher.findings import Finding, Notice


class CommandHook:
    """A sink that pipes each new or escalated finding to a command."""

    def __init__(self, command: str, timeout: float = 10.0) -> None:
        self.argv = shlex.split(command)
        self.timeout = timeout
        self.failures = 0
        self.runs = 0

    def start(self, context: Any) -> None:
        return None

    def finding(self, f: Finding) -> None:
        if f.status == "ended":
            return
        self.runs += 1
        try:
            proc = subprocess.run(self.argv, input=json.dumps(f.to_dict()) + "\n", text=True,
                                  capture_output=True, timeout=self.timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            self._failed(f"{type(e).__name__}: {e}")
            return
        if proc.returncode != 0:
            self._failed(f"exit {proc.returncode}")

    def _failed(self, why: str) -> None:
        self.failures += 1
        print(f"inspect-watch: --on-finding command failed ({why}); the watch goes on",
              file=sys.stderr)

    def notice(self, n: Notice) -> None:
        return None

    def status(self, snapshot: Any) -> None:
        return None

    def stop(self, summary: Any = None) -> None:
        return None
