"""A fleet of concurrent samples watched live: watcher CPU, eval slowdown, latency.

    python benchmarks/bench_fleet.py [--samples 300] [--turns 10] [--tool-delay 6]
                                     [--poll 1] [--repeat-every 5] [--rounds 1]
                                     [--transport auto|http] [--engine source|compiled]

Runs the same eval twice per round (A/B, one after the other so they do not share
the two cores; ``--rounds N`` alternates the order and reports the median slowdown):
once alone, once watched by ``inspect-watch watch
--format jsonl -o FILE --poll 1`` as a subprocess (from the working tree's sources, or
``--engine compiled``: the wheel ``pip install .`` builds). All samples run at once
(``--max-samples`` = samples); each does ``turns`` tool calls of ``tool-delay``
seconds (default: ~60 s per sample). Every ``repeat-every``-th sample repeats
``cat /tmp/status`` five times (instant calls) after ``repeat-at`` calls (default:
mid-run), which the built-in repeat rule detects. At the very end of such a run the
eval finishes 300 samples at once and its event loop (which also serves the control
channel) is busy for many seconds; ``--repeat-at TURNS`` measures detection there.

Reports: the watcher's CPU (``os.wait4`` rusage of that child) as % of one core
over its lifetime; eval wall time alone vs watched; detection latency — for each
finding id, the time its first line appeared in the output file (tailed every
50 ms) minus when its evidence was complete, counted two ways: from the last evidence
event's ``timestamp`` (when the call or turn *started*), and from its ``completed`` time
read from the eval's log after the run (when the result existed: the watcher cannot see
a tool call's result, and rules read results, before then). Under a saturated loop an
instant tool call completes seconds after it started, which the first figure counts
against the watcher and the second does not.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import banner, percentile, tmpdir, watch_cmd, write_task_file  # noqa: E402


def run_eval(work: Path, task_file: Path, samples: int, tool_delay: float,
             name: str) -> subprocess.Popen[bytes]:
    data = work / f"data-{name}"
    data.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SCENARIO_TOOL_DELAY": str(tool_delay), "XDG_DATA_HOME": str(data),
           "INSPECT_LOG_LEVEL": "warning"}
    out = (work / f"eval-{name}.out").open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "inspect_ai._cli.main", "eval", f"{task_file}@bench",
         "--log-dir", str(work / f"logs-{name}"), "--display", "none",
         "--max-samples", str(samples), "--max-connections", str(samples)],
        env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


MAX_RSS: dict[int, float] = {}  # pid -> peak resident memory, MB


def sample_peak(pid: int, peaks: dict[int, float], stop: threading.Event) -> None:
    """Record ``pid``'s own peak resident memory (``VmHWM``, MB) until it exits.

    ``ru_maxrss`` of an exec'd child also counts the memory image it was forked from
    (this benchmark process, which grows once it has read a log), so it is kept only
    as a fallback.
    """
    status = Path(f"/proc/{pid}/status")
    while not stop.is_set():
        try:
            for line in status.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peaks[pid] = max(peaks.get(pid, 0.0), int(line.split()[1]) / 1024)
        except (OSError, ValueError):
            return
        stop.wait(0.2)


def reap(proc: subprocess.Popen[bytes]) -> tuple[int, float]:
    """Wait for ``proc``; (exit status, its user+system CPU seconds)."""
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    MAX_RSS[proc.pid] = ru.ru_maxrss / 1024  # KB on Linux
    return proc.returncode, ru.ru_utime + ru.ru_stime


def tail(path: Path, seen: dict[str, tuple[float, dict[str, Any]]],
         stop: threading.Event) -> None:
    """Record when each finding id's first line appeared in ``path``."""
    pos = 0
    buf = ""
    while not stop.is_set():
        if path.exists():
            with path.open() as fh:
                fh.seek(pos)
                chunk = fh.read()
                pos = fh.tell()
            now = time.time()
            buf += chunk
            *lines, buf = buf.split("\n")
            for line in lines:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec.get("kind") == "finding" and rec.get("id") not in seen:
                    seen[rec["id"]] = (now, rec)
        stop.wait(0.05)


