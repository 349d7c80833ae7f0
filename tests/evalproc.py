"""Start real ``inspect eval`` processes for end-to-end tests, and clean them up.

Each run gets its own ``XDG_DATA_HOME`` (so its control discovery directory is
private to the test), its own log directory, and is stopped with SIGINT (the
graceful path) and then SIGKILL if it lingers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = REPO / "tests" / "evals" / "scenarios.py"


@dataclass
class EvalProc:
    proc: subprocess.Popen[bytes]
    log_dir: Path
    data_home: Path
    output: Path

    @property
    def control_dir(self) -> Path:
        return self.data_home / "inspect_ai" / "control"

    def discovery(self, timeout: float = 60.0) -> dict[str, object]:
        """Wait for this process's discovery file and return it."""
        path = self.control_dir / f"{self.proc.pid}.json"
        deadline = time.time() + timeout
        while time.time() < deadline:
            if path.exists():
                try:
                    return dict(json.loads(path.read_text()))
                except ValueError:
                    pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"eval exited early:\n{self.output.read_text()[-3000:]}")
            time.sleep(0.1)
        raise TimeoutError("no discovery file")

    def wait(self, timeout: float = 180.0) -> int:
        return self.proc.wait(timeout)

    def logs(self) -> list[Path]:
        return sorted(self.log_dir.glob("*.eval")) + sorted(self.log_dir.glob("*.json"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def default_sigint() -> None:
    """``preexec_fn`` for a child the tests signal: SIGINT at its default action. When the
    suite itself runs in the background of a non-interactive shell SIGINT is ignored, and
    children inherit that (an eval would not stop gracefully, a watcher not at all)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def alive(pid: int) -> bool:
    """Whether a process of that pid exists (a zombie too: it has not been reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def start_eval(tmp: Path, task: str, *args: str, tool_delay: float = 0.05,
               data_home: Path | None = None, env: dict[str, str] | None = None,
               task_file: Path = SCENARIOS) -> EvalProc:
    """``inspect eval TASK_FILE@TASK ARGS`` in the background (the task names its model,
    ``inspect_watch_scripted/test``)."""
    data_home = data_home or tmp / "data"
    log_dir = tmp / "logs"
    data_home.mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, "XDG_DATA_HOME": str(data_home),
                "SCENARIO_TOOL_DELAY": str(tool_delay), "DEMO_TOOL_DELAY": str(tool_delay),
                "INSPECT_LOG_LEVEL": "warning", **(env or {})}
    output = tmp / f"eval-{task}-{time.time_ns()}.out"
    cmd = [sys.executable, "-m", "inspect_ai._cli.main", "eval", f"{task_file}@{task}",
           "--log-dir", str(log_dir), "--display", "none", *args]
    with output.open("wb") as fh:
        # ``stop`` uses Inspect's graceful path (SIGINT)
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=full_env,
                                stdin=subprocess.DEVNULL, cwd=tmp, preexec_fn=default_sigint)
    return EvalProc(proc, log_dir, data_home, output)
