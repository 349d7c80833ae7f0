"""Helpers for engine tests: load rules from YAML text, run events, fold findings."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from watcher.engine import Engine, RuleSet, load_rules, materialise
from watcher.findings import Finding, SampleRef

REPO = Path(__file__).resolve().parents[2]
REF = SampleRef(task="demo", task_id="t1", eval_id="ev1", model="mockllm/model",
                sample_id="s1", epoch=1)


def load_text(tmp_path: Path, text: str, name: str = "rules.yaml", library: bool = True,
              calls: bool = False, **kw: Any) -> RuleSet:
    """Load rules from YAML text (plus the built-in library macros when ``library``, and
    the built-in call effects and failure signatures when ``calls``)."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    paths: list[Path] = [path]
    if library:
        paths.append(REPO / "rules" / "library.yaml")
    if calls:
        paths += [REPO / "rules" / "effects.yaml", REPO / "rules" / "failures.yaml"]
    return load_rules(paths=paths, builtin=False, user_dir=False, **kw)


def events(*items: dict[str, Any], start: int = 0) -> list[dict[str, Any]]:
    return [materialise(start + i, it) for i, it in enumerate(items)]


def tool(function: str = "bash", **kw: Any) -> dict[str, Any]:
    return {"type": "tool", "function": function, **kw}


def model(completion: str = "", stop_reason: str = "stop", **kw: Any) -> dict[str, Any]:
    return {"type": "model", "completion": completion, "stop_reason": stop_reason, **kw}


def run(rules: RuleSet, items: list[dict[str, Any]], finalize: bool = True,
        ref: SampleRef = REF) -> list[Finding]:
    """Feed materialised events; return every snapshot emitted (finalized at the end)."""
    watch = Engine(rules).open_sample(ref)
    out: list[Finding] = []
    last = 0.0
    for i, it in enumerate(items):
        e = it if "uuid" in it else materialise(i, it)
        last = max(last, float(e["timestamp"]))
        out += watch.feed(e)
    if finalize:
        out += watch.finalize(last + 1)
    return out


def finding_rows(rules: list[Any], items: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What two runs of the same events must agree on, finding by finding: rule, status,
    count, confidence and evidence events (finalized at a fixed late time)."""
    watch = Engine(rules).open_sample(REF)
    out: list[Finding] = []
    for i, it in enumerate(items):
        out += watch.feed(materialise(i, it))
    out += watch.finalize(10_000.0)
    return [(f.rule, f.status, f.count, f.confidence, f.evidence.event_uuids) for f in out]


def episodes(found: list[Finding]) -> list[Finding]:
    """Last snapshot per finding id, in order of first emission."""
    last: dict[str, Finding] = {}
    for f in found:
        last[f.id] = f
    return list(last.values())