def completion_times(log_dir: Path) -> dict[str, float]:
    """Event uuid -> its ``completed`` time (epoch seconds), from the logs in ``log_dir``."""
    from datetime import datetime

    from watcher.sources.logfiles import iter_log_samples

    out: dict[str, float] = {}
    for _task, _row, events in iter_log_samples(str(log_dir)):
        for ev in events:
            done = ev.get("completed")
            if ev.get("uuid") and isinstance(done, str):
                try:
                    out[ev["uuid"]] = datetime.fromisoformat(done).timestamp()
                except ValueError:
                    continue
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=300)
    # few turns, long tools: ~60 s per sample at a modest eval CPU cost (the eval itself
    # is CPU-bound on a small machine with 300 samples at once)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--tool-delay", type=float, default=6.0)
    ap.add_argument("--poll", type=float, default=1.0)
    ap.add_argument("--repeat-every", type=int, default=5)
    ap.add_argument("--skip-baseline", action="store_true")
    ap.add_argument("--rounds", type=int, default=1,
                    help="A/B pairs to run, alternating their order; the slowdown is the "
                         "median over rounds")
    ap.add_argument("--engine", choices=["source", "compiled"], default="source",
                    help="the watcher's engine: the working tree's sources (pure Python) or "
                    "the compiled wheel `pip install .` builds (tests/compiled.py)")
    ap.add_argument("--transport", choices=["auto", "http"], default="auto",
                    help="auto: running samples' events from the eval's sample buffer; "
                         "http: every read through the control channel")
    ap.add_argument("--jitter", type=float, default=0.5,
                    help="each call's delay is spread over delay*(1 +- jitter); 0 keeps all "
                         "samples in lock-step (every sample changes in the same second)")
    ap.add_argument("--repeat-at", type=int, default=None,
                    help="the repeats come after this many calls (default: half of --turns, "
                         "mid-run; --repeat-at TURNS puts them at the end, where the eval "
                         "finishing 300 samples at once holds its event loop for seconds)")
    args = ap.parse_args()
    banner("bench_fleet")
    work = tmpdir("bench-fleet-")
    repeat_at = args.turns // 2 if args.repeat_at is None else args.repeat_at
    task_file = write_task_file(work, samples=args.samples, turns=args.turns,
                                repeat_every=args.repeat_every, repeat_at=repeat_at,
                                jitter=args.jitter)
    compiled: str | None = None
    if args.engine == "compiled":
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from tests.compiled import compiled_tree

        print("building (or reusing) the compiled engine from the working tree ...", flush=True)
        compiled = str(compiled_tree())
    print(f"{args.samples} samples at once, {args.turns} calls x {args.tool_delay}s each "
          f"(~{args.turns * args.tool_delay:.0f}s per sample), watcher poll {args.poll}s; "
          f"every {args.repeat_every}th sample repeats a call after call {repeat_at}; "
          f"delays spread +-{args.jitter:.0%}; watcher transport {args.transport}; "
          f"engine {'compiled (' + compiled + ')' if compiled else 'pure Python (sources)'}")

    def alone(i: int) -> tuple[float, float]:
        t0 = time.perf_counter()
        proc = run_eval(work, task_file, args.samples, args.tool_delay, f"alone{i}")
        code, cpu = reap(proc)
        wall = time.perf_counter() - t0
        print(f"A{i}  eval alone:   exit {code}, wall {wall:.1f}s, eval cpu {cpu:.1f}s")
        return wall, cpu

    seen: dict[str, tuple[float, dict[str, Any]]] = {}
    completed: dict[str, float] = {}  # event uuid -> completed time, from the logs

    def watched(i: int) -> float:
        t0 = time.perf_counter()
        name = f"watched{i}"
        proc = run_eval(work, task_file, args.samples, args.tool_delay, name)
        disc = work / f"data-{name}" / "inspect_ai" / "control" / f"{proc.pid}.json"
        while not disc.exists() and proc.poll() is None:
            time.sleep(0.05)
        out = work / f"findings{i}.jsonl"
        env = {**os.environ, "XDG_DATA_HOME": str(work / f"data-{name}")}
        cwd = None
        if compiled is not None:  # beside no sources, so the compiled tree is imported
            env["PYTHONPATH"] = compiled
            cwd = str(work)
        found: dict[str, tuple[float, dict[str, Any]]] = {}
        stop = threading.Event()
        tailer = threading.Thread(target=tail, args=(out, found, stop), daemon=True)
        tailer.start()
        w0 = time.perf_counter()
        watcher = subprocess.Popen(watch_cmd("watch", "--format", "jsonl", "-o", str(out),
                                             "--poll", str(args.poll),
                                             "--transport", args.transport),
                                   env=env, stdout=subprocess.DEVNULL, cwd=cwd,
                                   stderr=(work / f"watch{i}.err").open("wb"),
                                   stdin=subprocess.DEVNULL)
        peaks: dict[int, float] = {}
        sampler = threading.Thread(target=sample_peak, args=(watcher.pid, peaks, stop),
                                   daemon=True)
        sampler.start()
        code, eval_cpu = reap(proc)
        wall = time.perf_counter() - t0
        wcode, watch_cpu = reap(watcher)
        watch_wall = time.perf_counter() - w0
        time.sleep(0.3)
        stop.set()
        tailer.join()
        print(f"B{i}  eval watched: exit {code}, wall {wall:.1f}s, eval cpu {eval_cpu:.1f}s")
        print(f"    watcher: exit {wcode}, wall {watch_wall:.1f}s, cpu {watch_cpu:.1f}s "
              f"= {100 * watch_cpu / watch_wall:.1f}% of one core (cpus: {os.cpu_count()}), "
              f"peak memory {peaks.get(watcher.pid, MAX_RSS[watcher.pid]):.0f} MB")
        seen.update({f"{i}:{k}": v for k, v in found.items()})
        completed.update(completion_times(work / f"logs-{name}"))
        return wall

    # rounds alternate the order (AB, BA, AB, ...) so drift in the machine's load does
    # not always land on the same side
    ratios: list[float] = []
    for i in range(args.rounds):
        if args.skip_baseline:
            watched(i)
            continue
        if i % 2 == 0:
            base_wall, _ = alone(i)
            watched_wall = watched(i)
        else:
            watched_wall = watched(i)
            base_wall, _ = alone(i)
        ratios.append(watched_wall / base_wall - 1)
        print(f"    round {i}: eval slowdown with the watcher {100 * ratios[-1]:+.1f}%")
    if ratios:
        ordered = sorted(ratios)
        median = ordered[len(ordered) // 2] if len(ordered) % 2 else (
            ordered[len(ordered) // 2 - 1] + ordered[len(ordered) // 2]) / 2
        print(f"eval slowdown with the watcher: median {100 * median:+.1f}% over "
              f"{len(ratios)} round(s): " + ", ".join(f"{100 * r:+.1f}%" for r in ratios)
              + " (identical runs differ by several % on a shared 2-core machine)")

    lat: list[float] = []
    lat_done: list[float] = []
    by_rule: dict[str, int] = {}
    for at, rec in seen.values():
        ev = rec.get("evidence") or {}
        stamps = [t for t in ev.get("timestamps") or [] if isinstance(t, int | float)]
        by_rule[rec["rule"]] = by_rule.get(rec["rule"], 0) + 1
        if not stamps:
            continue
        lat.append(at - max(stamps))
        # an evidence event the log has no completion time for counts from its start
        done = [completed.get(u) for u in ev.get("event_uuids") or []]
        lat_done.append(at - max([d for d in done if d is not None] + [max(stamps)]))
    repeats = [at - max(rec["evidence"]["timestamps"]) for at, rec in seen.values()
               if rec["rule"] == "repeated-tool-call" and rec["evidence"].get("timestamps")]
    rules = ", ".join(f"{k}={v}" for k, v in sorted(by_rule.items()))
    print(f"findings: {len(seen)} ids ({rules})")
    expected = (len(range(0, args.samples, args.repeat_every)) * args.rounds
                if args.repeat_every else 0)
    print(f"repeat scenario: {len(repeats)} repeated-tool-call findings for {expected} samples "
          "that repeat")
    for name, xs in (("all findings, from the last event's start", lat),
                     ("all findings, from the last event's completion", lat_done),
                     ("repeated-tool-call, from start", repeats)):
        if xs:
            print(f"detection latency, {name}: p50 {percentile(xs, 50):.2f}s  "
                  f"p95 {percentile(xs, 95):.2f}s  max {max(xs):.2f}s  (n={len(xs)})")
    if lat and lat_done:
        gaps = sorted(a - b for a, b in zip(lat, lat_done, strict=True))
        print(f"start-to-completion of the last evidence event: p50 "
              f"{percentile(gaps, 50):.2f}s  p95 {percentile(gaps, 95):.2f}s")


if __name__ == "__main__":
    main()
