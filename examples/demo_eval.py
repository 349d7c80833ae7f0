"""Bundled example eval: a scripted agent acting out a clean run and two failure modes.

No API keys and no network: the task's model, ``inspect_watch_scripted/demo``, is
inspect-watch's scripted model API (see ``watcher/scripted.py``), which reads each
sample's script from its input.

    inspect eval examples/demo_eval.py
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from inspect_ai import Task, task
from inspect_ai.agent import react
from inspect_ai.dataset import Sample
from inspect_ai.scorer import includes
from inspect_ai.tool import Tool, tool

from watcher.scripted import scripted_model


@tool
def shell() -> Tool:
    async def execute(cmd: str) -> str:
        """Run a shell command (simulated: nothing is executed).

        Args:
            cmd: The command to run.
        """
        await asyncio.sleep(float(os.environ.get("DEMO_TOOL_DELAY", "0.3")))
        if cmd.startswith("cat missing"):
            raise RuntimeError("No such file or directory")
        return f"simulated output of: {cmd}\n"

    return execute


def _sample(sample_id: str, steps: list[dict[str, Any]]) -> Sample:
    script = json.dumps(steps)
    return Sample(
        id=sample_id,
        input=f"Find the answer and submit it.\n<script>{script}</script>",
        target="42",
    )


SUBMIT = {"tool": "submit", "args": {"answer": "42"}}

SCENARIOS = {
    "clean": [
        {"tool": "shell", "args": {"cmd": "ls"}},
        {"tool": "shell", "args": {"cmd": "cat README.md"}},
        SUBMIT,
    ],
    "repeated-call": [{"tool": "shell", "args": {"cmd": "cat /tmp/status.txt"}}] * 5 + [SUBMIT],
    "submit-loop": [
        {"text": "My final answer is 42. I will now submit it."},
        {"text": "My final answer is 42. I will now submit it."},
        {"text": "My final answer is 42. I will now submit it."},
        {"text": "My final answer is 42. I will now submit it."},
        SUBMIT,
    ],
}


@task
def demo() -> Task:
    return Task(
        dataset=[_sample(name, steps) for name, steps in SCENARIOS.items()],
        solver=react(tools=[shell()]),
        scorer=includes(),
        message_limit=40,
        model=scripted_model("demo"),
    )
