"""`inspect-watch mcp`, driven by the official MCP client over stdio, on a real running eval."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")
pytestmark = pytest.mark.e2e

READ_TOOLS = {"list_evals", "list_samples", "findings", "get_finding", "sample_events",
              "sessions"}
ACT_TOOLS = {"launch", "release", "act_on_finding"}
# the watchdog acts on the submit loop only when asked: its own grace is an hour
POLICY = """\
defaults: false
rules:
  submit-loop: {verb: cancel_sample, action: score, when: {confidence: high},
                grace: {seconds: 3600}}
"""

Call = Callable[..., Awaitable[dict[str, Any]]]


@asynccontextmanager
async def server(*args: str) -> AsyncIterator[tuple[set[str], Call]]:
    """An `inspect-watch mcp` child over stdio: its tool names and a caller."""
    from mcp import StdioServerParameters
    from mcp.client.session import ClientSession
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "watcher", "mcp", *args],
                                   env=dict(os.environ), cwd=str(Path.cwd()))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        init = await session.initialize()
        assert "Never say a sample was cancelled" in (init.instructions or "")
        tools = {t.name for t in (await session.list_tools()).tools}

        async def call(name: str, **arguments: Any) -> dict[str, Any]:
            res = await session.call_tool(name, arguments)
            text = res.content[0].text  # type: ignore[union-attr]
            if getattr(res, "is_error", None) or getattr(res, "isError", None):
                return {"tool_error": text}
            return dict(json.loads(text))

        yield tools, call


async def until(call: Call, name: str, test: Callable[[dict[str, Any]], bool],
                cap: float = 120.0, **arguments: Any) -> dict[str, Any]:
    """Call a tool until its answer passes ``test`` (the cap guards a wedged run)."""
    deadline = time.monotonic() + cap
    while True:
        got = await call(name, **arguments)
        if test(got) or time.monotonic() > deadline:
            return got
        await anyio.sleep(0.5)


def test_an_agent_reads_evals_findings_deltas_and_events_and_cannot_act(
        eval_runner: Any, tmp_path: Path) -> None:
    proc = eval_runner("watchdog", "-T", "delay=0.5", "-T", "steps=40", "--max-samples", "4",
                       tool_delay=0.3)
    proc.discovery()
    pid = proc.proc.pid

    async def go() -> None:
        async with server("--poll", "0.5") as (tools, call):
            assert tools == READ_TOOLS  # no acting tool without --act
            evals = await until(call, "list_evals", lambda d: bool(d["evals"]))
            [ev] = [e for e in evals["evals"] if e["pid"] == pid]
            assert ev["status"] == "running" and ev["tasks"][0]["task"] == "watchdog"
            # the findings delta: everything so far, then only what changed since
            first = await until(call, "findings", lambda d: any(
                f["rule"] == "repeated-tool-call" for f in d["findings"]), cursor=0)
            assert first["cursor"] > 0 and "untrusted" in first["trust"]
            seen = {(f["id"], f["status"], f["confidence"]) for f in first["findings"]}
            later = await until(call, "findings", lambda d: bool(d["findings"]),
                                cursor=first["cursor"])
            assert later["cursor"] > first["cursor"]
            # a delta repeats no snapshot it already gave (each is new or changed)
            assert not {(f["id"], f["status"], f["confidence"])
                        for f in later["findings"]} & seen
            assert (await call("findings", cursor=later["cursor"], min_confidence="high"))[
                "cursor"] >= later["cursor"]
            rep = next(f for f in first["findings"] if f["rule"] == "repeated-tool-call")
            full = await call("get_finding", finding_id=rep["id"])
            assert "inspect-watch only observes" in full["finding"]["handoff"]
            assert full["finding"]["evidence"]["untrusted"]["agent_text"]
            assert full["actions"] == []
            # the task's samples, and one sample's events with the agent's text apart
            samples = await call("list_samples", task="watchdog")
            assert {"repeat", "submit-loop"} <= {s["sample_id"] for s in samples["samples"]}
            events = await until(call, "sample_events", lambda d: len(d["events"]) >= 3,
                                 task="watchdog", sample_id="repeat", last=3)
            assert len(events["events"]) == 3
            tool_events = [e for e in events["events"] if e["type"] == "tool"]
            assert tool_events and all("arguments" not in e and "cat /tmp/status" in
                                       e["untrusted"]["arguments"] for e in tool_events)
            # acting is not there: the tool does not exist on this server
            refused = await call("act_on_finding", finding_id=rep["id"])
            assert "tool_error" in refused
            assert (await call("sessions"))["sessions"] == []

    anyio.run(go)
    assert proc.proc.poll() is None  # the eval ran on, untouched


def test_with_act_the_agent_acts_through_the_watchdogs_policy_and_audit(
        eval_runner: Any, tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    audit = tmp_path / "audit.jsonl"
    proc = eval_runner("watchdog", "-T", "delay=0.3", "-T", "steps=60", "--max-samples", "4",
                       tool_delay=0.3)
    proc.discovery()

    async def go() -> None:
        async with server("--act", "--act-policy", str(policy), "--poll", "0.5", "-o",
                          str(audit)) as (tools, call):
            assert tools == READ_TOOLS | ACT_TOOLS

            def loop_high(d: dict[str, Any]) -> bool:
                return any(f["rule"] == "submit-loop" and f["confidence"] == "high"
                           and f["status"] != "ended" for f in d["findings"])

            got = await until(call, "findings", loop_high, cursor=0)
            loop = next(f for f in got["findings"] if f["rule"] == "submit-loop"
                        and f["confidence"] == "high")
            rep = next((f for f in got["findings"] if f["rule"] == "repeated-tool-call"),
                       None)
            # what the policy does not name is refused, and nothing is done
            if rep is not None:
                no = await call("act_on_finding", finding_id=rep["id"])
                assert no["decided"].startswith("not acting: the action policy names no "
                                                "action for repeated-tool-call")
                assert no["actions"] == []
            done = await call("act_on_finding", finding_id=loop["id"])
            assert done["decided"].startswith("asked: cancel the sample")
            outcomes = [a["outcome"] for a in done["actions"]]
            assert outcomes == ["requested"], done
            action = done["actions"][0]
            assert action["details"]["grace_met"] == "asked"
            assert action["dry_run_answer"] is not None  # the server's dry run came first
            assert action["sample_id"] == "submit-loop" and action["verb"] == "cancel_sample"
            # the same episode is not acted on twice
            again = await call("act_on_finding", finding_id=loop["id"])
            assert again["decided"].startswith("not acting: this finding episode was acted")
            full = await call("get_finding", finding_id=loop["id"])
            assert [a["outcome"] for a in full["actions"]][:1] == ["requested"]
            # releasing a running eval: it will exit when done; nothing is cancelled
            rel = await call("release", pid=proc.proc.pid)
            [r] = rel["released"]
            assert r["ok"] and not r["was_finished"] and "nothing was cancelled" in r["message"]
            assert rel["actions"][0]["verb"] == "release_process"

    anyio.run(go)
    lines = [json.loads(x) for x in audit.read_text().splitlines() if x.strip()]
    acts = [(a["verb"], a["outcome"]) for a in lines if a["kind"] == "action"]
    assert acts[0] == ("cancel_sample", "requested"), acts
    assert ("release_process", "requested") in acts, acts  # (a `confirmed` may come between)
    from inspect_ai.log import read_eval_log

    proc.stop()
    proc.wait(60)
    [log] = proc.logs()
    [s] = [s for s in read_eval_log(str(log)).samples or [] if s.id == "submit-loop"]
    assert any(e.event == "sample_limit" and e.type == "operator" for e in s.events)


def test_with_act_dry_run_the_acting_tools_only_say_what_they_would_do(
        tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"

    async def go() -> None:
        async with server("--act", "--dry-run", "-o", str(audit)) as (tools, call):
            assert tools == READ_TOOLS | ACT_TOOLS
            got = await call("launch", command=["inspect", "eval", "t.py", "--log-dir",
                                                str(tmp_path / "logs")])
            assert got["launched"] is False and got["would_run"][-1] == "--ctl-server=keep"
            assert got["action"]["outcome"] == "dry_run"
            assert got["action"]["verb"] == "launch_run"
            assert (await call("release"))["note"] == "no finished eval is kept alive"
            await until(call, "findings", lambda d: bool(d["actions"]), cursor=0, cap=30)
            assert (await call("sessions"))["sessions"] == []  # nothing was launched

    anyio.run(go)
    lines = [json.loads(x) for x in audit.read_text().splitlines() if x.strip()]
    assert [(a["verb"], a["outcome"], a["mode"]) for a in lines if a["kind"] == "action"] \
        == [("launch_run", "dry_run", "dry-run")]
