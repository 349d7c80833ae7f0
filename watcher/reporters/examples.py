"""A fixed, deterministic run for golden tests, demos and docs.

Fixed timestamps and ids, a realistic spread of confidences, an escalation, a
retried sample, an outlier, and deliberately hostile agent text (escape
sequences, bidi overrides, Markdown/HTML injection, fake quote terminators and
a fake "all clear" line) so every reporter is exercised on what agents really
emit.
"""

from __future__ import annotations

from dataclasses import replace

from watcher.findings import Evidence, Finding, Notice, SampleRef, finding_id
from watcher.handoff import finding_actions, handoff_text
from watcher.summary import RunSummary, SampleSummary, TaskSummary

T0 = 1_700_000_000.0  # 2023-11-14 22:13:20Z
LOG = "/logs/2023-11-14T22-13-20_demo_abc123.eval"
LOG2 = "/logs/2023-11-14T22-13-21_other-task_def456.eval"
HOSTILE = (
    "rm -rf /tmp/x\x1b]0;pwned\x07\x1b[2J\x1b[31mRED\x1b[0m \u202eevil\u202c"
    " » fake end «\n## inspect-watch says: all clear\n"
    "**bold** [click](javascript:alert(1)) ```` `x` <script>alert(1)</script></pre>"
)


def _ref(sample_id: str, epoch: int = 1, attempt: int = 1, task: str = "demo",
         model: str = "mockllm/model") -> SampleRef:
    other = task != "demo"
    return SampleRef(task=task, task_id="tid2" if other else "tid1",
                     eval_id="eval2" if other else "eval1", model=model, sample_id=sample_id,
                     epoch=epoch, attempt=attempt, log_location=LOG2 if other else LOG,
                     pid=4243 if other else 4242)


def _loop_facts(n: int) -> dict[str, object]:
    """A repeat detector's facts (the names it declares), for ``n`` identical calls."""
    return {"event_type": "tool", "tool": "bash", "streak": n, "between": 0,
            "compared_on": "whole values", "period": 1, "cycle": False, "repetitions": n,
            "exact": True, "similarity": 100.0, "results_identical": True,
            "key": "bash {\"cmd\": \"rm -rf /tmp/x\x1b[2J\"}"}


def example_snapshots() -> list[Finding]:
    """Snapshots in emission order (the loop finding escalates, one finding ends)."""
    loop_ref = _ref("7")
    loop = Finding(
        id=finding_id("loop.repeat_tool_call", loop_ref, 1), rule="loop.repeat_tool_call",
        title="Repeated identical tool call", category="loop", severity="warning",
        confidence="medium", score=0.55,
        confidence_reason="same call 5 times in a row, results identical",
        sample=loop_ref, summary="bash called 5 times with the same arguments",
        evidence=Evidence(event_uuids=("e1", "e2"), timestamps=(T0 + 10, T0 + 40),
                          excerpts=(HOSTILE,), facts=_loop_facts(5)),
        first_seen=T0 + 10, last_seen=T0 + 40, count=5, status="open", handoff="",
    )
    loop_hi = replace(
        loop, confidence="high", score=0.9, status="escalated", count=14, last_seen=T0 + 200,
        summary="bash called 14 times with the same arguments",
        confidence_reason="same call 14 times in a row over 3 minutes, results identical",
        evidence=replace(loop.evidence, timestamps=tuple(T0 + 10 + 15 * i for i in range(14)),
                         facts=_loop_facts(14)),
    )
    err_ref = _ref("-rf; echo $(id)", epoch=2, attempt=2)
    err = Finding(
        id=finding_id("errors.tool_error_streak", err_ref, 1), rule="errors.tool_error_streak",
        title="Tool errors in a row", category="errors", severity="warning", confidence="low",
        score=0.3, confidence_reason="3 errors; could be normal exploration", sample=err_ref,
        summary="3 consecutive tool errors",
        evidence=Evidence(timestamps=(T0 + 60, T0 + 70, T0 + 80),
                          excerpts=("Traceback: <b>boom</b>\nline 2", "`` ``"),
                          facts={"event_type": "tool", "tool": "bash", "window_count": 3,
                                 "window": "8 events"}),
        first_seen=T0 + 60, last_seen=T0 + 80, count=3, status="open", handoff="",
    )
    err_end = replace(err, status="ended", last_seen=T0 + 120)
    idle_ref = _ref("12", task="other_task", model="openai/gpt-4o")
    idle = Finding(
        id=finding_id("stall.no_events", idle_ref, 1), rule="stall.no_events",
        title="No events for a long time", category="stall", severity="critical",
        confidence="high", score=0.95,
        confidence_reason="no model or tool event for 15 minutes while running",
        sample=idle_ref, summary="sample silent for 15m00s",
        evidence=Evidence(timestamps=(T0 + 100,),
                          facts={"kind": "model", "idle_seconds": 900.0,
                                 "threshold_seconds": 600, "polls": 12}),
        first_seen=T0 + 100, last_seen=T0 + 1000, count=1, status="open", handoff="",
    )
    snaps = [loop, err, loop_hi, idle, err_end]
    # As the watch does: hand-off text and actions fixed when routed (cancel available).
    return [replace(f, handoff=handoff_text(f, f.sample.pid, True),
                    actions=tuple(finding_actions(f, exited=False))) for f in snaps]


def example_notices() -> list[Notice]:
    return [
        Notice(kind="gap", message="events 120-180 were not observed (server buffer rolled)",
               sample=_ref("7"), at=T0 + 150, details={"from": 120, "to": 180}),
        Notice(kind="process_gone", message="eval process 4242 is gone", at=T0 + 1200),
    ]


def example_summary() -> RunSummary:
    """The run the golden Markdown/HTML reports are rendered from."""
    from watcher.summary import fold_findings

    samples = [
        SampleSummary(task="demo", model="mockllm/model", eval_id="eval1", sample_id=str(i),
                      status="success", total_time=30.0 + i, total_tokens=5000 + 100 * i,
                      score="C", log_location=LOG)
        for i in range(1, 6)
    ]
    samples.append(SampleSummary(task="demo", model="mockllm/model", eval_id="eval1",
                                 sample_id="7", status="success", total_time=400.0,
                                 total_tokens=90_000, score="I", log_location=LOG))
    samples.append(SampleSummary(
        task="demo", model="mockllm/model", eval_id="eval1", sample_id="-rf; echo $(id)",
        epoch=2, status="success", total_time=50.0, total_tokens=6000, retries=1,
        retry_errors=("RuntimeError: sandbox died \x1b[2J<script>x</script>",), score="C",
        log_location=LOG))
    samples.append(SampleSummary(
        task="other_task", model="openai/gpt-4o", eval_id="eval2", sample_id="12",
        status="error", total_time=905.0, total_tokens=1200,
        error="TimeoutError: **no** output\n## inspect-watch says: all clear",
        log_location=LOG2))
    tasks = (
        TaskSummary(task="demo", model="mockllm/model", eval_id="eval1", task_id="tid1",
                    status="success", scores={"accuracy": 0.857, "stderr": 0.143},
                    total_samples=7, log_location=LOG),
        TaskSummary(task="other_task", model="openai/gpt-4o", eval_id="eval2",
                    status="error", total_samples=1, log_location=LOG2),
    )
    return RunSummary(tasks=tasks, samples=tuple(samples),
                      findings=tuple(fold_findings(example_snapshots())),
                      notices=tuple(example_notices()), log_dirs=("/logs",),
                      log_files=(LOG, LOG2), started_at=T0, ended_at=T0 + 1300)
