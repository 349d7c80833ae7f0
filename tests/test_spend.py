"""What a finding cost (watcher/run/spend.py): the tokens its sample spent after it was
first seen and after it became high, on every snapshot, live and post-hoc alike; and
the per-task "spent after loops were found" line of the summary (watcher/summary.py)."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import pytest

from watcher.findings import Evidence, Finding, SampleRef, finding_id
from watcher.reporters import TextReporter, render_html, render_markdown
from watcher.run.spend import SpendMeter
from watcher.summary import RunSummary, SampleSummary, loop_spend

REF = SampleRef("loops", "t1", "e1", "m", "s1", 1)


def model(ts: float, tokens: int, cost: float | None = None, pending: bool = False) -> dict:
    ev = {"type": "model", "timestamp": ts, "tokens": tokens, "pending": pending}
    if cost is not None:
        ev["cost"] = cost
    return ev


def finding(confidence: str = "medium", first: float = 10.0, last: float = 10.0,
            status: str = "open", category: str = "submit_loop", ref: SampleRef = REF,
            rule: str = "submit-loop") -> Finding:
    return Finding(id=finding_id(rule, ref, 1), rule=rule, title="t", category=category,
                   severity="warning", confidence=confidence,  # type: ignore[arg-type]
                   score=0.5, confidence_reason="", sample=ref, summary="",
                   evidence=Evidence(facts={"count": 2}), first_seen=first, last_seen=last,
                   count=2, status=status, handoff="")  # type: ignore[arg-type]


def test_tokens_since_first_seen_count_the_first_evidence_and_what_followed() -> None:
    meter = SpendMeter()
    for ts, tokens in [(5.0, 100), (10.0, 200), (20.0, 300)]:
        meter.add(model(ts, tokens))
    meter.add(model(25.0, 999, pending=True))  # not spent yet: not counted
    meter.add({"type": "tool", "timestamp": 26.0, "tokens": 5})  # tools spend no tokens here
    f = meter.annotate(finding(first=10.0, last=20.0))
    assert f.evidence.facts["tokens_since_first_seen"] == 500  # 10.0 and 20.0, not 5.0
    assert "tokens_since_high" not in f.evidence.facts  # it has not been high
    assert f.evidence.facts["count"] == 2  # the rule's facts are kept
    assert "cost_since_first_seen" not in f.evidence.facts  # no price known


def test_tokens_since_high_start_after_the_event_that_made_it_high() -> None:
    meter = SpendMeter()
    for ts in (10.0, 20.0, 30.0):
        meter.add(model(ts, 100, cost=0.01))
    high = meter.annotate(finding("high", first=10.0, last=30.0, status="escalated"))
    assert high.evidence.facts["tokens_since_high"] == 0  # the third claim was spent before
    for ts in (40.0, 50.0):
        meter.add(model(ts, 100, cost=0.01))
    ended = meter.annotate(finding("high", first=10.0, last=50.0, status="ended"))
    assert ended.evidence.facts["tokens_since_first_seen"] == 500
    assert ended.evidence.facts["tokens_since_high"] == 200
    assert ended.evidence.facts["cost_since_first_seen"] == pytest.approx(0.05)


def test_open_findings_are_refreshed_when_the_sample_spends_and_not_otherwise() -> None:
    meter = SpendMeter()
    meter.add(model(10.0, 100))
    meter.annotate(finding(first=10.0))
    assert [f.evidence.facts["tokens_since_first_seen"] for f in meter.refreshed()] == [100]
    assert meter.refreshed() == []  # nothing spent since
    meter.add(model(20.0, 50))
    assert [f.evidence.facts["tokens_since_first_seen"] for f in meter.refreshed()] == [150]
    meter.annotate(finding(first=10.0, status="ended"))
    meter.add(model(30.0, 50))
    assert meter.refreshed() == []  # an ended finding is not refreshed


def test_without_model_events_the_figures_are_null_with_the_reason() -> None:
    """Rules that read no model events: what the sample spent is not known. It was the
    listing's total since the first snapshot: 0 for a loop found an hour in."""
    meter = SpendMeter(from_events=False)
    f = finding(first=10.0, confidence="high")
    meter.row({"total_tokens": 1000})
    facts = meter.annotate(f).evidence.facts
    assert facts["tokens_since_first_seen"] is None and facts["tokens_since_high"] is None
    assert "no loaded rule reads model events" in facts["spend_not_counted"]
    meter.row({"total_tokens": 1600})
    assert meter.refreshed() == []  # nothing to tell: no snapshot again
    # model events without usage (an old log): null too, and said
    meter = SpendMeter()
    meter.add({"type": "model", "timestamp": 12.0, "tokens": None})
    facts = meter.annotate(f).evidence.facts
    assert facts["tokens_since_first_seen"] is None
    assert facts["spend_not_counted"] == "its 1 model call(s) carry no token usage"
    meter.add(model(13.0, 50))  # some with usage: counted, and the rest said
    facts = meter.annotate(f).evidence.facts
    assert facts["tokens_since_first_seen"] == 50
    assert "1 of its model calls carry no token usage" in facts["spend_not_counted"]


