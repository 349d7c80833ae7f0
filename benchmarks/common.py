"""Shared helpers for the benchmark scripts: machine info, evals, synthetic events.

Benchmarks print figures; they assert nothing about speed. Run them from the repo
root (``python benchmarks/bench_engine.py``); this module puts the repo on
``sys.path`` so ``tests.evalproc`` (real ``inspect eval`` processes driven by the
scripted model) can be reused.
"""

from __future__ import annotations

import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.evalproc import EvalProc, start_eval  # noqa: E402

# the shared corpus of real logs, and its 375 SWE-bench runs (the scans' common log)
CORPUS = Path(os.environ.get("INSPECT_WATCH_CORPUS", "/work/shared/corpus/inspect"))
SWE = CORPUS / "mswe-gemini3pro-swebench-replay.eval"

__all__ = ["REPO", "CORPUS", "SWE", "EvalProc", "start_eval", "banner", "children_cpu",
           "percentile", "synthetic_events", "write_task_file", "wait_running", "watch_cmd",
           "fmt_rate"]


# the floor of a post-hoc scan: a process that opens the ``.eval`` and decodes every
# sample's JSON with orjson (argv[1] the log), printing the number of events
FLOOR = """
import sys, zipfile
import orjson, zipfile_zstd  # noqa: F401
z = zipfile.ZipFile(sys.argv[1])
n = 0
for name in z.namelist():
    if name.startswith("samples/"):
        n += len(orjson.loads(z.read(name))["events"])
print(n)
"""


def banner(name: str) -> None:
    """What every benchmark prints first: the machine it ran on."""
    print(f"== {name} ==")
    print(f"cpus: {os.cpu_count()}  python: {platform.python_version()}  "
          f"platform: {platform.platform()}")
    try:
        import inspect_ai

        print(f"inspect_ai: {inspect_ai.__version__}")
    except Exception:  # noqa: BLE001 - informational only
        pass
    load = os.getloadavg()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
          "(shared machine: figures vary with other work)")


