"""The same rule work, done in bursts a poll apart (as a live watch does it) and at once.

    python benchmarks/bench_bursts.py [--samples 125] [--polls 38] [--pause 1.0]

A live watch of the 125 replayed SWE-bench runs spent about 40 % more thread CPU in its
rules than the scan of the log the run wrote, for the same 9,117 events, the same
findings. This feeds those events (the shared corpus's runs, as the scan projects them)
to the rules read by read, every sample open at once, three ways in one process: all at
once; in ``--polls`` bursts ``--pause`` seconds apart (a watch with ``--poll 1``); and
in bursts again while another process keeps the other core busy, as the eval does. Only
the feeding is timed (thread CPU), so the figures compare work that is identical: what
the bursts add is the price of starting again after a pause (caches gone cold), which
no reduction of work removes. Prints figures only; rounds alternate.
"""

from __future__ import annotations

import argparse
import gc
import subprocess
import sys
import time

# the watcher PYTHONPATH names (a compiled tree) before common.py puts the sources first
from watcher.app import settle_collector
from watcher.engine import COMPILED, Engine, load_rules
from watcher.events import normalise
from watcher.findings import SampleRef
from watcher.sources.logfiles import iter_log_samples

sys.path.insert(0, __import__("os").path.dirname(__file__))

from common import SWE, banner  # noqa: E402

READ_EVENTS = 4  # rule-read events a live read brings per sample (the replay: 3.5)
BUSY = "import zlib, os\nd = os.urandom(1 << 22)\nwhile True: zlib.compress(d, 1)\n"


def steps(samples: list[list[dict]]) -> list[tuple[int, list[dict]]]:
    """The reads of a live watch, in order: each sample's next few events in turn."""
    out = []
    for start in range(0, max(map(len, samples)), READ_EVENTS):
        for i, events in enumerate(samples):
            if events[start:start + READ_EVENTS]:
                out.append((i, events[start:start + READ_EVENTS]))
    return out


def feed(engine: Engine, n: int, reads: list[tuple[int, list[dict]]], polls: int,
         pause: float) -> float:
    """Thread CPU of feeding ``reads`` in ``polls`` bursts ``pause`` seconds apart."""
    watches = [engine.open_sample(SampleRef(task="bench", task_id="t", eval_id="e",
                                            model="m", sample_id=f"s{i}", epoch=1))
               for i in range(n)]
    cpu = 0.0
    for b in range(polls):
        burst = reads[b * len(reads) // polls:(b + 1) * len(reads) // polls]
        t0 = time.thread_time()
        for i, events in burst:
            watch = watches[i]
            for e in events:
                watch.feed(e)
        cpu += time.thread_time() - t0
        if pause and b < polls - 1:
            time.sleep(pause)
    t0 = time.thread_time()
    for watch in watches:
        watch.finalize()
    return cpu + time.thread_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--log", default=str(SWE))
    ap.add_argument("--samples", type=int, default=125)
    ap.add_argument("--polls", type=int, default=38, help="bursts (the replay: 38 cycles)")
    ap.add_argument("--pause", type=float, default=1.0, help="seconds between bursts")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--scan-rounds", type=int, default=3,
                    help="rounds of the whole post-hoc scan alone and beside a busy process")
    args = ap.parse_args()
    banner("bench_bursts")
    print(f"engine: {'compiled (mypyc)' if COMPILED else 'pure Python'}")
    engine = Engine(load_rules(builtin=True, user_dir=False))
    wanted = engine.event_types
    samples: list[list[dict]] = []
    for _task, _row, events in iter_log_samples(args.log):
        chosen = [e for e in (normalise(x, engine.tier) for x in events)
                  if wanted is None or e["type"] in wanted]
        if chosen:
            samples.append(chosen)
        if len(samples) == args.samples:
            break
    reads = steps(samples)
    n_events = sum(map(len, samples))
    print(f"{len(samples)} samples, {n_events:,} events a rule reads, {len(reads):,} reads "
          f"of up to {READ_EVENTS}; {args.polls} bursts {args.pause:g} s apart")
    gc.collect()
    settle_collector()
    rows: dict[str, list[float]] = {"at once": [], "in bursts": [], "in bursts, busy": []}
    for r in range(args.rounds):
        rows["at once"].append(feed(engine, len(samples), reads, 1, 0.0))
        rows["in bursts"].append(feed(engine, len(samples), reads, args.polls, args.pause))
        busy = subprocess.Popen([sys.executable, "-c", BUSY])
        try:
            time.sleep(0.5)
            rows["in bursts, busy"].append(
                feed(engine, len(samples), reads, args.polls, args.pause))
        finally:
            busy.kill()
            busy.wait()
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.3f} s" for k, v in rows.items()),
              flush=True)
    base = min(rows["at once"])
    print("\nthread CPU of the feeding (best of the rounds), the same events each time")
    for k, v in rows.items():
        print(f"  {k:<34}{min(v):7.3f} s  {min(v) / base:5.2f}x")
    print("  (in bursts, busy: another process keeps the other core busy, as the eval does)")
    if args.scan_rounds:
        whole_scan(args.log, args.scan_rounds)


def whole_scan(log: str, rounds: int) -> None:
    """The post-hoc scan as a whole process, alone and beside the busy process: whether
    sharing the machine with an eval slows a watcher down by itself."""
    import os

    cmd = [sys.executable, "-m", "watcher", "watch", "--log-dir", log, "--once", "--format",
           "jsonl", "-o", os.devnull, "--quiet", "--jobs", "1"]

    def cpu() -> float:
        proc = subprocess.Popen(cmd)
        _, _, usage = os.wait4(proc.pid, 0)
        return usage.ru_utime + usage.ru_stime

    alone: list[float] = []
    beside: list[float] = []
    for _ in range(rounds):
        alone.append(cpu())
        busy = subprocess.Popen([sys.executable, "-c", BUSY])
        try:
            time.sleep(0.5)
            beside.append(cpu())
        finally:
            busy.kill()
            busy.wait()
    print(f"\nthe post-hoc scan of the log, whole processes (user + system CPU), {rounds} "
          f"alternating rounds: alone {', '.join(f'{x:.2f}' for x in alone)} s; beside the "
          f"busy process {', '.join(f'{x:.2f}' for x in beside)} s: "
          f"{min(beside) / min(alone):.2f}x (best of each)")


if __name__ == "__main__":
    main()
