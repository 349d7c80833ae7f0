"""The clock-driven `idle` detector against a real eval with a slow tool call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e

FAST_STALL = """
id: fast-stall
title: Sample stalled (test thresholds)
description: The built-in stall rule with thresholds of seconds, for a test.
category: stall
severity: warning
needs: metadata
detect:
  idle:
    thresholds: {model: 3, tool: 3, sandbox: 3, none: 3}
    polls: 2
confidence:
  base: medium
  reason: Nothing new for longer than the threshold, confirmed over two polls.
message: "no progress for {idle_seconds}s ({kind} in flight: {function})"
handoff: Check the in-flight call.
"""


def test_a_pending_tool_call_is_reported_as_a_stall_from_the_clock(eval_runner: Any,
                                                                     tmp_path: Path) -> None:
    rule = tmp_path / "fast-stall.yaml"
    rule.write_text(FAST_STALL)
    proc = eval_runner("multi", "-T", "samples=1", "-T", "steps=1", tool_delay=8.0)
    proc.discovery()
    out = tmp_path / "stall.jsonl"
    res = subprocess.run(
        [sys.executable, "-m", "watcher", "watch", "--rules", str(rule), "--only", "fast-stall",
         "--format", "jsonl", "--output", str(out), "--poll", "0.5"],
        capture_output=True, text=True, timeout=180, env=dict(os.environ),
        stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr
    found = [json.loads(line) for line in out.read_text().splitlines()]
    stalls = [d for d in found if d["kind"] == "finding" and d["rule"] == "fast-stall"]
    assert stalls, found
    first = stalls[0]
    assert first["sample_id"] == "s0"
    assert first["evidence"]["facts"]["kind"] == "tool"
    assert "shell" in first["summary"]
    # one episode: later snapshots update it, they do not open new findings
    assert len({d["id"] for d in stalls}) == 1
