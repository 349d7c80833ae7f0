r"""Replay recorded tau-bench airline runs through a real Inspect react() agent.

Each sample re-enacts one trajectory of sierra-research/tau-bench
historical_trajectories/gpt-4o-airline.json (MIT, Copyright (c) 2024 Sierra): gpt-4o as
the airline agent, a gpt-4 simulated user, the tau-bench airline tools. The trajectories
were transcribed from that file into raw/ and rebuilt by parse_raw.py into
trajectories.json (see README.md).

The sample's messages are the recorded system message (the airline policy) and the
recorded first user message. The scripted model `taureplay/gpt-4o` then emits the
recorded assistant turns verbatim:
  - a turn with tool calls becomes the same tool call(s): the same function name and the
    same JSON arguments, with the turn's text (if any) as the message content; each tool
    returns the recorded tool output verbatim (Inspect's own think() for `think`, which
    returns "" as recorded; one ToolDef per other function name, whose parameters are
    inferred from the recorded arguments);
  - a text-only turn is answered by the recorded next user message (the simulated user)
    through react()'s on_continue; after the last recorded assistant turn on_continue
    appends the user's closing message (e.g. "... ###STOP###"), if any, and stops.
The score is the recorded reward. Sample id: "task<task_id>-<k>", k the occurrence of
that task id in file order (trial 0 -> 0; task 0's second trial -> task0-1).

Env: TAUBENCH_TRAJS (default: trajectories.json beside this file), SCENARIO_PACE
(seconds per tool call, default 0).
Replay:  inspect eval replay_taubench.py --display none --log-dir logs --max-samples 20
"""

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from inspect_ai import Task, task
from inspect_ai.agent import AgentState, as_solver, react
from inspect_ai.dataset import Sample
from inspect_ai.model import (
    ChatCompletionChoice,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageUser,
    ModelOutput,
    get_model,
    modelapi,
)
from inspect_ai.model._providers.mockllm import MockLLM
from inspect_ai.scorer import Score, Target, mean, scorer
from inspect_ai.solver import Generate, TaskState, solver
from inspect_ai.tool import ToolCall, ToolDef, ToolParams, think
from inspect_ai.util import JSONSchema, store

HERE = Path(__file__).parent
TRAJS = Path(os.environ.get("TAUBENCH_TRAJS", HERE / "trajectories.json"))
PACE = float(os.environ.get("SCENARIO_PACE", "0"))
MODEL = "taureplay/gpt-4o"
SOURCE = ("sierra-research/tau-bench historical_trajectories/gpt-4o-airline.json "
          "(MIT, Copyright (c) 2024 Sierra)")


