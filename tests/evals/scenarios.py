"""Real evals for end-to-end tests, driven by the scripted model (``inspect_watch_scripted/test``).

Each sample's input carries its script (see ``watcher/scripted.py``). Task
arguments (``-T``) pick the shape of the run; ``SCENARIO_TOOL_DELAY`` slows the
``shell`` tool so polls can catch tool events while they are pending.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

from inspect_ai import Task, task
from inspect_ai.agent import react
from inspect_ai.dataset import Sample
from inspect_ai.scorer import includes
from inspect_ai.tool import Tool, tool

from watcher.scripted import scripted_model

SUBMIT = {"tool": "submit", "args": {"answer": "42"}}


@tool
def shell() -> Tool:
    async def execute(cmd: str) -> str:
        """Run a shell command (simulated).

        Args:
            cmd: The command to run.
        """
        await asyncio.sleep(float(os.environ.get("SCENARIO_TOOL_DELAY", "0.05")))
        if cmd.startswith("fail"):
            raise RuntimeError(f"command failed: {cmd}")
        return f"output of {cmd}"

    return execute


# Inspect caches generate() results on disk across runs; a per-run nonce in the input
# keeps every run's model calls real (a cached turn would skip a scripted `raise`).
RUN = f"{os.getpid()}-{time.time_ns()}"


def sample(sample_id: str, steps: list[dict[str, Any]]) -> Sample:
    return Sample(id=sample_id,
                  input=f"Solve it (run {RUN}).\n<script>{json.dumps(steps)}</script>",
                  target="42")


def calls(*cmds: str) -> list[dict[str, Any]]:
    return [{"tool": "shell", "args": {"cmd": c}} for c in cmds]


@task
def multi(samples: int = 5, steps: int = 4) -> Task:
    """Several samples, distinct calls; run with --max-samples 2 so some start later."""
    return Task(
        dataset=[sample(f"s{i}", calls(*[f"echo {i}-{j}" for j in range(steps)]) + [SUBMIT])
                 for i in range(samples)],
        solver=react(tools=[shell()]), scorer=includes(), message_limit=60,
        model=scripted_model(),
    )


# what a hostile agent writes into a notification: escapes, bidi, a mention, markup, length
HOSTILE_TAIL = (" \x1b]0;pwned\x07\x1b[2J\x1b[31mRED\x1b[0m \u202eevil\u202c @channel "
                "<!here> <img src=x onerror=alert(1)> » fake end «\n## inspect-watch says: all "
                "clear\n" + "filler " * 60)


@task
def loops(hostile: bool = False) -> Task:
    """A repeated call, a submit loop and a clean sample (``hostile``: the submit loop's
    claims end in :data:`HOSTILE_TAIL`)."""
    claim = "My final answer is 42, submitting now." + (HOSTILE_TAIL if hostile else "")
    return Task(
        dataset=[
            sample("repeat", calls(*["cat /tmp/status"] * 5) + [SUBMIT]),
            sample("submit-loop", [{"text": claim}] * 4 + [SUBMIT]),
            sample("clean", calls("ls", "cat notes.txt", "python solve.py") + [SUBMIT]),
        ],
        solver=react(tools=[shell()]), scorer=includes(), message_limit=60,
        model=scripted_model(),
    )


@task
def flaky() -> Task:
    """A sample whose first generate fails once: with --retry-on-error it is retried."""
    return Task(
        dataset=[
            sample("flaky", calls("whoami") + [{"raise": "transient provider failure", "times": 1,
                                                "delay": 1.0,
                              "then": {"tool": "shell", "args": {"cmd": "ls"}}}]
                   + calls("cat a", "cat b") + [SUBMIT]),
            sample("steady", calls("pwd", "ls") + [SUBMIT]),
        ],
        solver=react(tools=[shell()]), scorer=includes(), message_limit=60,
        model=scripted_model(),
    )


@task
def slow(samples: int = 2, turns: int = 30) -> Task:
    """Long-running samples (for kill and stall tests)."""
    return Task(
        dataset=[sample(f"slow{i}", calls(*[f"step {i}-{j}" for j in range(turns)]) + [SUBMIT])
                 for i in range(samples)],
        solver=react(tools=[shell()]), scorer=includes(), message_limit=200,
        model=scripted_model(),
    )
