"""Real loops at the level they deserve, acted out by real evals and watched live: a
conversational agent that thinks between identical failing bookings (high), a weak
model's failures behind a harness's output wrapper (an error storm), one failing query
re-sent with cosmetic changes (medium) and identically (high); and their look-alikes (a
customer asking for another card each time, exploration that works, error words quoted
in a listing) stay below medium. Live findings equal post-hoc ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.evalproc import REPO
from tests.test_handoff_actions import wait_for
from tests.test_watch_e2e import KEEP, cli, findings, folded
from watcher.findings import confidence_rank

pytestmark = pytest.mark.e2e

QUALITY = REPO / "tests" / "evals" / "quality_evals.py"


def best(records: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """(sample, category) -> the highest level any finding reached."""
    out: dict[tuple[str, str], str] = {}
    for d in records:
        key = (d["sample_id"], d["category"])
        if key not in out or confidence_rank(d["confidence"]) > confidence_rank(out[key]):
            out[key] = d["confidence"]
    return out


def test_real_loop_shapes_reach_their_level_live_and_post_hoc(eval_runner: Any,
                                                              tmp_path: Path) -> None:
    env = {"QUALITY_TOOL_DELAY": "0.2"}
    # kept inspectable until the watch releases them: their samples take about a second,
    # less than a busy machine can take to start the watch (CI once saw a watch begin
    # after both had exited, and find nothing to watch)
    weak = eval_runner("quality_weak", *KEEP, task_file=QUALITY, env=env)
    talk = eval_runner("quality_conversation", *KEEP, task_file=QUALITY, env=env)
    weak.discovery()
    talk.discovery()
    out = tmp_path / "live.jsonl"
    live = cli("watch", "--format", "jsonl", "--output", str(out), "--poll", "0.3",
               "--release-when-done")
    assert live.returncode == 0, live.stderr
    assert weak.wait() == 0 and talk.wait() == 0
    got = findings(out)
    level = best(got)
    assert level[("conversation-think-between-failures", "repeated_tool_call")] == "high"
    assert level[("weak-identical-failing-query", "repeated_tool_call")] == "high"
    assert level[("weak-cosmetic-failing-variants", "repeated_tool_call")] == "medium"
    assert confidence_rank(level[("weak-storm-behind-wrapper", "error_storm")]) >= 1
    assert confidence_rank(level[("weak-identical-failing-query", "error_storm")]) >= 1
    loud = {k: v for k, v in level.items() if confidence_rank(v) >= 1 and k[0] in (
        "conversation-user-asked-variants", "weak-exploration", "weak-quoted-errors",
        "conversation-booking", "conversation-long-talk")}
    assert not loud, loud
    # the evidence names what ran between the repeats, and why it did not count
    think = folded(got)[("repeated-tool-call", "conversation-think-between-failures")]
    facts = think["evidence"]["facts"]
    assert facts["changes_between"] == 0 and "think x2 (changes nothing)" in facts[
        "between_calls"]
    # the same runs read back from their logs give the same findings
    posts: list[dict[str, Any]] = []
    for proc in (weak, talk):
        post = tmp_path / f"post-{len(posts)}.jsonl"
        res = cli("watch", "--log-dir", str(proc.log_dir), "--once", "--format", "jsonl",
                  "--output", str(post))
        assert res.returncode == 0, res.stderr
        posts += findings(post)
    assert {k: (v["confidence"], v["count"], v["evidence"]["facts"].get("between_calls"))
            for k, v in folded(got).items()} == {
        k: (v["confidence"], v["count"], v["evidence"]["facts"].get("between_calls"))
        for k, v in folded(posts).items()}


def _summary(records: list[dict[str, Any]]) -> dict[Any, Any]:
    return {k: (v["confidence"], v["count"], v["evidence"]["facts"].get("between_calls"),
                v["evidence"]["facts"].get("breaks_between"))
            for k, v in folded(records).items()}


def ended(pid: int) -> bool:
    """Every task of the eval process ``pid`` finished (its samples ended)."""
    from watcher.discovery import list_servers
    from watcher.sources.http import HttpSource

    servers = [s for s in list_servers() if s.pid == pid]
    if not servers:
        return False
    source = HttpSource(servers[0], timeout=30)
    try:
        return all(t.finished for t in source.tasks())
    finally:
        source.close()


def watched_late(proc: Any, tmp_path: Path, what: str,
                 timeout: float = 180.0) -> tuple[Path, Path]:
    """Once ``proc``'s samples ended (the eval kept inspectable): a live watch of it,
    then a scan of its log; the two JSONL outputs."""
    wait_for(lambda: ended(proc.proc.pid), timeout=timeout, what=f"{what}'s samples to end")
    out = tmp_path / "live.jsonl"
    live = cli("watch", "--format", "jsonl", "--output", str(out), "--poll", "0.3",
               "--release-when-done")
    assert live.returncode == 0, live.stderr
    post = tmp_path / "post.jsonl"
    res = cli("watch", "--log-dir", str(proc.log_dir), "--once", "--format", "jsonl",
              "--output", str(post))
    assert res.returncode == 0, res.stderr
    return out, post


def test_a_watch_started_after_the_samples_ended_sees_the_users_replies(
        eval_runner: Any, tmp_path: Path) -> None:
    """An eval kept inspectable after its samples ended (and its sample buffer gone) is
    read over the control channel, whose content tier carries no model event's prompt:
    a customer's reply between two bookings went unseen, and the watch reported a
    conversation's retries at medium (breaks_between 0) where the log says low."""
    talk = eval_runner("quality_conversation", *KEEP, task_file=QUALITY,
                       env={"QUALITY_TOOL_DELAY": "0.2"})
    talk.discovery()
    out, post = watched_late(talk, tmp_path, "the conversation eval")
    got = _summary(findings(out))
    assert got[("near-identical-failing-calls", "conversation-user-asked-variants")][
        0] == "low"
    assert got == _summary(findings(post))