@modelapi(name="taureplay")
def taureplay():
    class TauReplay(MockLLM):
        async def count_text_tokens(self, text: str) -> int:
            return max(1, len(text) // 4)  # the default tokenizer needs the internet

    return TauReplay


# --- source -----------------------------------------------------------------------

_trajs: list[dict] | None = None


def trajectories() -> dict[str, dict]:
    """Sample id -> recorded trajectory, in file order."""
    global _trajs
    if _trajs is None:
        _trajs = json.loads(TRAJS.read_text())
    out, seen = {}, {}
    for t in _trajs:
        k = seen.get(t["task_id"], 0)
        seen[t["task_id"]] = k + 1
        out[f"task{t['task_id']}-{k}"] = t
    return out


_scripts: dict[str, list[dict]] = {}


def script(sid: str) -> list[dict]:
    """One entry per recorded assistant turn after the first user message:
    text, calls [(name, arguments dict, recorded output)], reply (the user message that
    answered a text-only turn, or None)."""
    if sid in _scripts:
        return _scripts[sid]
    msgs = trajectories()[sid]["traj"]
    assert msgs[0]["role"] == "system" and msgs[1]["role"] == "user", sid
    turns: list[dict] = []
    i = 2
    while i < len(msgs):
        m = msgs[i]
        assert m["role"] == "assistant", (sid, i, m["role"])
        calls = []
        j = i + 1
        for c in m.get("tool_calls") or []:
            r = msgs[j]
            assert r["role"] == "tool" and r["name"] == c["name"], (sid, j)
            calls.append((c["name"], json.loads(c["arguments"]), r["content"]))
            j += 1
        reply = None
        if not calls and j < len(msgs):
            assert msgs[j]["role"] == "user", (sid, j)
            reply = msgs[j]["content"]
            j += 1
        turns.append({"text": m.get("content"), "calls": calls, "reply": reply})
        i = j
    _scripts[sid] = turns
    return turns


# --- tools ------------------------------------------------------------------------

def _schema(values: list[Any]) -> dict:
    """A JSON schema that every recorded value fits."""
    kinds = set()
    for v in values:
        kinds.add("boolean" if isinstance(v, bool) else "integer" if isinstance(v, int)
                  else "number" if isinstance(v, float) else "string" if isinstance(v, str)
                  else "array" if isinstance(v, list) else "object" if isinstance(v, dict)
                  else "null")
    if kinds <= {"integer", "number"} and "number" in kinds:
        kinds = {"number"}
    if len(kinds) != 1:
        return {}
    kind = kinds.pop()
    out: dict[str, Any] = {"type": kind}
    if kind == "array":
        items = [x for v in values for x in v]
        if items:
            out["items"] = _schema(items)
    elif kind == "object":
        keys = sorted({k for v in values for k in v})
        out["properties"] = {k: _schema([v[k] for v in values if k in v]) for k in keys}
        out["required"] = [k for k in keys if all(k in v for v in values)]
    return out


def recorded_tool(name: str, calls: list[dict]) -> ToolDef:
    schema = _schema(calls)
    props = {k: JSONSchema(description=f"`{k}` as the agent passed it", **v)
             for k, v in schema.get("properties", {}).items()}
    params = ToolParams(properties=props, required=schema.get("required", []))

    async def execute(**kwargs: Any) -> str:
        if PACE:
            await asyncio.sleep(PACE)
        return next_result(name, kwargs)

    return ToolDef(execute, name=name, parameters=params, max_output=0,
                   description=f"tau-bench airline tool `{name}` (replayed: returns the "
                               "recorded output)")


def next_result(name: str, arguments: dict) -> str:
    """The recorded output of the pending call of `name` (in call order)."""
    pending = store().get("tau_pending", [])
    for n, (fname, args, result) in enumerate(pending):
        if fname == name:
            del pending[n]
            store().set("tau_pending", pending)
            if args != arguments:
                return f"[replay error: arguments differ from the recorded call: {arguments}]"
            return result
    return f"[replay error: no recorded call of {name} pending]"


def all_tools() -> list:
    by_name: dict[str, list[dict]] = {}
    for sid in trajectories():
        for turn in script(sid):
            for name, args, _ in turn["calls"]:
                by_name.setdefault(name, []).append(args)
    tools: list = [think()] if "think" in by_name else []
    tools += [recorded_tool(n, c) for n, c in sorted(by_name.items()) if n != "think"]
    return tools


# --- replay -----------------------------------------------------------------------

def outputs(input, tools, tool_choice, config):
    sid = store().get("tau_id")
    k = sum(1 for m in input if m.role == "assistant")
    turns = script(sid)
    if k >= len(turns):  # not reached: on_continue stops after the last turn
        return ModelOutput.from_content(MODEL, "")
    turn = turns[k]
    if not turn["calls"]:
        return ModelOutput.from_content(MODEL, turn["text"] or "")
    store().set("tau_pending", [list(c) for c in turn["calls"]])
    calls = [ToolCall(id=f"call_{k + 1}_{j + 1}", function=name, arguments=args)
             for j, (name, args, _) in enumerate(turn["calls"])]
    message = ChatMessageAssistant(content=turn["text"] or "", tool_calls=calls,
                                   model=MODEL, source="generate")
    return ModelOutput(model=MODEL, choices=[ChatCompletionChoice(
        message=message, stop_reason="tool_calls")])


async def next_turn(state: AgentState) -> bool | str:
    """After tool calls go on; a text turn gets the recorded user reply; stop at the end."""
    turns = script(store().get("tau_id"))
    k = sum(1 for m in state.messages if m.role == "assistant")
    last = turns[k - 1]
    if k < len(turns):
        return True if last["calls"] else last["reply"]
    if last["reply"] is not None:  # the user's closing message (no agent turn follows)
        state.messages.append(ChatMessageUser(content=last["reply"]))
    return False


@solver
def replay_agent():
    agent = as_solver(react(prompt=None, submit=False, on_continue=next_turn,
                            tools=all_tools(), model=get_model(MODEL, custom_outputs=outputs)))

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        store().set("tau_id", str(state.sample_id))
        return await agent(state, generate)

    return solve


@scorer(metrics=[mean()])
def recorded_reward():
    async def score(state: TaskState, target: Target) -> Score:
        r = state.metadata["reward"]
        return Score(value=r, explanation=f"reward recorded by tau-bench: {r}")

    return score


def sample(sid: str, t: dict) -> Sample:
    msgs = t["traj"]
    return Sample(
        id=sid,
        input=[ChatMessageSystem(content=msgs[0]["content"]),
               ChatMessageUser(content=msgs[1]["content"])],
        target="",
        metadata={"task_id": t["task_id"], "trial": t.get("trial"), "reward": t["reward"],
                  "instruction": t["instruction"], "source": SOURCE},
    )


@task
def taubench_airline_replay():
    return Task(
        dataset=[sample(sid, t) for sid, t in trajectories().items()],
        solver=replay_agent(),
        scorer=recorded_reward(),
        model=get_model(MODEL, custom_outputs=outputs),
        metadata={"source": SOURCE, "agent": "gpt-4o (recorded)",
                  "user": "gpt-4 simulated user (recorded)"},
        message_limit=1000,
    )
