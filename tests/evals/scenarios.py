"""Real evals for end-to-end tests, driven by the scripted model (``inspect_watch_scripted/test``).

Each sample's input carries its script (see ``watcher/scripted.py``). Task
arguments (``-T``) pick the shape of the run; ``SCENARIO_TOOL_DELAY`` slows the
``shell`` tool so polls can catch tool events while they are pending, and a
``hang`` command sleeps ``SCENARIO_HANG`` seconds (an hour by default: a hung tool).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

from inspect_ai import Task, task
from inspect_ai.agent import AgentState, react
from inspect_ai.dataset import Sample
from inspect_ai.scorer import includes
from inspect_ai.tool import Tool, tool
from inspect_ai.util import store

from watcher.scripted import RESULT_KEY, scripted_model

SUBMIT = {"tool": "submit", "args": {"answer": "42"}}


@tool
def shell() -> Tool:
    async def execute(cmd: str) -> str:
        """Run a shell command (simulated).

        Args:
            cmd: The command to run.
        """
        await asyncio.sleep(float(os.environ.get("SCENARIO_TOOL_DELAY", "0.05")))
        hold = os.environ.get("SCENARIO_HOLD_FILE")
        while hold and os.path.exists(hold):  # a test holds the run until it is ready
            await asyncio.sleep(0.05)
        if cmd.startswith("hang"):  # a hung tool: only a cancel (or the end) stops it
            await asyncio.sleep(float(os.environ.get("SCENARIO_HANG", "3600")))
        if cmd.startswith("fail"):
            raise RuntimeError(f"command failed: {cmd}")
        scripted = store().get(RESULT_KEY)
        if scripted is not None:  # the step said what this call returns
            store().delete(RESULT_KEY)
            return str(scripted)
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
def watchdog(messages: int = 400, siblings: int = 2, steps: int = 12,
             delay: float = 0.1) -> Task:
    """For the watchdog (``watch --act``): a submit loop and an identical tool call that
    never end on their own (a script's last step repeats for ever; only the message
    limit bounds them), beside clean siblings that work for ``steps`` turns, then
    submit. Each claim of the submit loop takes ``delay`` seconds to generate."""
    claim = "My final answer is 42, submitting now."
    return Task(
        dataset=[
            sample("submit-loop", [{"text": claim, "delay": delay}]),
            sample("repeat", calls("cat /tmp/status")),
            *[sample(f"clean-{i}", calls(*[f"step {i}-{j}" for j in range(steps)]) + [SUBMIT])
              for i in range(siblings)],
        ],
        solver=react(tools=[shell()]), scorer=includes(), message_limit=messages,
        model=scripted_model(),
    )


@task
def hung_tool() -> Task:
    """A sample whose tool call hangs (``hang``); after it the script goes on and
    submits: a cancelled tool call lets the sample continue."""
    return Task(
        dataset=[sample("hang", calls("ls", "hang now", "echo after") + [SUBMIT])],
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
def shared() -> Task:
    """For a watch through the sample buffer Inspect shares beside the log
    (``--log-shared``): a repeated call, a submit loop, a sample retried after an error
    (with --retry-on-error) and a clean one, slow enough (``SCENARIO_TOOL_DELAY``) to span
    several syncs."""
    claim = "My final answer is 42, submitting now."
    return Task(
        dataset=[
            sample("repeat", calls(*["cat /tmp/status"] * 7) + [SUBMIT]),
            sample("submit-loop", [{"text": claim, "delay": 1.0}] * 4 + [SUBMIT]),
            sample("flaky", calls("whoami") + [
                {"raise": "transient provider failure", "times": 1, "delay": 1.0,
                 "then": {"tool": "shell", "args": {"cmd": "ls"}}}]
                + calls("cat a", "cat b", "cat c") + [SUBMIT]),
            sample("clean", calls("ls", "cat notes.txt", "python solve.py") + [SUBMIT]),
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


# -- what is true on real transcripts (issue: whole values, iteration, real nudges) -----

# a long first part every run prints (a banner, a deprecation warning), as SWE-bench
# reproduction scripts do: 1,200 characters, far past the 256 the content tier shows
BANNER = "".join(f"DeprecationWarning: module_{i} is deprecated and will be removed; "
                 f"use module_{i}_v2 instead.\n" for i in range(16))


def run(cmd: str, result: str) -> dict[str, Any]:
    return {"tool": "shell", "args": {"cmd": cmd}, "result": result}


USER_REPLIES = [
    "My reservation id is ZFA04Y.",
    "I want to move both flights to the 18th, same times if possible.",
    "Economy is fine. How much more will it cost?",
    "That is acceptable, please charge the card on file.",
    "Could you also add one checked bag?",
    "No, that is everything. Thank you!",
]


async def simulated_user(state: AgentState) -> bool | str:
    """A simulated customer: answers every text-only turn with something new (react's
    on_continue), as conversational benchmarks do."""
    if state.output.message.tool_calls:
        return True
    turn = int(store().get("simulated_user_turn", 0))
    store().set("simulated_user_turn", turn + 1)
    return USER_REPLIES[turn % len(USER_REPLIES)]


def _truth_samples() -> list[Sample]:
    repro = "python reproduce_issue.py"
    fail = BANNER + "AssertionError: expected 2, got 1\n"
    return [
        # the same test re-run between edits, output unchanged (the fix has not worked yet)
        sample("edit-retest", [run(repro, fail), run("sed -i 's/a/b/' src/mod.py", ""),
                               run(repro, fail), run("cat <<'EOF' > src/mod.py\nx=2\nEOF", ""),
                               run(repro, fail), run("git checkout src/mod.py", ""),
                               run(repro, fail), SUBMIT]),
        # back to back, outputs that share 1,200 characters and then differ
        sample("long-prefix", [run(repro, BANNER + f"run {i}: 3 failed, {i} passed\n")
                               for i in range(4)] + [SUBMIT]),
        # back to back, whole outputs identical: a real loop
        sample("loop-long", [run(repro, fail)] * 4 + [SUBMIT]),
        # a customer answering each text turn: conversation, not narration
        sample("simulated-user",
               [{"text": t, "delay": 0.4} for t in [
                   "Hello! I can help you change your flights. What is your reservation id?",
                   "Thanks. Which dates would you like to move to?",
                   "Both flights can move to the 18th in economy; the fare difference is $86.",
                   "Done: I am submitting the change now and charging the card on file.",
                   "One checked bag is added for $35. Anything else?",
                   "You're welcome, have a good trip!"]] + [SUBMIT]),
    ]


@task
def truth() -> Task:
    """Look-alikes of what real transcripts hold: edit-and-retest with unchanged output,
    outputs sharing a long first part, a real loop on long output."""
    return Task(dataset=[s for s in _truth_samples() if s.id != "simulated-user"],
                solver=react(tools=[shell()]), scorer=includes(), message_limit=60,
                model=scripted_model())


@task
def conversation() -> Task:
    """An agent talking with a simulated user who answers every text-only turn."""
    return Task(dataset=[s for s in _truth_samples() if s.id == "simulated-user"],
                solver=react(tools=[shell()], on_continue=simulated_user),
                scorer=includes(), message_limit=60, model=scripted_model())
