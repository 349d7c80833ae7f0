"""What the watchdog saves: the same scripted eval watched with and without ``--act``.

    python benchmarks/bench_watchdog.py [--messages 400] [--siblings 2] [--steps 12]
                                        [--tool-delay 0.2] [--poll 0.5] [--rounds 1]

Runs ``tests/evals/scenarios.py@watchdog`` (a submit loop and an identical tool call
that only the message limit ends, beside clean siblings) twice per round, one after
the other so the two do not share the cores (``--rounds N`` alternates the order):
once watched by ``inspect-watch watch`` (it only observes), once by ``inspect-watch
watch --act`` (the built-in policy: cancel a high loop with ``score`` after its grace
of 30 events or 60 s). Both watches write JSONL and a ``--summary``.

Prints, side by side: the eval's wall time, the tokens of every sample (read from the
eval's log: ``model_usage``), how it ended (its limit) and how many messages it had,
the run's total, and what the summary says was spent after each loop's first ``high``
finding (the tokens a watchdog acting then would have saved; with ``--act``, what
was still spent during the grace). Tokens come from the scripted model's usage, so
the figures are deterministic but for where the grace lands; wall time moves with
the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, banner, start_eval, tmpdir, watch_cmd  # noqa: E402

SCENARIOS = REPO / "tests" / "evals" / "scenarios.py"


def run_once(work: Path, act: bool, args: argparse.Namespace) -> dict[str, Any]:
    """One eval watched (``act``: with ``--act``); its figures."""
    name = "act" if act else "observe"
    sub = work / f"{name}-{time.time_ns()}"
    sub.mkdir()
    data = sub / "data"
    started = time.monotonic()
    proc = start_eval(sub, "watchdog", "-T", f"messages={args.messages}", "-T",
                      f"siblings={args.siblings}", "-T", f"steps={args.steps}",
                      "--max-samples", str(2 + args.siblings), tool_delay=args.tool_delay,
                      data_home=data, task_file=SCENARIOS)
    proc.discovery()
    out, summary = sub / "out.jsonl", sub / "summary.md"
    env = {**os.environ, "XDG_DATA_HOME": str(data)}
    watch = subprocess.run(
        watch_cmd("watch", *(["--act"] if act else []), "--format", "jsonl", "--output",
                  str(out), "--poll", str(args.poll), "--summary", str(summary), "-q"),
        env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=3600)
    code = proc.wait(3600)
    wall = time.monotonic() - started
    if code != 0 or watch.returncode != 0:
        raise SystemExit(f"{name}: eval exit {code}, watch exit {watch.returncode}:\n"
                         f"{watch.stderr[-2000:]}\n{proc.output.read_text()[-2000:]}")
    from inspect_ai.log import read_eval_log

    [log_path] = proc.logs()
    log = read_eval_log(str(log_path))
    samples = {}
    for s in log.samples or []:
        tokens = sum(u.total_tokens for u in (s.model_usage or {}).values())
        samples[str(s.id)] = {"tokens": tokens, "messages": len(s.messages),
                              "limit": s.limit.type if s.limit is not None else "-"}
    records = [json.loads(x) for x in out.read_text().splitlines() if x.strip()]
    actions = [r for r in records if r["kind"] == "action"]
    text = summary.read_text()
    section = text.split("## Spent after loops were found", 1)[1:] or [""]
    after = [x for x in section[0].split("\n## ", 1)[0].splitlines() if x.startswith("- ")]
    return {"wall": wall, "samples": samples,
            "total": sum(v["tokens"] for v in samples.values()),
            "requested": sorted(a["sample_id"] for a in actions
                                if a["outcome"] == "requested"),
            "summary_after": after}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--messages", type=int, default=400, help="the loops' message limit")
    ap.add_argument("--siblings", type=int, default=2)
    ap.add_argument("--steps", type=int, default=12, help="tool calls of each sibling")
    ap.add_argument("--tool-delay", type=float, default=0.2)
    ap.add_argument("--poll", type=float, default=0.5)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    banner("bench_watchdog")
    print(f"eval: watchdog task, message limit {args.messages}, {args.siblings} clean "
          f"siblings of {args.steps} calls, tool delay {args.tool_delay} s; watch --poll "
          f"{args.poll}; built-in policy")
    work = tmpdir("bench-watchdog-")
    runs: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    for i in range(args.rounds):
        for act in ((False, True) if i % 2 == 0 else (True, False)):
            runs[act].append(run_once(work, act, args))
    observe, act = runs[False][-1], runs[True][-1]
    ids = sorted(set(observe["samples"]) | set(act["samples"]))
    print()
    print(f"{'sample':<14} {'watch: tokens':>14} {'msgs':>5} {'limit':>8}   "
          f"{'watch --act: tokens':>20} {'msgs':>5} {'limit':>8}")
    for sid in ids:
        a, b = observe["samples"].get(sid, {}), act["samples"].get(sid, {})
        print(f"{sid:<14} {a.get('tokens', 0):>14,} {a.get('messages', 0):>5} "
              f"{a.get('limit', '-'):>8}   {b.get('tokens', 0):>20,} "
              f"{b.get('messages', 0):>5} {b.get('limit', '-'):>8}")
    print(f"{'total':<14} {observe['total']:>14,} {'':>5} {'':>8}   {act['total']:>20,}")
    saved = observe["total"] - act["total"]
    share = saved / observe["total"] if observe["total"] else 0.0
    print(f"\ntokens: {observe['total']:,} watched, {act['total']:,} with --act: "
          f"{saved:,} fewer ({share:.0%})")
    walls = {k: statistics.median(r["wall"] for r in v) for k, v in runs.items()}
    print(f"eval wall time (median of {args.rounds}): {walls[False]:.1f} s watched, "
          f"{walls[True]:.1f} s with --act ({walls[True] - walls[False]:+.1f} s)")
    print(f"cancels requested with --act: {', '.join(act['requested']) or 'none'}")
    for label, run in (("watch", observe), ("watch --act", act)):
        print(f"{label} summary, spent after the first high loop finding:")
        for line in run["summary_after"] or ["  (none)"]:
            print(f"  {line.strip()}")


if __name__ == "__main__":
    main()