def children_cpu() -> float:
    """User + system CPU seconds of every waited-for child process so far."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))
    return s[k]


def fmt_rate(n: float, seconds: float, unit: str) -> str:
    return f"{n / seconds:,.0f} {unit}/s" if seconds > 0 else "inf"


# -- synthetic transcripts ------------------------------------------------------

_WORDS = ("the file tests output value error python solve config data result check "
          "import return def class self print open read write path list dict json "
          "expected actual failed passed module function line").split()
_CMDS = ["ls -la", "cat notes.txt", "python solve.py", "pytest -x -q", "grep -rn TODO src/",
         "git diff", "pip install -e .", "cat /tmp/status", "make test", "sed -n 1,80p main.py"]


def _prose(rng: random.Random, n_chars: int) -> str:
    out: list[str] = []
    size = 0
    while size < n_chars:
        w = rng.choice(_WORDS)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n_chars]


def _code(rng: random.Random, n_chars: int) -> str:
    lines: list[str] = []
    size = 0
    while size < n_chars:
        line = f"    {rng.choice(_WORDS)}_{rng.randrange(100)} = {rng.choice(_WORDS)}(" \
               f"{rng.randrange(1000)})"
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)[:n_chars]


def synthetic_events(n: int, seed: int = 0, *, repeat_every: int = 40,
                     start: float = 1_700_000_000.0) -> list[dict[str, Any]]:
    """``n`` raw (log-shaped) events: model turns and tool calls, some repeated.

    Tool arguments are 100-2000 characters (commands, or files written with
    code), results up to ~2000 characters; every ``repeat_every`` calls the agent
    repeats one call a few times (what the repeat rules look for), and some turns
    are text-only (what the submit/narration rules look for).
    """
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    t = start
    i = 0
    repeat_left = 0
    repeat_args: dict[str, Any] = {}
    calls = 0
    while len(out) < n:
        t += rng.uniform(0.05, 3.0)
        i += 1
        text_turn = rng.random() < 0.08
        completion = _prose(rng, rng.randint(40, 600))
        if text_turn and rng.random() < 0.3:
            completion = "My final answer is 42, submitting now. " + completion
        model_ev = {
            "event": "model", "uuid": f"m{i}", "span_id": "s", "timestamp": t,
            "pending": False, "model": "inspect_watch_scripted/test", "input": [], "tools": [],
            "output": {"model": "inspect_watch_scripted/test", "stop_reason": "stop" if text_turn
                       else "tool_calls", "completion": completion,
                       "usage": {"total_tokens": rng.randint(500, 9000)},
                       "choices": [{"message": {"role": "assistant", "content": completion,
                                                "tool_calls": None}}]},
            "error": None,
        }
        out.append(model_ev)
        if text_turn or len(out) >= n:
            continue
        calls += 1
        if repeat_left == 0 and calls % repeat_every == 0:
            repeat_left = rng.randint(3, 6)
            repeat_args = {"cmd": rng.choice(_CMDS)}
        if repeat_left:
            repeat_left -= 1
            fn, args = "bash", dict(repeat_args)
            result = "ok"
        elif rng.random() < 0.3:
            fn = "write_file"
            args = {"path": f"src/{rng.choice(_WORDS)}.py", "content": _code(
                rng, rng.randint(100, 2000))}
            result = "written"
        else:
            fn = "bash"
            args = {"cmd": f"{rng.choice(_CMDS)} {_prose(rng, rng.randint(60, 400))}"}
            result = _code(rng, rng.randint(20, 2000))
        failed = rng.random() < 0.05
        t += rng.uniform(0.05, 2.0)
        out.append({
            "event": "tool", "type": "function", "uuid": f"t{i}", "span_id": "s",
            "timestamp": t, "pending": False, "id": f"call{i}", "function": fn,
            "arguments": args, "result": "" if failed else result,
            "error": {"type": "unknown", "message": "command failed"} if failed else None,
        })
    return out[:n]


# -- real evals --------------------------------------------------------------------


def write_task_file(directory: Path, *, samples: int, turns: int, repeat_every: int = 0,
                    tool_delay_env: str = "SCENARIO_TOOL_DELAY",
                    repeat_at: int | None = None, jitter: float = 0.0) -> Path:
    """A task file with ``samples`` scripted samples of ``turns`` tool calls each.

    Every ``repeat_every``-th sample (0: none) repeats one call five times, so the
    built-in repeat rule has something to find: after call ``repeat_at`` (default:
    after the last one). ``jitter`` spreads each call's delay uniformly over
    ``delay * (1 ± jitter)`` (seeded by the call, so runs repeat): real tool and model
    latencies vary, and without it every sample stays in lock-step with every other.
    """
    at = turns if repeat_at is None else max(0, min(repeat_at, turns))
    src = f'''
import asyncio, json, os, random
from inspect_ai import Task, task
from inspect_ai.agent import react
from inspect_ai.dataset import Sample
from inspect_ai.scorer import includes
from inspect_ai.tool import Tool, tool
from watcher.scripted import scripted_model

@tool
def shell() -> Tool:
    async def execute(cmd: str) -> str:
        """Run a shell command (simulated).

        Args:
            cmd: The command to run.
        """
        if not cmd.startswith("cat /tmp/status"):  # repeats complete at once: clean latency
            delay = float(os.environ.get("{tool_delay_env}", "0.05"))
            spread = 1 + {jitter} * (2 * random.Random(cmd).random() - 1)
            await asyncio.sleep(delay * spread)
        return f"output of {{cmd}}"
    return execute

def steps(i):
    out = [{{"tool": "shell", "args": {{"cmd": f"echo {{i}}-{{j}}"}}}} for j in range({turns})]
    if {repeat_every} and i % {repeat_every} == 0:
        out[{at}:{at}] = [{{"tool": "shell", "args": {{"cmd": "cat /tmp/status"}}}}] * 5
    return out + [{{"tool": "submit", "args": {{"answer": "42"}}}}]

@task
def bench():
    return Task(
        dataset=[Sample(id=f"b{{i}}", target="42",
                        input="Solve.\\n<script>" + json.dumps(steps(i)) + "</script>")
                 for i in range({samples})],
        solver=react(tools=[shell()]), scorer=includes(), message_limit={turns * 2 + 40},
        model=scripted_model(),
    )
'''
    path = directory / "bench_task.py"
    path.write_text(src)
    return path


def wait_running(proc: EvalProc, timeout: float = 120.0) -> dict[str, Any]:
    """Wait until the eval's control server answers and a sample is running."""
    from watcher.discovery import list_servers
    from watcher.sources.http import HttpSource

    proc.discovery(timeout)
    server = next(s for s in list_servers(proc.control_dir) if s.pid == proc.proc.pid)
    src = HttpSource(server)
    deadline = time.time() + timeout
    try:
        while time.time() < deadline:
            tasks = src.tasks()
            if tasks:
                rows = src.samples(tasks[0], all_rows=True).samples
                if any(r.status == "running" for r in rows):
                    return {"server": server, "task": tasks[0], "rows": rows}
            time.sleep(0.2)
    finally:
        src.close()
    raise TimeoutError("no running sample")


def watch_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "watcher", *args]


def tmpdir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))


def dump(obj: Any) -> str:
    return json.dumps(obj, default=str)


def run_quiet(cmd: list[str], env: dict[str, str] | None = None,
              timeout: float = 3600, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout,
                          stdin=subprocess.DEVNULL, cwd=cwd)
