"""A scripted model API (``inspect_watch_scripted/<name>``) for demos, tests and benchmarks.

A task that sets ``model=scripted_model("demo")`` runs as a real ``inspect eval`` process
with no API key and no network. The script travels inside the sample input between ``<script>`` and
``</script>`` as JSON: a list of steps, one per assistant turn.

The model API is registered when this module is imported, and only then: the task
files that use it (the bundled demo, the tests' and benchmarks' evals) import it and name
the model in their ``Task`` (``inspect eval FILE`` without ``--model``: Inspect resolves
a ``--model`` before it imports the task file). It is deliberately not an ``inspect_ai``
entry point, which Inspect loads into every eval on the machine, and its provider name is
this project's own: a user's ``@modelapi(name="scripted")`` (a common name for a test
model) is never shadowed by installing inspect-watch.

A step is one of::

    {"tool": "shell", "args": {"cmd": "ls"}}      # call a tool
    {"text": "My final answer is 42"}             # a text-only turn
    {"raise": "boom", "times": 1}                 # fail the generate call
                                                  #   (the first ``times`` tries)

Any step may add ``"delay": SECONDS`` (a slow generation), and a tool step
``"result": TEXT``: what the call should return, kept in the sample's store under
:data:`RESULT_KEY` for a tool that reads it (the tests' ``shell`` does), so that a
script can act out outputs that differ while the call stays the same. When the script
runs out its last step repeats. ``MockLLM.count_text_tokens`` would fetch a
tiktoken vocabulary from the network, so it is replaced by a length estimate.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from inspect_ai.model import ChatMessage, Model, ModelOutput, get_model, modelapi
from inspect_ai.model._providers.mockllm import MockLLM

_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)


def parse_script(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """The script embedded in the first user message that has one."""
    for message in messages:
        if message.role == "user":
            found = _SCRIPT.search(message.text)
            if found:
                steps = json.loads(found.group(1))
                if not isinstance(steps, list) or not steps:
                    raise ValueError("a <script> must be a non-empty JSON list")
                return steps
    return [{"tool": "submit", "args": {"answer": "done"}}]


def script_step(messages: list[ChatMessage]) -> tuple[int, dict[str, Any]]:
    """The step for the next turn: one per assistant message so far."""
    steps = parse_script(messages)
    turn = sum(1 for m in messages if m.role == "assistant")
    return turn, steps[min(turn, len(steps) - 1)]


PROVIDER = "inspect_watch_scripted"
RESULT_KEY = "inspect_watch_scripted:result"  # a scripted tool step's result (see above)


@modelapi(name=PROVIDER)
def scripted() -> type[MockLLM]:
    class Scripted(MockLLM):
        def __init__(self, model_name: str, **kwargs: Any) -> None:
            # a caller's own outputs (get_model(..., custom_outputs=...)) win over the
            # script in the input, as with mockllm
            outputs = kwargs.pop("custom_outputs", None) or self._generate
            self._raised: dict[str, int] = {}
            # MockLLM awaits an async callable's result; its annotation names sync ones only
            super().__init__(model_name, custom_outputs=outputs,  # type: ignore[arg-type]
                             **kwargs)

        async def _generate(
            self, input: list[ChatMessage], tools: Any, tool_choice: Any, config: Any
        ) -> ModelOutput:
            turn, step = script_step(input)
            if step.get("delay"):
                await asyncio.sleep(float(step["delay"]))
            name = f"{PROVIDER}/{self.model_name}"
            if "raise" in step:
                key = f"{input[0].text if input else ''}|{turn}"
                count = self._raised.get(key, 0)
                if count < int(step.get("times", 1_000_000)):
                    self._raised[key] = count + 1
                    raise RuntimeError(str(step["raise"]))
                step = step.get("then", {"tool": "submit", "args": {"answer": "done"}})
            if "tool" in step:
                if "result" in step:
                    from inspect_ai.util import store

                    store().set(RESULT_KEY, str(step["result"]))
                return ModelOutput.for_tool_call(
                    name, str(step["tool"]), dict(step.get("args", {})),
                    content=step.get("text"),
                )
            return ModelOutput.from_content(name, str(step.get("text", "")))

        async def count_text_tokens(self, text: str) -> int:
            return max(1, len(text) // 4)

    return Scripted


def scripted_model(name: str = "test") -> Model:
    """The scripted model ``inspect_watch_scripted/NAME``, for a ``Task(model=...)``."""
    return get_model(f"{PROVIDER}/{name}")
