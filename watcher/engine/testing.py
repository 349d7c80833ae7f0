"""Run a rule's inline ``tests:`` cases: the rule pack's own regression suite.

Test events are partial normalised events; :func:`materialise` fills what a
source would (uuid, timestamp, ``has_error``, parsed ``args``, display texts cut to
the content width with the whole texts kept beside them) so cases stay short. A model
event's prompt defaults to what a react() agent would have sent: the task first, a
tool's result after a call, the continue message after a text-only turn. An event
marked ``compact: true`` is served as the control channel's content tier serves it
(cut text, no whole values). Besides events a case may hold control items: ``{tick: {...}}`` calls
``tick`` with a :class:`SampleStatus`, ``{row: {...}, context: [rows]}`` calls
``sample_row``. Each case runs the one rule alone on a fresh sample, then
finalizes and compares episodes (last snapshot per finding id) with ``expect``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from watcher.engine.rule import Rule
from watcher.engine.runtime import Engine, RunContext, SampleStatus
from watcher.events import WHOLE, Event, parse_args, truncate
from watcher.findings import Finding, SampleRef

BASE_TS = 1_000.0
TEST_REF = SampleRef(task="rule-test", task_id="t", eval_id="e", model="mockllm/model",
                     sample_id="1", epoch=1)


# react()'s continue message (DEFAULT_CONTINUE_PROMPT, submit tool ``submit``)
REACT_CONTINUE = ("\nPlease proceed to the next step using your best judgement. If you "
                  "believe you have completed the task, please call the `submit()` tool "
                  "with your final answer.\n")
TEXT_FIELDS = ("arguments", "result", "completion", "prompt")


def react_prompt(previous: Event | None) -> tuple[str, str]:
    """``(role, text)`` of the message a react() agent sends after ``previous``."""
    if previous is None:
        return "user", "Solve the task."
    if previous.get("type") == "tool":
        return "tool", str(previous.get("result") or "")
    if previous.get("type") == "model" and previous.get("stop_reason") != "tool_calls":
        return "user", REACT_CONTINUE
    return "tool", ""


def materialise(i: int, raw: dict[str, Any], base_ts: float = BASE_TS,
                previous: Event | None = None) -> Event:
    """A complete normalised event from a short test description."""
    e = dict(raw)
    compact = bool(e.pop("compact", False))
    if "type" not in e:
        e["type"] = "tool" if "function" in e else (
            "model" if "completion" in e or "stop_reason" in e else "info")
    e.setdefault("uuid", f"ev{i}")
    e.setdefault("span_id", None)
    e.setdefault("timestamp", base_ts + i)
    e.setdefault("pending", False)
    t = e["type"]
    if t == "tool":
        args = e.get("arguments", "")
        if not isinstance(args, str):
            args = json.dumps(args)
        e["arguments"] = args
        e.setdefault("args", parse_args(args))
        e.setdefault("result", "")
        e.setdefault("error", None)
        e.setdefault("id", f"call{i}")
        e.setdefault("has_error", e.get("error") is not None)
    elif t == "model":
        e.setdefault("model", "mockllm/model")
        e.setdefault("stop_reason", "stop")
        e.setdefault("completion", "")
        e.setdefault("error", None)
        e.setdefault("has_error", e.get("error") is not None)
        e.setdefault("tokens", None)
        if "prompt_role" not in e and not compact:
            e["prompt_role"], e["prompt"] = react_prompt(previous)
    elif t == "error":
        e.setdefault("has_error", True)
    whole: dict[str, str] = {}
    for name in TEXT_FIELDS:
        full = e.get(name)
        if isinstance(full, str):
            e[name] = truncate(full)
            if e[name] != full:
                whole[name] = full
    if not compact:
        e[WHOLE] = whole
    return e


@dataclass
class CaseResult:
    rule: str
    name: str
    passed: bool
    expected: list[dict[str, Any]]
    actual: list[dict[str, Any]]
    problem: str = ""
    file: str = ""
    line: int = 0
    findings: list[Finding] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "case": self.name, "passed": self.passed,
                "expected": self.expected, "actual": self.actual, "problem": self.problem,
                "file": self.file, "line": self.line}


def case_items(rule: Rule, case: dict[str, Any]) -> list[dict[str, Any]]:
    if "events" in case:
        return list(case["events"])
    path = Path(rule.source).parent / case["file"]
    items = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            items.append(json.loads(line))
    return items


def run_case(rule: Rule, case: dict[str, Any], extra_rules: list[Rule] | None = None
             ) -> CaseResult:
    """Run one inline case of ``rule`` and compare episodes with ``expect``."""
    engine = Engine([rule] + list(extra_rules or []))
    watch = engine.open_sample(TEST_REF)
    found: list[Finding] = []
    last_ts = BASE_TS
    previous: Event | None = None
    try:
        for i, item in enumerate(case_items(rule, case)):
            if "tick" in item:
                spec = dict(item["tick"] or {})
                now = float(spec.pop("now", last_ts + 1))
                spec.setdefault("last_event_at", last_ts)
                found += watch.tick(now, SampleStatus(**spec))
                last_ts = max(last_ts, now)
            elif "row" in item:
                context = RunContext.from_rows(item.get("context") or [])
                found += watch.sample_row(item["row"], context, now=last_ts)
            else:
                e = materialise(i, item, previous=previous)
                previous = e
                last_ts = max(last_ts, float(e["timestamp"]))
                found += watch.feed(e)
        found += watch.finalize(last_ts + 1)
    except Exception as exc:  # a crashing rule is a failing case, not a crashing runner
        return CaseResult(rule.id, case["name"], False, case["expect"], [],
                          f"error while running: {type(exc).__name__}: {exc}",
                          rule.source, case.get("_line", 0))
    last: dict[str, Finding] = {}
    for f in found:
        last[f.id] = f
    episodes = sorted(last.values(), key=lambda f: f.sort_key())
    actual = [{"rule": f.rule, "count": f.count, "confidence": f.confidence,
               "severity": f.severity, "status": f.status} for f in episodes]
    expected = [dict(x) for x in case["expect"]]
    problem = ""
    if len(expected) != len(actual):
        problem = f"expected {len(expected)} finding(s), got {len(actual)}"
    else:
        for n, (want, got) in enumerate(zip(expected, actual, strict=True), 1):
            want.setdefault("rule", rule.id)
            diffs = [f"{k}: expected {v!r}, got {got.get(k)!r}"
                     for k, v in want.items() if got.get(k) != v]
            if diffs:
                problem = f"finding {n}: " + "; ".join(diffs)
                break
    return CaseResult(rule.id, case["name"], not problem, case["expect"], actual, problem,
                      rule.source, case.get("_line", 0), found)


def run_rule_tests(rules: list[Rule]) -> list[CaseResult]:
    """Every inline case of every rule, in order."""
    return [run_case(r, case) for r in rules for case in r.tests]