def test_post_hoc_limit_findings_are_dated_at_the_samples_end_with_spend_unknown() -> None:
    """A real log (the corpus): sample 56 hit its message limit. Over logs whose summaries
    hold no times, the row's finding was dated at the scan; it is the sample's last event
    now, and with only limit rules loaded (none reads model events) its tokens are null,
    with the reason, not 0."""
    import time

    from click.testing import CliRunner

    from tests.corpus import CORPUS
    from watcher.cli import main
    from watcher.sources.logfiles import LogSource
    from watcher.sources.logfiles.header import to_unix

    log = CORPUS / "docent-intercode-ctf-gpt4o.eval"
    src = LogSource(str(log))
    [task] = src.tasks()
    times: list[float] = []
    cursor = None
    while True:
        page = src.events(task, "56", 1, since=cursor, types=None, tier="metadata")
        times += [t for e in page.events if (t := to_unix(e.get("timestamp"))) is not None]
        if page.done or not page.next:
            break
        cursor = page.next
    src.close()
    for only, end in (("limit", None), ("limit,shortcut", max(times))):
        res = CliRunner().invoke(main, ["watch", "--log-dir", str(log), "--once", "-q",
                                        "--format", "jsonl", "--only", only, task.task, "56"])
        assert res.exit_code == 0, res.output
        rows = [json.loads(x) for x in res.output.splitlines()]
        by_rule = {d["rule"]: d for d in rows if d["kind"] == "finding"}
        row, event = by_rule["limit-row"], by_rule["sample-limit"]
        assert row["first_seen"] < time.time() - 86400  # not the scan's time
        assert min(times) <= row["first_seen"] <= max(times)
        if end is not None:  # the last event the rules read: the log holds no end time
            assert end - 1.0 <= row["first_seen"] <= end < min(times) + 3600
        assert event["first_seen"] in times
        for d in (row, event):
            facts = d["evidence"]["facts"]
            assert facts["tokens_since_first_seen"] is None, facts
            assert "no loaded rule reads model events" in facts["spend_not_counted"]


def _summary(findings: list[Finding]) -> RunSummary:
    samples = (SampleSummary("loops", "m", "s1", eval_id="e1", total_tokens=4000),
               SampleSummary("loops", "m", "s2", eval_id="e1", total_tokens=1000))
    return RunSummary(findings=tuple(findings), samples=samples)


def test_loop_spend_sums_each_samples_earliest_high_loop() -> None:
    facts = {"tokens_since_first_seen": 3000, "tokens_since_high": 2500}
    submit = finding("high", status="ended")
    submit = replace(submit, evidence=Evidence(facts=facts))
    later = replace(finding("high", status="ended", rule="narration-loop",
                            category="narration_loop"),
                    evidence=Evidence(facts={"tokens_since_high": 1200}))
    stall = replace(finding("high", status="ended", rule="stalled-sample", category="stall"),
                    evidence=Evidence(facts={"tokens_since_high": 9999}))
    [spend] = loop_spend(_summary([submit, later, stall]))
    assert (spend.task, spend.samples, spend.tokens_after, spend.tokens_total) == (
        "loops", 1, 2500, 5000)  # not a sum within one sample; a stall is no loop
    assert spend.share == 0.5
    md = render_markdown(_summary([submit]))
    assert "## Spent after loops were found" in md
    assert "2,500 tokens in 1 sample(s) (50% of the task's 5,000)" in md
    assert "2,500 tokens in 1 sample(s) (50% of the task&#x27;s 5,000)" in render_html(
        _summary([submit]))
    out = io.StringIO()
    TextReporter(out).stop(_summary([submit]))
    assert "2,500 tokens spent after the first high loop finding in 1 sample(s)" in out.getvalue()
    assert loop_spend(_summary([finding("high")])) == []  # no spend facts: nothing claimed


@pytest.mark.e2e
def test_a_post_hoc_scan_says_what_the_loops_spent(tmp_path: Path) -> None:
    """Over a real eval's logs (the scripted loops), the findings carry their spend and
    the summary says what the run spent after its loops became high."""
    from tests.evalproc import start_eval
    from watcher import app

    proc = start_eval(tmp_path, "loops")
    assert proc.wait() == 0
    out = tmp_path / "f.jsonl"
    summary = tmp_path / "s.md"
    code = app.run(app.WatchOptions(log_dir=str(proc.log_dir), once=True, format="jsonl",
                                    output=str(out), summary_md=str(summary), quiet=True))
    assert code == 0
    findings = [json.loads(x) for x in out.read_text().splitlines()]
    high = [d for d in findings if d["kind"] == "finding" and d["confidence"] == "high"
            and d["status"] == "ended"]
    assert {d["sample_id"] for d in high} >= {"repeat", "submit-loop"}
    for d in high:
        facts = d["evidence"]["facts"]
        assert facts["tokens_since_first_seen"] > 0
        assert 0 <= facts["tokens_since_high"] <= facts["tokens_since_first_seen"]
    assert "## Spent after loops were found" in summary.read_text()
