"""Real evals with a pace of their own, for the stall rule that learns it (``learn:``).

Driven by the scripted model (``watcher/scripted.py``): each step's ``delay`` is how
long that generation takes. ``build`` is a tool whose call takes the ``seconds`` it is
given, as a sandboxed build or test run would.

- ``quick_hang``: a quick task (generations of ``gen`` seconds) where one sample's
  generation hangs at turn ``hang_turn`` (an hour: only the end of the eval stops it).
- ``slow_tools``: an agentic task whose tool calls are long but normal (``seconds``
  each, +-``spread``), and whose generations are quick.
- ``slow_first``: a task whose first generations are the slow ones (``first``
  seconds), then quick ones: too little is known of its pace while they run.
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
# a per-run nonce keeps Inspect's generate cache from answering a turn (see scenarios.py)
RUN = f"{os.getpid()}-{time.time_ns()}"


@tool
def build() -> Tool:
    async def execute(target: str, seconds: float) -> str:
        """Build a target (simulated: takes the seconds given).

        Args:
            target: What to build.
            seconds: How long the build takes.
        """
        await asyncio.sleep(float(seconds))
        return f"built {target}"

    return execute


@tool
def shell() -> Tool:
    async def execute(cmd: str) -> str:
        """Run a shell command (simulated, quick).

        Args:
            cmd: The command to run.
        """
        await asyncio.sleep(0.05)
        return f"output of {cmd}"

    return execute


def sample(sample_id: str, steps: list[dict[str, Any]]) -> Sample:
    return Sample(id=sample_id,
                  input=f"Solve it (run {RUN}).\n<script>{json.dumps(steps)}</script>",
                  target="42")


def step(cmd: str, delay: float) -> dict[str, Any]:
    return {"tool": "shell", "args": {"cmd": cmd}, "delay": delay}


@task
def quick_hang(samples: int = 10, turns: int = 8, gen: float = 1.0,
               hang_turn: int = 4) -> Task:
    """Quick samples, and one ("hang") whose generation at ``hang_turn`` never ends."""
    quick = [sample(f"q{i}", [step(f"echo {i}-{j}", gen) for j in range(turns)] + [SUBMIT])
             for i in range(samples)]
    hang = sample("hang", [step(f"echo h-{j}", gen) for j in range(hang_turn)]
                  + [step("echo never", 3600.0)])
    return Task(dataset=[*quick, hang], solver=react(tools=[shell()]), scorer=includes(),
                message_limit=200, model=scripted_model())


@task
def slow_tools(samples: int = 10, calls: int = 3, seconds: float = 9.0,
               spread: float = 0.3, gen: float = 0.2) -> Task:
    """Long, normal tool calls: ``seconds`` each, varying by +-``spread`` of it."""
    data = []
    for i in range(samples):
        steps: list[dict[str, Any]] = []
        for j in range(calls):
            wobble = 1.0 + spread * (((i * 7 + j * 3) % 5) - 2) / 2.0
            steps.append({"tool": "build", "args": {"target": f"t{i}-{j}",
                                                    "seconds": round(seconds * wobble, 2)},
                          "delay": gen})
        data.append(sample(f"s{i}", [*steps, SUBMIT]))
    return Task(dataset=data, solver=react(tools=[build()]), scorer=includes(),
                message_limit=200, model=scripted_model())


@task
def slow_first(samples: int = 3, first: float = 35.0, turns: int = 2,
               gen: float = 0.5) -> Task:
    """The first generation of every sample takes ``first`` seconds; then quick ones."""
    return Task(
        dataset=[sample(f"f{i}", [step(f"warm {i}", first)]
                        + [step(f"echo {i}-{j}", gen) for j in range(turns)] + [SUBMIT])
                 for i in range(samples)],
        solver=react(tools=[shell()]), scorer=includes(), message_limit=200,
        model=scripted_model())
