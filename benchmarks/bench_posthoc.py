"""Post-hoc scans of a log directory with the full built-in pack.

    python benchmarks/bench_posthoc.py [--samples 200] [--turns 12] [--log-dir DIR]
                                       [--ctl-subset 5]

Generates (or reuses, with ``--log-dir``) a log directory with one eval of N
scripted samples (every 10th repeats a call, so there is something to find),
then scans it three ways, side by side:

1. ``inspect-watch watch --log-dir DIR --once --format jsonl -o FILE`` (subprocess;
   CPU from ``getrusage(RUSAGE_CHILDREN)``), in one process and with ``--jobs``, each
   on the pure-Python sources and on the compiled engine ``pip install .`` builds
   (tests/compiled.py builds that wheel from the working tree; ``--no-compiled``
   skips it);
2. the Python API (``Watch`` with ``WatchConfig(log_dir=..., once=True)``;
   ``time.process_time``);
3. ``inspect ctl sample events TASK SAMPLE --log-dir DIR --from-start --content``,
   paging each sample (one process per page) — on a subset of samples only,
   extrapolated to N and labelled as such.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    REPO,
    banner,
    children_cpu,
    run_quiet,
    tmpdir,
    watch_cmd,
    write_task_file,
)

from watcher.engine import Engine, load_rules  # noqa: E402
from watcher.run.watch import Watch, WatchConfig  # noqa: E402
from watcher.sources.cli import inspect_command  # noqa: E402
from watcher.state import WatchState  # noqa: E402


class Count:
    def __init__(self) -> None:
        self.findings = 0
        self.notices = 0

    def finding(self, f: object) -> None:
        self.findings += 1

    def notice(self, n: object) -> None:
        self.notices += 1

    def status(self, s: object) -> None:
        return None


def generate(work: Path, samples: int, turns: int) -> Path:
    log_dir = work / "logs"
    task_file = write_task_file(work, samples=samples, turns=turns, repeat_every=10)
    env = {**os.environ, "SCENARIO_TOOL_DELAY": "0", "XDG_DATA_HOME": str(work / "data"),
           "INSPECT_LOG_LEVEL": "warning"}
    t0 = time.perf_counter()
    proc = run_quiet([sys.executable, "-m", "inspect_ai._cli.main", "eval",
                      f"{task_file}@bench", "--log-dir",
                      str(log_dir), "--display", "none", "--max-samples", "50",
                      "--ctl-server", "off"], env=env)
    if proc.returncode != 0:
        # older/newer Inspect may not know --ctl-server off: retry without it
        proc = run_quiet([sys.executable, "-m", "inspect_ai._cli.main", "eval",
                          f"{task_file}@bench", "--log-dir",
                          str(log_dir), "--display", "none", "--max-samples", "50"], env=env)
    if proc.returncode != 0:
        raise SystemExit(f"eval failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    print(f"generated {samples} samples x {turns} turns in {time.perf_counter() - t0:.0f}s "
          f"-> {log_dir}")
    return log_dir


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--turns", type=int, default=12, help="tool calls per sample")
    ap.add_argument("--log-dir", help="reuse this log dir instead of generating one")
    ap.add_argument("--no-compiled", action="store_true",
                    help="scan with the pure-Python engine only (no wheel build)")
    ap.add_argument("--ctl-subset", type=int, default=5,
                    help="samples to page through with inspect ctl (extrapolated)")
    args = ap.parse_args()
    banner("bench_posthoc")
    work = tmpdir("bench-posthoc-")
    log_dir = Path(args.log_dir) if args.log_dir else generate(work, args.samples, args.turns)
    logs = sorted(log_dir.glob("*.eval"))
    size = sum(p.stat().st_size for p in logs)
    print(f"log dir: {len(logs)} .eval file(s), {size / 1e6:.1f} MB")

    # 1. CLI subprocess, one process and then --jobs (one per CPU), per engine
    jobs = os.cpu_count() or 1
    engines: dict[str, Path | None] = {"pure": None}
    if not args.no_compiled:
        sys.path.insert(0, str(REPO))
        from tests.compiled import compiled_tree

        engines["compiled"] = compiled_tree()
    cli: dict[tuple[str, int], tuple[float, float]] = {}
    found: dict[tuple[str, int], list[tuple[str, str, str]]] = {}
    for name, tree in engines.items():
        # the compiled tree is imported from a directory with no `watcher` sources in it
        env = {**os.environ, "PYTHONPATH": str(tree)} if tree else None
        cwd = str(work) if tree else None
        for j in sorted({1, jobs}):
            out = work / f"findings-{name}-j{j}.jsonl"
            c0, w0 = children_cpu(), time.perf_counter()
            proc = run_quiet(watch_cmd("watch", "--log-dir", str(log_dir), "--once", "--format",
                                       "jsonl", "-o", str(out), "--jobs", str(j)),
                             env=env, cwd=cwd)
            cli[name, j] = (time.perf_counter() - w0, children_cpu() - c0)
            lines = [json.loads(x) for x in out.read_text().splitlines() if x.strip()] \
                if out.exists() else []
            found[name, j] = sorted((x["id"], x["confidence"], x["status"]) for x in lines
                                    if x.get("kind") == "finding")
            print(f"inspect-watch watch --once --jobs {j} ({name}): exit {proc.returncode}, "
                  f"{len(found[name, j])} findings")
    if any(f != found["pure", 1] for f in found.values()):
        print("  WARNING: the findings differ between engines or --jobs")

    # 2. Python API
    engine = Engine(load_rules(builtin=True, user_dir=False))
    sink = Count()
    c0, w0 = time.process_time(), time.perf_counter()
    watch = Watch(engine, WatchConfig(log_dir=str(log_dir), once=True), WatchState(), [sink])
    watch.run()
    api_wall, api_cpu = time.perf_counter() - w0, time.process_time() - c0
    n = len(watch.summary().samples) or args.samples
    print(f"Python API: {sink.findings} findings, {n} samples")

    # 3. inspect ctl paging, on a subset
    task = next(iter(watch.summary().tasks)).task
    ids = [s.sample_id for s in watch.summary().samples][: args.ctl_subset]
    types = ",".join(sorted(engine.event_types)) if engine.event_types else "all"
    pages = 0
    c0, w0 = children_cpu(), time.perf_counter()
    for sid in ids:
        cursor: str | None = None
        while True:
            cmd = [*inspect_command(), "ctl", "sample", "events", task, sid, "1", "--log-dir",
                   str(log_dir), "--content", "--type", types, "--json"]
            cmd += ["--cursor", cursor] if cursor else ["--from-start"]
            res = run_quiet(cmd)
            pages += 1
            try:
                body = json.loads(res.stdout)
            except ValueError:
                print(f"  inspect ctl failed: {res.stderr[-300:]}")
                break
            if body.get("done") or not body.get("events") or body.get("next") == cursor:
                break
            cursor = body.get("next")
    ctl_wall, ctl_cpu = time.perf_counter() - w0, children_cpu() - c0
    k = max(len(ids), 1)

    print(f"\n{n} samples, cpus={os.cpu_count()}")
    print(f"{'method':<34} {'wall':>8} {'cpu':>8} {'samples/s':>10}")
    for (name, j), (cli_wall, cli_cpu) in cli.items():
        label = f"inspect-watch watch --once -j{j} {name}"
        print(f"{label:<34} {cli_wall:>7.1f}s {cli_cpu:>7.1f}s {n / cli_wall:>10.1f}")
    print(f"{'Python API (in-process)':<34} {api_wall:>7.1f}s {api_cpu:>7.1f}s "
          f"{n / api_wall:>10.1f}")
    print(f"{'inspect ctl paging, measured':<34} {ctl_wall:>7.1f}s {ctl_cpu:>7.1f}s "
          f"{k / ctl_wall:>10.2f}   ({k} samples, {pages} pages; events only, no rules)")
    print(f"{'inspect ctl paging, extrapolated':<34} {ctl_wall * n / k:>7.0f}s "
          f"{ctl_cpu * n / k:>7.0f}s {k / ctl_wall:>10.2f}   (x{n / k:.0f}, linear)")
    # Inspect Scout's grep scanners, as measured on machines like these (issue #6):
    # about 12 s to start and 47 ms per transcript
    scout = 12.0 + 0.047 * n
    print(f"{'Inspect Scout grep (reference)':<34} {scout:>7.1f}s {'':>8} {n / scout:>10.1f}"
          "   (12 s start-up + 47 ms per transcript; not run here)")
    for (name, j), (cli_wall, _) in cli.items():
        print(f"  -j{j} {name}: {scout / cli_wall:.1f}x Scout's throughput, start-up included; "
              f"per transcript {(n / cli_wall) / (1 / 0.047):.1f}x")


if __name__ == "__main__":
    main()
