"""Measure the built-in rule pack against labelled transcripts: precision per confidence
level per corpus (with 95% Wilson intervals), recall per category, false highs.

Corpora, each scored on its own (real and scripted are never pooled):

- **scripted**: the quality evals (``tests/evals/quality_evals.py``), real Inspect
  ``react()`` agents driven by the scripted model, acting out each pattern and its
  look-alikes; labels in ``benchmarks/quality_labels.yaml``.
- **real**: the shared corpus of other people's runs (``/work/shared/corpus/inspect``),
  labelled by reading (``benchmarks/labels/``, method in ``benchmarks/labels/METHOD.md``):
  InterCode CTF (GPT-4o), oxDNA (Claude), and 240 SWE-bench runs (Gemini 3 Pro, replayed),
  split by the method's rule into a ``tune`` half (looked at while changing rules) and a
  ``test`` half (only ever scored).

Findings come from the product itself: ``inspect-watch watch --log-dir DIR --once
--format jsonl`` (a subprocess), exactly what a user runs post-hoc.

Usage::

    python benchmarks/quality.py                     # run the quality evals, then score
    python benchmarks/quality.py --log-dir DIR       # reuse quality-eval logs
    python benchmarks/quality.py --markdown docs/quality.md   # rewrite its tables
    python benchmarks/quality.py --verbose           # every false positive and miss

A (sample, category) pair is scored once, at the highest confidence any finding of that
category reached. Recall counts a labelled pair found at any level (and at medium+);
precision at a level counts the pairs whose highest level was that one. ``weak`` labels
count neither for nor against. Exit status 1 when a target is missed: no false high, and
precision at medium+ of at least 0.9 on every real corpus.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
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

ROOT = Path(__file__).resolve().parent.parent
LABELS = Path(__file__).with_name("quality_labels.yaml")
REAL_LABELS = Path(__file__).with_name("labels")
EVAL_FILE = ROOT / "tests" / "evals" / "quality_evals.py"
CORPUS = Path(os.environ.get("INSPECT_WATCH_CORPUS", "/work/shared/corpus/inspect"))
LEVELS = ("low", "medium", "high")
RANK = {lv: i for i, lv in enumerate(LEVELS)}
# categories of facts Inspect records itself: reported, but not what the pack is judged on
RECORDED = {"limit", "retry_exhausted", "sentinel", "sample_error", "token_usage"}
BEHAVIOURS = ("submit_loop", "narration_loop", "repeated_tool_call", "error_storm", "shortcut")
BEGIN, END = "<!-- quality:begin -->", "<!-- quality:end -->"
CORPUS_NAMES = {
    "mswe-gemini3pro-swebench-replay.eval": "SWE-bench replay (Gemini 3 Pro)",
    "docent-intercode-ctf-gpt4o.eval": "InterCode CTF (GPT-4o)",
    "metr-oxdna-claude-opus.eval": "oxDNA (Claude Opus)",
    "intercode-4models-replay.eval": "InterCode Bash/SQL (4 older models, replayed)",
    "taubench-airline-gpt4o-replay.eval": "tau-bench airline (GPT-4o, simulated user)",
}
# corpora kept in this repository (benchmarks/corpus/), beside the shared ones
LOCAL_CORPUS = Path(__file__).with_name("corpus")


@dataclass
class Label:
    expect: set[str]
    weak: set[str]
    # the level each expected behaviour must reach to count as found (METHOD.md,
    # "Levels"); "low" (found at any level) for labels written before levels
    levels: dict[str, str] = field(default_factory=dict)

    def level(self, cat: str) -> str:
        return self.levels.get(cat, "low")


@dataclass
class Corpus:
    """One labelled set of samples: (task, sample id, epoch) → label."""

    name: str
    real: bool
    labels: dict[tuple[str, str, int], Label] = field(default_factory=dict)


def _task_name(task: str) -> str:
    return task.rsplit("/", 1)[-1]


def _label(spec: Any) -> Label:
    if spec is None or isinstance(spec, list):
        return Label(set(spec or []), set())
    expect = spec.get("expect") or []
    if isinstance(expect, dict):  # category -> the level it must reach
        levels = {str(k): str(v) for k, v in expect.items()}
        for cat, lv in levels.items():
            if lv not in RANK:
                raise SystemExit(f"unknown level {lv!r} for {cat} in a label")
        return Label(set(levels), set(spec.get("weak") or []), levels)
    return Label(set(expect), set(spec.get("weak") or []))


def split_of(ids: list[str], sid: str) -> str:
    """The METHOD.md split: by position in sha256 order of the labelled ids."""
    order = sorted(ids, key=lambda i: hashlib.sha256(i.encode()).hexdigest())
    return "tune" if order.index(sid) % 2 == 0 else "test"


def load_corpora(scripted_labels: Path = LABELS,
                 real_dir: Path = REAL_LABELS) -> list[Corpus]:
    """The scripted corpus and every real one, with their labels."""
    out: list[Corpus] = []
    scripted = Corpus("scripted (quality evals)", real=False)
    data = yaml.safe_load(scripted_labels.read_text(encoding="utf-8")) or {}
    for task, samples in (data.get("tasks") or {}).items():
        for sid, spec in (samples or {}).items():
            scripted.labels[(str(task), str(sid), 1)] = _label(spec)
    out.append(scripted)
    for path in sorted(real_dir.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        task = str(doc["task"])
        samples = {str(k): v for k, v in (doc.get("samples") or {}).items()}
        base = CORPUS_NAMES.get(doc["corpus"], doc["corpus"])
        halves = len(samples) > 100  # a set big enough to split (METHOD.md)
        made: dict[str, Corpus] = {}
        ids = list(samples)
        for key, spec in samples.items():
            sid, _, ep = key.partition("@")
            name = f"{base}, {split_of(ids, key)}" if halves else base
            corpus = made.setdefault(name, Corpus(f"real: {name}", real=True))
            corpus.labels[(task, sid, int(ep) if ep else 1)] = _label(spec)
        out += [made[k] for k in sorted(made)]
    return out


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


Found = dict[tuple[str, str, int], dict[str, tuple[str, set[str]]]]


def scan(log_dirs: list[str]) -> Found:
    """(task, sample id, epoch) → category → (highest level, rules that reached it), from
    ``inspect-watch watch --log-dir DIR --once --format jsonl`` over each log dir."""
    found: Found = defaultdict(dict)
    for log_dir in log_dirs:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "findings.jsonl"
            res = subprocess.run([sys.executable, "-m", "watcher", "watch", "--log-dir",
                                  log_dir, "--once", "--format", "jsonl", "--output", str(out),
                                  "--quiet"], capture_output=True, text=True, cwd=str(ROOT))
            if res.returncode not in (0, 1):
                raise SystemExit(f"watch failed on {log_dir}:\n{res.stderr[-2000:]}")
            for line in out.read_text(encoding="utf-8").splitlines():
                d = json.loads(line)
                if d.get("kind") != "finding":
                    continue
                key = (_task_name(d["task"]), str(d["sample_id"]), int(d["epoch"]))
                cat, level = d["category"], d["confidence"]
                cur = found[key].get(cat)
                if cur is None or RANK[level] > RANK[cur[0]]:
                    found[key][cat] = (level, {d["rule"]})
                elif RANK[level] == RANK[cur[0]]:
                    cur[1].add(d["rule"])
    return found


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a proportion k/n."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (max(0.0, mid - half), min(1.0, mid + half))


@dataclass
class Score:
    corpus: Corpus
    samples: int = 0
    precision: dict[str, list[int]] = field(
        default_factory=lambda: {lv: [0, 0] for lv in (*LEVELS, "medium+")})
    # per category: [found at any level, found at medium+, labelled, found at its level]
    recall: dict[str, list[int]] = field(
        default_factory=lambda: defaultdict(lambda: [0, 0, 0, 0]))
    false: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    missed: list[str] = field(default_factory=list)
    below: list[str] = field(default_factory=list)  # found, but under the labelled level

    def at_level(self) -> tuple[int, int]:
        """Labelled behaviours found at their labelled level (over BEHAVIOURS)."""
        hit = n = 0
        for cat in BEHAVIOURS:
            r = self.recall.get(cat)
            if r is not None:
                hit += r[3]
                n += r[2]
        return hit, n

    def medium_plus(self) -> tuple[int, int]:
        return self.precision["medium+"][0], self.precision["medium+"][1]

    def ok(self) -> bool:
        tp, n = self.medium_plus()
        return not self.false["high"] and (not self.corpus.real or n == 0 or tp / n >= 0.9)


def score(corpus: Corpus, found: Found, listed: set[tuple[str, str, int]]) -> Score:
    """Score one corpus; ``listed`` holds every sample the scanned logs have (a clean
    sample has no findings, and a labelled sample that was not scanned is not scored)."""
    sc = Score(corpus)
    for key, label in sorted(corpus.labels.items()):
        if key not in listed:
            continue
        sc.samples += 1
        cats = found.get(key, {})
        if corpus.real:  # facts Inspect records itself are not what the pack is judged on
            cats = {c: v for c, v in cats.items() if c not in RECORDED}
        where = f"{key[0]}/{key[1]}" + (f"@{key[2]}" if key[2] != 1 else "")
        for cat in label.expect:
            if corpus.real and cat in RECORDED:
                continue
            r = sc.recall[cat]
            r[2] += 1
            hit = cats.get(cat)
            want = label.level(cat)
            if hit is None:
                sc.missed.append(f"{where}: {cat}" + (f" ({want})" if want != "low" else ""))
                continue
            r[0] += 1
            if RANK[hit[0]] >= RANK["medium"]:
                r[1] += 1
            if RANK[hit[0]] >= RANK[want]:
                r[3] += 1
            else:
                sc.below.append(f"{where}: {cat} found {hit[0]}, labelled {want} "
                                f"({', '.join(sorted(hit[1]))})")
        for cat, (level, rules) in cats.items():
            if cat in label.weak:
                continue
            true = cat in label.expect
            for lv in (level, "medium+") if RANK[level] >= 1 else (level,):
                sc.precision[lv][1] += 1
                sc.precision[lv][0] += int(true)
            if not true:
                sc.false[level].append(f"{where}: {cat} ({', '.join(sorted(rules))})")
    return sc


def listed_samples(log_dirs: list[str]) -> set[tuple[str, str, int]]:
    """Every (task, sample id, epoch) in the logs (from their sample summaries)."""
    from watcher.sources.logfiles import LogSource

    out: set[tuple[str, str, int]] = set()
    for d in log_dirs:
        src = LogSource(d)
        try:
            for t in src.tasks():
                for row in src.samples(t).samples:
                    out.add((_task_name(t.task), str(row.sample_id), int(row.epoch)))
        finally:
            src.close()
    return out


def _pct(k: int, n: int) -> str:
    if not n:
        return "n/a"
    lo, hi = wilson(k, n)
    return f"{k / n:.2f} [{lo:.2f}, {hi:.2f}]"


def render(scores: list[Score]) -> str:
    lines = ["| corpus | samples | level | pairs | correct | precision [95% CI] |",
             "| --- | ---: | --- | ---: | ---: | --- |"]
    for sc in scores:
        for lv in (*LEVELS, "medium+"):
            tp, n = sc.precision[lv]
            lines.append(f"| {sc.corpus.name} | {sc.samples} | {lv} | {n} | {tp} | "
                         f"{_pct(tp, n)} |")
    lines += ["", "| corpus | category | labelled | found (any level) | found (medium+) "
              "| found at its labelled level |",
              "| --- | --- | ---: | --- | --- | --- |"]
    for sc in scores:
        for cat in sorted(sc.recall):
            hit, hit_m, n, hit_l = sc.recall[cat]
            lines.append(f"| {sc.corpus.name} | {cat} | {n} | {_pct(hit, n)} | "
                         f"{_pct(hit_m, n)} | {_pct(hit_l, n)} |")
    lines += ["", "| corpus | recall at the labelled level | precision at medium+ | false high |",
              "| --- | --- | --- | ---: |"]
    for sc in scores:
        k, n = sc.at_level()
        tp, m = sc.medium_plus()
        lines.append(f"| {sc.corpus.name} | {_pct(k, n)} ({k}/{n}) | {_pct(tp, m)} ({tp}/{m}) "
                     f"| {len(sc.false['high'])} |")
    lines += ["", "| corpus | false high | false medium | false low | missed |",
              "| --- | ---: | ---: | ---: | ---: |"]
    for sc in scores:
        lines.append(f"| {sc.corpus.name} | {len(sc.false['high'])} | "
                     f"{len(sc.false['medium'])} | {len(sc.false['low'])} | "
                     f"{len(sc.missed)} |")
    lines.append("")
    for sc in scores:
        for lv in ("high", "medium"):
            for x in sc.false[lv]:
                lines.append(f"- false {lv}, {sc.corpus.name}: {x}")
        for x in sc.missed:
            lines.append(f"- missed, {sc.corpus.name}: {x}")
        for x in sc.below:
            lines.append(f"- below its level, {sc.corpus.name}: {x}")
    real = [sc for sc in scores if sc.corpus.real]
    behaviours = [0, 0]
    for sc in real:
        for cat in BEHAVIOURS:
            hit, _, n, _ = sc.recall.get(cat, (0, 0, 0, 0))
            behaviours[0] += hit
            behaviours[1] += n
    lines += ["", f"Recall of the labelled behaviours ({', '.join(BEHAVIOURS)}) over the real "
              f"corpora, any level: {_pct(*behaviours)} ({behaviours[0]}/{behaviours[1]})."]
    return "\n".join(lines)


def write_markdown(path: Path, text: str) -> None:
    """Replace what stands between the markers in ``path`` (the generated tables)."""
    doc = path.read_text(encoding="utf-8")
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{path} has no {BEGIN} ... {END} block to fill")
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    path.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log-dir", help="reuse quality-eval logs here instead of running them")
    ap.add_argument("--corpus", default=str(CORPUS), help="real transcripts ('' to skip)")
    ap.add_argument("--markdown", help="rewrite the generated block of this file")
    ap.add_argument("--verbose", action="store_true", help="also list false lows")
    ap.add_argument("--no-scripted", action="store_true",
                    help="score the real corpora only (no quality evals run)")
    args = ap.parse_args(argv)
    tmp = None
    log_dir = args.log_dir
    if args.no_scripted:
        tmp = log_dir = tempfile.mkdtemp(prefix="quality-")
    elif not log_dir:
        tmp = tempfile.mkdtemp(prefix="quality-")
        log_dir = tmp
        run_quality_eval(log_dir)  # every task of the file
    try:
        dirs = [log_dir] + [d for d in (args.corpus, str(LOCAL_CORPUS))
                            if d and Path(d).is_dir() and any(Path(d).glob("*.eval"))]
        listed = listed_samples(dirs)
        found = scan(dirs)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    scores = [score(c, found, listed) for c in load_corpora()]
    scores = [s for s in scores if s.samples]
    text = render(scores)
    print(text)
    if args.verbose:
        for sc in scores:
            for x in sc.false["low"]:
                print(f"- false low, {sc.corpus.name}: {x}")
    if args.markdown:
        write_markdown(Path(args.markdown), text)
    return 0 if all(sc.ok() for sc in scores) else 1


if __name__ == "__main__":
    sys.exit(main())
