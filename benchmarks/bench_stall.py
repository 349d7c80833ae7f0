"""Stalls judged by the task's own pace: how soon a hang is found, and what is not.

    python benchmarks/bench_stall.py [--rounds 3] [--gen 3] [--poll 1]
                                     [--slow-seconds 180 --slow-scale 20] [--full]

Real ``inspect eval`` processes on the scripted model (``tests/evals/pace.py``),
watched live by ``inspect-watch watch --only stalled-sample --format jsonl`` (the
built-in rule, sources in place):

1. ``quick_hang`` (``--rounds`` times): ten quick samples (generations of ``--gen``
   seconds, ten turns) beside one whose generation hangs at its fourth turn. The
   detection delay is the time the finding's line first appeared in the watch's output
   (the file tailed every 0.1 s) minus the start of the hung generation (the finding's
   ``first_seen``, the in-flight event's own timestamp). With the fixed thresholds of
   before, the same hang would be reported 600 s after it began.
2. ``slow_first`` (beside the first round): generations of 35 s first, while nothing is
   known of the task's pace: findings (expected none).
3. ``slow_tools``: long, normal tool calls: ``--slow-seconds`` each (+-15 %), ten samples
   of three calls. By default at 1/``--slow-scale`` of that with the rule's call
   thresholds and floor scaled alike (``--full``: at full length, about ten minutes):
   findings (expected none), and the calls' durations from the eval's log.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, banner, start_eval, tmpdir, watch_cmd  # noqa: E402

PACE = REPO / "tests" / "evals" / "pace.py"
RULE = REPO / "rules" / "stalled-sample.yaml"


def stalls(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            d = json.loads(line)
            if d.get("kind") == "finding" and d.get("rule") == "stalled-sample":
                out.append(d)
    return out


def watch(out: Path, data: Path, poll: float, *extra: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "XDG_DATA_HOME": str(data)}
    return subprocess.Popen(
        watch_cmd("watch", "--only", "stalled-sample", "--format", "jsonl", "--output",
                  str(out), "--poll", str(poll), "-q", *extra), env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop(*procs: Any) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    for p in procs:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


def quick_round(work: Path, n: int, args: argparse.Namespace) -> dict[str, Any]:
    sub = work / f"quick-{n}"
    for d in ("q", "f"):
        (sub / d).mkdir(parents=True)
    data = sub / "data"
    procs = [start_eval(sub / "q", "quick_hang", "-T", f"gen={args.gen}", "-T", "turns=10",
                        "--max-samples", "11", data_home=data, task_file=PACE)]
    if n == 0:
        procs.append(start_eval(sub / "f", "slow_first", "--max-samples", "3",
                                data_home=data, task_file=PACE))
    for p in procs:
        p.discovery()
    out = sub / "out.jsonl"
    w = watch(out, data, args.poll)
    seen_at: float | None = None
    deadline = time.monotonic() + 900
    try:
        while time.monotonic() < deadline:
            found = [d for d in stalls(out) if d["task"] == "quick_hang"]
            if found and seen_at is None:
                seen_at = time.time()
            first_done = n > 0 or procs[1].proc.poll() is not None
            if seen_at is not None and first_done:
                break
            time.sleep(0.1)
    finally:
        stop(w)
        for p in procs:
            p.stop()
    found = [d for d in stalls(out) if d["task"] == "quick_hang"]
    if not found or seen_at is None:
        raise SystemExit(f"round {n}: no stall found")
    f = found[0]
    return {"delay": seen_at - f["first_seen"], "facts": f["evidence"]["facts"],
            "summary": f["summary"],
            "slow_first": [d["summary"] for d in stalls(out) if d["task"] == "slow_first"]
            if n == 0 else None}


def scaled_rule(path: Path, scale: float) -> Path:
    import yaml

    doc = yaml.safe_load(RULE.read_text())
    idle = doc["detect"]["idle"]
    idle["thresholds"] = {k: (v if k == "none" else v / scale)
                          for k, v in idle["thresholds"].items()}
    idle["learn"]["floor"] = idle["learn"]["floor"] / scale
    doc.pop("tests")
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def slow_tools(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    sub = work / "slow"
    (sub / "e").mkdir(parents=True)
    data = sub / "data"
    scale = 1.0 if args.full else args.slow_scale
    seconds = args.slow_seconds / scale
    extra: list[str] = []
    if scale != 1.0:
        extra = ["--rules", str(scaled_rule(sub / "stalled-sample.yaml", scale))]
    proc = start_eval(sub / "e", "slow_tools", "-T", f"seconds={seconds}", "-T",
                      "spread=0.3", "--max-samples", "10", data_home=data, task_file=PACE)
    proc.discovery()
    out = sub / "out.jsonl"
    w = watch(out, data, args.poll * (1.0 if args.full else 0.5), *extra)
    try:
        proc.wait(3600)
        w.wait(120)
    finally:
        stop(w)
    from inspect_ai.log import read_eval_log

    [log] = proc.logs()
    took = [e.working_time for s in read_eval_log(str(log)).samples or [] for e in s.events
            if e.event == "tool" and getattr(e, "function", "") == "build"
            and e.working_time is not None]
    return {"scale": scale, "found": [d["summary"] for d in stalls(out)],
            "calls": len(took), "median": statistics.median(took), "max": max(took)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gen", type=float, default=3.0, help="seconds per quick generation")
    ap.add_argument("--poll", type=float, default=1.0)
    ap.add_argument("--slow-seconds", type=float, default=180.0)
    ap.add_argument("--slow-scale", type=float, default=20.0)
    ap.add_argument("--full", action="store_true", help="slow tool calls at full length")
    args = ap.parse_args()
    banner("bench_stall")
    work = tmpdir("bench-stall-")
    print(f"work dir: {work}\n")
    delays = []
    for n in range(args.rounds):
        r = quick_round(work, n, args)
        delays.append(r["delay"])
        facts = r["facts"]
        print(f"quick_hang round {n + 1}: found {r['delay']:.1f} s after the hang began "
              f"(threshold {facts['threshold_seconds']} s, learned={facts['learned']}, "
              f"{facts['calls']} calls, p95 {facts['percentile_seconds']} s)")
        print(f"  «{r['summary']}»")
        if r["slow_first"] is not None:
            print(f"slow_first (first generations 35 s): {len(r['slow_first'])} findings"
                  + "".join(f"\n  «{s}»" for s in r["slow_first"]))
    print(f"\nquick_hang detection delay over {len(delays)} rounds: min {min(delays):.1f} s, "
          f"median {statistics.median(delays):.1f} s, max {max(delays):.1f} s "
          f"(poll {args.poll} s; fixed thresholds of before: 600 s)")
    s = slow_tools(work, args)
    print(f"\nslow_tools at 1/{s['scale']:g} scale: {s['calls']} build calls, median "
          f"{s['median']:.1f} s, longest {s['max']:.1f} s (x{s['scale']:g}: "
          f"{s['median'] * s['scale']:.0f} s, {s['max'] * s['scale']:.0f} s): "
          f"{len(s['found'])} findings" + "".join(f"\n  «{x}»" for x in s["found"]))


if __name__ == "__main__":
    main()
