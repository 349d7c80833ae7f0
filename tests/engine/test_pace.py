"""A task's own pace (engine/pace.py) and the ``idle`` detector that learns from it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.engine.util import REF, load_text
from watcher.engine import Engine, RuleLoadErrors, SampleStatus, materialise
from watcher.engine.pace import KEEP, CallClock, CallTimes, Pace
from watcher.events import normalise

LEARN = """
id: stall
title: stalled
category: stall
severity: warning
detect:
  idle:
    thresholds: {{model: 600, tool: 900, none: 60}}
    functions: {{long_job: 1000}}
    learn: {learn}
message: "{{waiting}}; {{basis}}"
"""


def learning(tmp_path: Path, learn: str = "{min_calls: 5}") -> Engine:
    return Engine(load_text(tmp_path, LEARN.format(learn=learn)))


def turns(n: int, gen: float, tool_s: float, start: float = 1000.0, fn: str = "bash",
          exact: bool = True) -> tuple[list[dict[str, Any]], float]:
    """``n`` turns of a ``gen``-second generation and a ``tool_s``-second tool call, as
    events (with their completion times when ``exact``, as raw events have them)."""
    out = []
    t = start
    for i in range(n):
        m: dict[str, Any] = {"type": "model", "stop_reason": "tool_calls", "timestamp": t}
        if exact:
            m["completed"] = t + gen
        out.append(m)
        t += gen
        c: dict[str, Any] = {"type": "tool", "function": fn, "arguments": {"i": i},
                             "timestamp": t}
        if exact:
            c["completed"] = t + tool_s
        out.append(c)
        t += tool_s
    return [materialise(i, e) for i, e in enumerate(out)], t


def tick(watch: Any, now: float, *in_flight: dict[str, Any], polls: int = 3) -> list[Any]:
    return watch.tick(now, SampleStatus(in_flight=list(in_flight),
                                        polls_without_change=polls, last_change_at=now - 1))


def gen(since: float, model: str = "mockllm/model") -> dict[str, Any]:
    return {"type": "model", "model": model, "since": since}


def call(since: float, fn: str = "bash") -> dict[str, Any]:
    return {"type": "tool", "function": fn, "since": since}


# ------------------------------------------------------------------------ timing calls


def test_call_times_percentiles_are_nearest_rank_over_the_recent_window() -> None:
    t = CallTimes()
    for x in range(1, 101):
        t.add(float(x))
    assert t.percentile(95) == 95.0 and t.percentile(50) == 50.0 and t.longest() == 100.0
    for _ in range(KEEP):
        t.add(1.0)
    assert t.count == KEEP and t.total == 100 + KEEP and t.longest() == 1.0
    # the kept ones are the most recent, oldest first, however often the ring went round
    for x in range(KEEP + 7):
        t.add(float(x))
    assert t.durations == [float(x) for x in range(7, KEEP + 7)]
    assert t.percentile(100) == KEEP + 6 and t.count == KEEP


def test_completed_times_are_exact_and_compact_events_are_timed_to_the_next_event() -> None:
    pace = Pace()
    clock = CallClock(pace)
    # raw events (logs, the sample buffer): completed - timestamp, whatever follows
    for e in turns(2, 3.0, 1.0)[0]:
        clock.see(e)
    assert pace.calls["model:mockllm/model"].durations == [3.0, 3.0]
    assert pace.calls["tool:bash"].durations == [1.0, 1.0]
    # compact events (the control channel): to the next event; two tool calls of one
    # turn each count until the next event that is no tool call; the last call of the
    # sample is not timed (nothing says when it ended)
    pace = Pace()
    clock = CallClock(pace)
    for i, (etype, ts, fn) in enumerate([("model", 0.0, None), ("tool", 2.0, "a"),
                                         ("tool", 2.1, "b"), ("model", 9.0, None),
                                         ("tool", 12.0, "a")]):
        clock.see(materialise(i, {"type": etype, "timestamp": ts, "function": fn,
                                  "compact": True}))
    assert pace.calls["model:mockllm/model"].durations == [2.0, 3.0]
    assert pace.calls["tool:a"].durations == [7.0]
    assert pace.calls["tool:b"].durations == [6.9]


def test_failed_calls_do_not_count_toward_what_is_normal() -> None:
    pace = Pace()
    clock = CallClock(pace)
    clock.see(materialise(0, {"type": "model", "timestamp": 0.0, "completed": 600.0,
                              "error": "timed out"}))
    clock.see(materialise(1, {"type": "tool", "function": "bash", "timestamp": 600.0,
                              "completed": 900.0, "error": "timeout"}))
    assert pace.calls == {}


def test_a_raw_event_keeps_when_it_completed_and_a_compact_one_has_no_such_field() -> None:
    raw = {"event": "tool", "uuid": "u", "timestamp": "2026-01-01T00:00:00+00:00",
           "completed": "2026-01-01T00:00:04.500000+00:00", "function": "bash",
           "arguments": {"cmd": "ls"}, "result": "x", "pending": None}
    e = normalise(raw, "content")
    assert e["completed"] - e["timestamp"] == 4.5
    compact = {"event": "tool", "uuid": "u", "timestamp": 1.0, "pending": False,
               "function": "bash", "has_error": False}
    assert "completed" not in normalise(compact, "content")


def test_a_task_learns_from_all_its_samples_and_tasks_do_not_mix(tmp_path: Path) -> None:
    engine = learning(tmp_path)
    for i in range(5):  # five samples, one turn each
        w = engine.open_sample(replace(REF, sample_id=f"s{i}"))
        for e in turns(1, 3.0, 1.0)[0]:
            w.feed(e)
    busy = engine.open_sample(replace(REF, sample_id="busy"))
    (f,) = tick(busy, 1040.0, gen(1000.0))
    assert f.evidence.facts["learned"] is True and f.evidence.facts["calls"] == 5
    other = engine.open_sample(replace(REF, task_id="t2", sample_id="busy"))
    assert tick(other, 1040.0, gen(1000.0)) == []  # t2 knows nothing: the default 600 s


def test_a_rule_that_does_not_learn_times_nothing(tmp_path: Path) -> None:
    engine = Engine(load_text(tmp_path, LEARN.format(learn="null").replace(
        "    learn: null\n", "")))
    assert not engine.paced
    assert engine.open_sample(REF).calls is None


# ------------------------------------------------------------------------ the threshold


def test_a_quick_tasks_hung_generation_is_a_stall_after_the_floor(tmp_path: Path) -> None:
    watch = learning(tmp_path).open_sample(REF)
    events, t = turns(6, 3.0, 1.0)
    for e in events:
        watch.feed(e)
    assert tick(watch, t + 29.0, gen(t)) == []  # 30 s: the floor (5 x 3 s is less)
    assert tick(watch, t + 40.0, gen(t), polls=1) == []  # one quiet poll is not enough
    (f,) = tick(watch, t + 40.0, gen(t))
    facts = f.evidence.facts
    assert facts["threshold_seconds"] == 30.0 and facts["kind"] == "model"
    assert facts["percentile_seconds"] == 3.0 and facts["calls"] == 6
    assert f.summary == ("model call (mockllm/model) pending 40 s; this task's calls to the "
                         "model: p95 3.0 s over 6 calls, longest 3.0 s; threshold 30 s "
                         "(the floor)")


def test_the_threshold_is_factor_times_the_percentile_and_never_below_the_longest(
        tmp_path: Path) -> None:
    watch = learning(tmp_path, "{min_calls: 5, factor: 4, percentile: 50}").open_sample(REF)
    events, t = turns(9, 20.0, 1.0)  # generations of 20 s ...
    events += turns(1, 200.0, 1.0, start=t)[0]  # ... and one of 200 s
    t += 201.0
    for i, e in enumerate(events):
        watch.feed(dict(e, uuid=f"u{i}"))
    assert tick(watch, t + 199.0, gen(t)) == []  # 4 x p50 = 80 s, but one took 200 s
    (f,) = tick(watch, t + 201.0, gen(t))
    assert f.evidence.facts["threshold_seconds"] == 200.0
    assert "threshold 200 s (the longest of them)" in f.summary
    watch = learning(tmp_path, "{min_calls: 5, factor: 4, percentile: 50}").open_sample(REF)
    for e in turns(9, 20.0, 1.0)[0]:
        watch.feed(e)
    (f,) = tick(watch, 2000.0, gen(1900.0))
    assert f.evidence.facts["threshold_seconds"] == 80.0 and "(4× p50)" in f.summary


def test_slow_normal_tool_calls_are_not_stalls(tmp_path: Path) -> None:
    """Three-minute builds: a seven-minute one is within five times their pace."""
    watch = learning(tmp_path).open_sample(REF)
    events, t = turns(6, 20.0, 180.0, fn="build")
    for e in events:
        watch.feed(e)
    assert tick(watch, t + 420.0, call(t, "build")) == []
    (f,) = tick(watch, t + 901.0, call(t, "build"))
    assert "this task's build calls: p95 180 s over 6 calls" in f.summary


def test_too_little_known_keeps_the_defaults(tmp_path: Path) -> None:
    watch = learning(tmp_path).open_sample(REF)
    events, t = turns(3, 40.0, 1.0)  # the first calls are the slow ones
    for e in events:
        watch.feed(e)
    assert tick(watch, t + 300.0, gen(t)) == []
    (f,) = tick(watch, t + 601.0, gen(t))
    assert f.evidence.facts["learned"] is False and f.evidence.facts["calls"] == 3
    assert "default threshold 600 s (only 3 of this task's calls to the model have " \
           "completed; 5 are needed to judge its pace)" in f.summary
    # a function the task has not run yet has no pace of its own either
    (g,) = tick(learning(tmp_path).open_sample(REF), t + 901.0, call(t, "new_tool"))
    assert "none of this task's new_tool calls has completed yet" in g.summary


def test_a_per_function_threshold_in_the_rule_wins_over_the_learned_one(
        tmp_path: Path) -> None:
    watch = learning(tmp_path).open_sample(REF)
    events, t = turns(6, 3.0, 1.0, fn="long_job")
    for e in events:
        watch.feed(e)
    assert tick(watch, t + 999.0, call(t, "long_job")) == []
    (f,) = tick(watch, t + 1001.0, call(t, "long_job"))
    assert "threshold 1000 s, set for long_job in the rule" in f.summary


def test_nothing_in_flight_is_judged_by_its_fixed_threshold(tmp_path: Path) -> None:
    watch = learning(tmp_path).open_sample(REF)
    for e in turns(6, 3.0, 1.0)[0]:
        watch.feed(e)
    (f,) = watch.tick(1100.0, SampleStatus(last_change_at=1030.0, polls_without_change=2))
    assert f.summary == ("nothing in flight and nothing new for 70 s; threshold 60 s with "
                         "nothing in flight")


def test_learn_true_takes_the_defaults_and_bad_values_are_located(tmp_path: Path) -> None:
    engine = learning(tmp_path, "true")
    spec = engine.rules[0].detector
    assert (spec.learn.percentile, spec.learn.factor, spec.learn.floor,
            spec.learn.min_calls) == (95.0, 5.0, 30.0, 20)
    with pytest.raises(RuleLoadErrors) as err:
        learning(tmp_path, "{factor: 0.5}")
    assert "factor" in err.value.render() and "rules.yaml:" in err.value.render()


def test_a_learning_rule_alone_reads_the_calls_it_learns_from(tmp_path: Path) -> None:
    """The stall rule alone reads model, tool and sandbox events (what it learns from and
    sees in flight), not every event type: reading all types through the sample buffer
    showed no call in flight during three-minute tool calls (false stalls)."""
    learner = learning(tmp_path)
    assert learner.rules[0].reads_events is False
    assert learner.event_types == frozenset({"model", "tool", "sandbox"})
    plain = Engine(load_text(tmp_path, LEARN.format(learn="null").replace(
        "    learn: null\n", ""), "plain.yaml"))
    assert plain.event_types == frozenset()  # unchanged: no learning, no calls read
