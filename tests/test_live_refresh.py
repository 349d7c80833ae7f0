"""A live finding is reported as it stands, not as it began (issue 34, item 0).

The engine emits a snapshot of an episode only when it is news (new, escalated,
ended); a loop that goes on for minutes must still say, while it runs, how many times
it went round and what it spent since it was found: in the JSONL, in a front end's
sink (the fleet view) and in the summary of a watch stopped before the sample ended.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from watcher.findings import Finding

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


class Keep:
    """A front end's sink: every snapshot it was given, news and updates apart."""

    def __init__(self) -> None:
        self.news: list[Finding] = []
        self.updates: list[Finding] = []

    def start(self, context: Any) -> None: ...
    def notice(self, n: Any) -> None: ...
    def status(self, snapshot: Any) -> None: ...
    def stop(self, summary: Any = None) -> None: ...

    def finding(self, f: Finding) -> None:
        self.news.append(f)

    def update(self, f: Finding) -> None:
        self.updates.append(f)


def tokens(f: Finding) -> int:
    return int(f.evidence.facts.get("tokens_since_first_seen") or 0)


def test_a_looping_samples_finding_grows_while_it_loops(eval_runner: Any,
                                                        tmp_path: Path) -> None:
    from watcher import app
    from watcher.exit_codes import ExitCode

    # "repeat" calls the same command until its message limit (400 messages)
    proc = eval_runner("watchdog", "-T", "siblings=0", tool_delay=0.2)
    proc.discovery()
    sink = Keep()
    out = tmp_path / "live.jsonl"
    handle = app.start(app.WatchOptions(poll=0.3, format="jsonl", output=str(out),
                                        # a rule that reads model events: the spend is
                                        # counted from them (null when none is loaded)
                                        only=("repeated-tool-call", "submit-loop")),
                       sinks=[sink])

    def grown() -> list[Finding]:
        first = [f for f in sink.news if f.sample.sample_id == "repeat"]
        if not first:
            return []
        return [u for u in list(sink.updates) if u.id == first[0].id
                and u.count > first[0].count + 5 and tokens(u) > tokens(first[0])]

    guard = time.monotonic() + 900  # bounds a hung watch only
    while not grown() and handle.running and time.monotonic() < guard:
        time.sleep(0.2)
    later = grown()
    assert later, (sink.news, sink.updates[-3:])
    # still looping: the grown snapshots came while the episode was open
    assert all(u.status != "ended" for u in later)
    first = next(f for f in sink.news if f.sample.sample_id == "repeat")
    assert later[-1].summary != first.summary  # "called N times": the count it has now
    handle.stop()  # as Ctrl+C: the summary and the JSONL say what it is by now
    assert handle.wait(60) is ExitCode.INTERRUPTED
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    snaps = [d for d in lines if d.get("kind") == "finding" and d["id"] == first.id]
    counts = [d["count"] for d in snaps]
    assert counts == sorted(counts) and counts[-1] >= later[-1].count > counts[0]
    spent = [d["evidence"]["facts"].get("tokens_since_first_seen") or 0 for d in snaps]
    assert spent[-1] > spent[0]
