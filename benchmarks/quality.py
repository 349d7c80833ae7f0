"""Measure the built-in rule pack against a labelled corpus: recall, precision, false highs.

The corpus is the quality eval (``tests/evals/quality_evals.py``, run with the scripted
model so every pattern and its look-alikes are acted out by a real Inspect agent loop)
plus the real transcripts in ``/work/shared/corpus/inspect/``. Each sample is read from
its ``.eval`` log, normalised at the content tier (as a live watch would see it) and run
through the whole pack post-hoc; sample rules see the listing row and the task context.

Usage::

    python benchmarks/quality.py                     # run the quality eval, then score
    python benchmarks/quality.py --log-dir DIR       # reuse logs already written
    python benchmarks/quality.py --markdown docs/quality.md

Labels (``benchmarks/quality_labels.yaml``) map task → sample id → categories the sample
must raise (``expect``) and categories it may raise without counting against precision
(``weak``); a sample not listed expects nothing. A (sample, category) pair is scored
once, at the highest confidence any finding of that category reached on any epoch.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from watcher.engine import Engine, RunContext, load_rules
from watcher.events import normalise
from watcher.findings import SampleRef, confidence_rank
from watcher.sources.logs import iter_log_samples

ROOT = Path(__file__).resolve().parent.parent
LABELS = Path(__file__).with_name("quality_labels.yaml")
EVAL_FILE = ROOT / "tests" / "evals" / "quality_evals.py"
CORPUS = Path(os.environ.get("INSPECT_WATCH_CORPUS", "/work/shared/corpus/inspect"))
LEVELS = ("low", "medium", "high")
TARGET_RECALL = {"submit_loop": 0.95, "repeated_tool_call": 0.95, "shortcut": 0.8}


@dataclass
class SampleResult:
    task: str
    sample_id: str
    # category -> highest confidence reached, and the rules that reached it
    found: dict[str, str] = field(default_factory=dict)
    rules: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

    def add(self, category: str, level: str, rule: str) -> None:
        cur = self.found.get(category)
        if cur is None or confidence_rank(level) > confidence_rank(cur):
            self.found[category] = level
        self.rules[category].add(f"{rule}:{level}")


def run_quality_eval(log_dir: str, samples: list[str] | None = None,
                     task: str | None = None, env: dict[str, str] | None = None) -> None:
    """``inspect eval`` the quality tasks with the scripted model into ``log_dir``.

    The run gets a private ``XDG_DATA_HOME`` unless ``env`` sets one, so its control
    discovery file does not show up in live watchers on the same machine.
    """
    # relative to the repo root: Inspect globs a bare file path, and globs must be relative
    target = str(EVAL_FILE.relative_to(ROOT)) + (f"@{task}" if task else "")
    cmd = ["inspect", "eval", target, "--log-dir", log_dir,
           "--display", "none", "--max-samples", "8", "--no-fail-on-error"]
    if samples:  # the quality task filters its scenarios itself
        cmd += ["-T", "only=" + ",".join(samples)]
    xdg = tempfile.mkdtemp(prefix="quality-xdg-")
    full = dict(os.environ, INSPECT_LOG_FORMAT="eval", XDG_DATA_HOME=xdg)
    full.update(env or {})
    try:
        subprocess.run(cmd, check=True, env=full, cwd=str(ROOT), stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    finally:
        shutil.rmtree(xdg, ignore_errors=True)


def scan(log_dirs: list[str], engine: Engine | None = None) -> dict[tuple[str, str], SampleResult]:
    """Every sample of every log under ``log_dirs`` through the pack, post-hoc."""
    if engine is None:
        engine = Engine(load_rules(user_dir=False).rules)
    results: dict[tuple[str, str], SampleResult] = {}
    for log_dir in log_dirs:
        batch = list(iter_log_samples(log_dir))
        contexts: dict[str, RunContext] = {}
        for task, row, _ in batch:
            contexts.setdefault(task.task_id, RunContext(task=task.task)).add(_row(row))
        for task, row, events in batch:
            ref = SampleRef(task=task.task, task_id=task.task_id, eval_id=task.eval_id,
                            model=task.model, sample_id=str(row.sample_id), epoch=row.epoch,
                            attempt=row.attempt, log_location=task.log_location)
            watch = engine.open_sample(ref)
            found = []
            last = 0.0
            for raw in events:
                e = normalise(raw, "content")
                if isinstance(e.get("timestamp"), float):
                    last = max(last, e["timestamp"])
                found += watch.feed(e)
            found += watch.sample_row(_row(row), contexts[task.task_id], now=last)
            found += watch.finalize(last)
            key = (_task_name(task.task), str(row.sample_id))
            res = results.setdefault(key, SampleResult(*key))
            for f in found:
                res.add(f.category, f.confidence, f.rule)
    return results


def _row(row: Any) -> dict[str, Any]:
    raw = dict(row.raw or {})
    raw.setdefault("status", row.status)
    raw.setdefault("retries", row.retries)
    raw.setdefault("sample_id", row.sample_id)
    raw.setdefault("epoch", row.epoch)
    return raw


def _task_name(task: str) -> str:
    return task.rsplit("/", 1)[-1]


def load_labels(path: Path = LABELS) -> dict[str, dict[str, dict[str, list[str]]]]:
    """task → sample id → {expect: [...], weak: [...]} (a bare list means expect)."""
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    out: dict[str, dict[str, dict[str, list[str]]]] = {}
    for task, samples in (data.get("tasks") or {}).items():
        for sid, spec in (samples or {}).items():
            if spec is None or isinstance(spec, list):
                spec = {"expect": spec or []}
            out.setdefault(str(task), {})[str(sid)] = {
                "expect": list(spec.get("expect") or []), "weak": list(spec.get("weak") or [])}
    return out


@dataclass
class Report:
    recall: dict[str, tuple[int, int, int]]  # category -> (found any, found medium+, labelled)
    precision: dict[str, tuple[int, int]]  # level -> (true, total) at that exact level
    false_high: list[str]
    false_medium: list[str]
    false_low: list[str]
    missed: list[str]
    unlabelled: list[str]

    def ok(self) -> bool:
        tp, tot = self.medium_plus()
        if self.false_high or (tot and tp / tot < 0.9):
            return False
        for cat, target in TARGET_RECALL.items():
            hit, _, n = self.recall.get(cat, (0, 0, 0))
            if n and hit / n < target:
                return False
        return True

    def medium_plus(self) -> tuple[int, int]:
        tp = sum(self.precision.get(lv, (0, 0))[0] for lv in ("medium", "high"))
        tot = sum(self.precision.get(lv, (0, 0))[1] for lv in ("medium", "high"))
        return tp, tot


def score(results: dict[tuple[str, str], SampleResult],
          labels: dict[str, dict[str, dict[str, list[str]]]]) -> Report:
    recall: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    precision: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    false_high: list[str] = []
    false_medium: list[str] = []
    false_low: list[str] = []
    missed: list[str] = []
    unlabelled: list[str] = []
    for (task, sid), res in sorted(results.items()):
        task_labels = labels.get(task)
        if task_labels is None:
            unlabelled.append(f"{task}/{sid}")
            continue
        lab = task_labels.get(sid, task_labels.get("*", {"expect": [], "weak": []}))
        for cat in lab["expect"]:
            r = recall[cat]
            r[2] += 1
            level = res.found.get(cat)
            if level is not None:
                r[0] += 1
                if confidence_rank(level) >= confidence_rank("medium"):
                    r[1] += 1
            else:
                missed.append(f"{task}/{sid}: {cat}")
        for cat, level in res.found.items():
            true = cat in lab["expect"] or cat in lab["weak"]
            p = precision[level]
            p[1] += 1
            p[0] += int(true)
            if not true:
                what = f"{task}/{sid}: {cat} ({', '.join(sorted(res.rules[cat]))})"
                if level == "high":
                    false_high.append(what)
                elif level == "medium":
                    false_medium.append(what)
                else:
                    false_low.append(what)
    return Report({k: (v[0], v[1], v[2]) for k, v in recall.items()},
                  {k: (v[0], v[1]) for k, v in precision.items()},
                  false_high, false_medium, false_low, missed, unlabelled)


def _ratio(a: int, b: int) -> str:
    return f"{a / b:.2f}" if b else "n/a"


def render(report: Report, n_samples: int) -> str:
    lines = [f"Samples scored: {n_samples}", "",
             "| category | labelled samples | recall (any level) | recall (medium+) | target |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for cat in sorted(report.recall):
        hit, hit_m, n = report.recall[cat]
        tgt = TARGET_RECALL.get(cat)
        lines.append(f"| {cat} | {n} | {_ratio(hit, n)} ({hit}/{n}) | "
                     f"{_ratio(hit_m, n)} ({hit_m}/{n}) | {tgt if tgt else '-'} |")
    lines += ["", "| confidence | (sample, category) pairs | correct | precision |",
              "| --- | ---: | ---: | ---: |"]
    for lv in LEVELS:
        tp, tot = report.precision.get(lv, (0, 0))
        lines.append(f"| {lv} | {tot} | {tp} | {_ratio(tp, tot)} |")
    tp, tot = report.medium_plus()
    lines.append(f"| medium+ | {tot} | {tp} | {_ratio(tp, tot)} |")
    lines += ["", f"False high: {len(report.false_high)}"]
    lines += [f"- {x}" for x in report.false_high]
    lines += [f"False medium: {len(report.false_medium)}"]
    lines += [f"- {x}" for x in report.false_medium]
    lines += [f"False low: {len(report.false_low)}"]
    lines += [f"- {x}" for x in report.false_low]
    lines += [f"Missed: {len(report.missed)}"]
    lines += [f"- {x}" for x in report.missed]
    if report.unlabelled:
        lines += [f"Unlabelled samples (ignored): {len(report.unlabelled)}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log-dir", help="reuse quality-eval logs here instead of running it")
    ap.add_argument("--corpus", default=str(CORPUS), help="real transcripts ('' to skip)")
    ap.add_argument("--markdown", help="also write the tables to this file")
    ap.add_argument("--verbose", action="store_true", help="print every sample's findings")
    args = ap.parse_args(argv)
    tmp = None
    log_dir = args.log_dir
    if not log_dir:
        tmp = tempfile.mkdtemp(prefix="quality-")
        log_dir = tmp
        run_quality_eval(log_dir)
    try:
        dirs = [log_dir] + ([args.corpus] if args.corpus and Path(args.corpus).is_dir() else [])
        results = scan(dirs)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.verbose:
        for (task, sid), res in sorted(results.items()):
            print(f"{task}/{sid}: " + "; ".join(
                f"{c}={lv} [{', '.join(sorted(res.rules[c]))}]" for c, lv in res.found.items()))
    report = score(results, load_labels())
    text = render(report, len(results))
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n", encoding="utf-8")
    return 0 if report.ok() else 1


if __name__ == "__main__":
    sys.exit(main())
