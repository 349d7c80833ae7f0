"""A post-hoc scan against its floor: opening the log and decoding every sample.

    python benchmarks/bench_posthoc_floor.py [--log LOG.eval] [--rounds 5] [--no-compiled]

The floor is what no scan can avoid: a Python process that opens the ``.eval`` zip and
decodes every sample's JSON with orjson. The scan is the product, as a user runs it:
``inspect-watch watch --log-dir LOG --once --format jsonl -o /dev/null`` with the whole
built-in pack (whole-value identity on), on the compiled engine that ``pip install .``
builds (tests/compiled.py builds that wheel from the working tree) and on the pure-Python
sources, with the default ``--jobs`` (one process per CPU for 8 MB of logs or more) and
with ``--jobs 1``. Each is a whole process, start-up included; the rounds alternate floor and scans
so that drift in the machine's speed hits both alike, and the ratio is taken round by
round (median reported). Default log: the shared corpus's 375 SWE-bench runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import FLOOR, REPO, banner  # noqa: E402

CORPUS = Path(os.environ.get("INSPECT_WATCH_CORPUS", "/work/shared/corpus/inspect"))
DEFAULT_LOG = CORPUS / "mswe-gemini3pro-swebench-replay.eval"



def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(CPU seconds, wall seconds, stdout) of one whole process, run from a directory
    without a ``watcher`` package (``python -m`` puts the working directory first)."""
    before = os.times()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, cwd=tempfile.gettempdir())
    wall = time.perf_counter() - t0
    after = os.times()
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{cmd[:4]} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    cpu = (after.children_user - before.children_user
           + after.children_system - before.children_system)
    return cpu, wall, proc.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log", default=str(DEFAULT_LOG))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-compiled", action="store_true")
    args = ap.parse_args()
    banner("post-hoc scan vs its floor")
    trees = {"pure": str(REPO)}
    if not args.no_compiled:
        sys.path.insert(0, str(REPO))
        from tests.compiled import compiled_tree

        print("building (or reusing) the compiled engine from the working tree ...",
              flush=True)
        trees = {"compiled": str(compiled_tree()), **trees}
    scan = [sys.executable, "-m", "watcher", "watch", "--log-dir", args.log, "--once",
            "--format", "jsonl", "--output", os.devnull, "--quiet"]
    floor = [sys.executable, "-c", FLOOR, args.log]
    # as a user runs it: modules byte-compiled once and cached (a sandbox may set
    # PYTHONDONTWRITEBYTECODE, which makes every start compile every module again)
    env0 = {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    events = int(timed(floor, env0)[2].strip())
    for name, tree in trees.items():  # warm the file cache and the byte-compiled modules
        timed(scan, {**env0, "PYTHONPATH": tree})
        says = timed([sys.executable, "-m", "watcher", "--version"],
                     {**env0, "PYTHONPATH": tree})[2]
        if ("compiled" in says) != (name == "compiled"):
            raise SystemExit(f"the {name} run imports another engine: {says.strip()}")
    runs = {f"{name}, {label}": (tree, extra) for name, tree in trees.items()
            for label, extra in (("default --jobs", []), ("--jobs 1", ["--jobs", "1"]))}
    got: dict[str, list[tuple[float, float]]] = {"floor": [], **{k: [] for k in runs}}
    ratios: dict[str, list[float]] = {k: [] for k in runs}
    for r in range(args.rounds):
        cpu_f, wall_f, _ = timed(floor, env0)
        got["floor"].append((cpu_f, wall_f))
        for name, (tree, extra) in runs.items():
            cpu, wall, _ = timed(scan + extra, {**env0, "PYTHONPATH": tree})
            got[name].append((cpu, wall))
            ratios[name].append(wall / wall_f)
        print(f"round {r + 1}: floor {wall_f:.2f} s, " + ", ".join(
            f"{n} {got[n][-1][1]:.2f} s" for n in runs), flush=True)
    print(f"\n{Path(args.log).name}: {events:,} events; medians of {args.rounds} alternating "
          "rounds, whole processes with start-up")
    print(f"{'':42}{'CPU s':>8}{'wall s':>8}{'x floor (wall)':>16}")
    for name, rows in got.items():
        cpu = statistics.median(c for c, _ in rows)
        wall = statistics.median(w for _, w in rows)
        ratio = f"{statistics.median(ratios[name]):.2f}x" if name in ratios else "1.00x"
        label = "floor: open + orjson every sample" if name == "floor" else f"watch, {name}"
        print(f"{label:42}{cpu:8.2f}{wall:8.2f}{ratio:>16}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
