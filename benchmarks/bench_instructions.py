#!/usr/bin/env python
"""Instructions per event through the full built-in pack (callgrind): the steady figure.

Wall-clock rates on this shared machine move by 15-40 % between runs; the number of
instructions the engine executes for a fixed event stream does not (``PYTHONHASHSEED=0``).
For each engine (the pure sources, the compiled wheel ``pip install .`` builds) and each
stream (synthetic stress events, the recorded corpus), a child process runs twice under
``valgrind --tool=callgrind``: feeding the events, and not feeding them (same imports, same
stream built, same warm-up pass, so lazily built parts such as the RE2 sets are counted in
neither). The difference divided by the events fed is the engine's cost per event.

    python benchmarks/bench_instructions.py                  # both engines, both streams
    python benchmarks/bench_instructions.py --engine compiled --stream synthetic
    python benchmarks/bench_instructions.py --tree /tmp/old-build   # any tree, e.g. a
        # compiled build of an earlier commit (``python setup.py build_ext --inplace``)

With ``--whole`` it counts whole processes instead, for each tree (the compiled build
by default): starting a watch (``watch --once`` over an empty log dir) and the post-hoc
scan of the 375 shared SWE-bench runs (``watch --once -j 1``), each after one run that
fills the caches a watch keeps between runs (parsed rule files, regex analyses: a
temporary ``INSPECT_WATCH_CACHE_DIR``), with the findings the scan wrote.

Needs valgrind (``apt-get install valgrind``); 2-8 minutes per engine and stream, about
3 minutes per tree with ``--whole``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, SWE, banner  # noqa: E402

_COLLECTED = re.compile(r"Collected : (\d+)")


def child(stream: str, feed: bool, events: int, reps: int) -> None:
    """Build the stream, warm up, then feed it ``reps`` times (or not)."""
    # imports the engine of BENCH_ENGINE_TREE
    from bench_engine import PER_SAMPLE, feed_samples, recorded_samples

    from watcher.engine import COMPILED, Engine, load_rules
    from watcher.events import normalise

    # the tree's own rule pack where it has one (an earlier commit's build may not know
    # a key today's rules use); else the bundled pack
    own = Path(os.environ.get("BENCH_ENGINE_TREE", "")) / "rules"
    engine = Engine(load_rules([own], builtin=False, user_dir=False) if own.is_dir()
                    and os.environ.get("BENCH_ENGINE_TREE") else load_rules())
    if stream == "synthetic":
        from common import synthetic_events

        evs = [normalise(e, engine.tier) for e in synthetic_events(events)]
        samples = [evs[i:i + PER_SAMPLE] for i in range(0, len(evs), PER_SAMPLE)]
    else:
        samples = recorded_samples(engine, None)[0]
    feed_samples(engine, samples)  # warm-up in both runs
    found = sum(feed_samples(engine, samples) for _ in range(reps)) if feed else 0
    print(f"events {reps * sum(map(len, samples))} findings {found} compiled {COMPILED}")


def measure(tree: str, stream: str, events: int, reps: int,
            compiled: bool | None) -> tuple[float, int, int]:
    """(instructions per event, events fed, findings) for one engine tree and stream."""
    counts: dict[bool, int] = {}
    fed = found = 0
    for feed in (True, False):
        cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
               sys.executable, __file__, "--child", stream, "--events", str(events),
               "--reps", str(reps)] + (["--feed"] if feed else [])
        env = dict(os.environ, PYTHONHASHSEED="0", BENCH_ENGINE_TREE=tree,
                   PYTHONPATH=os.pathsep.join([tree, str(REPO)]))
        got = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tree)
        m = _COLLECTED.search(got.stderr)
        if got.returncode != 0 or m is None:
            sys.exit(f"callgrind run failed ({tree}, {stream}):\n{got.stderr[-2000:]}")
        counts[feed] = int(m.group(1))
        if feed:
            out = got.stdout.split()
            fed, found = int(out[out.index("events") + 1]), int(out[out.index("findings") + 1])
            if compiled is not None and (out[out.index("compiled") + 1] == "True") != compiled:
                sys.exit(f"{tree} did not import the {'compiled' if compiled else 'pure'} engine")
    return (counts[True] - counts[False]) / max(fed, 1), fed, found


def whole(trees: dict[str, str]) -> None:
    """Instructions of whole ``watch`` processes: starting one, and the 375-run scan."""
    if not SWE.is_file():
        sys.exit(f"the shared corpus's SWE-bench log is not at {SWE} (INSPECT_WATCH_CORPUS)")
    with tempfile.TemporaryDirectory(prefix="bench-instr-") as work:
        empty, logs, cache = Path(work, "empty"), Path(work, "swe"), Path(work, "cache")
        empty.mkdir()
        logs.mkdir()
        (logs / SWE.name).symlink_to(SWE)
        out = Path(work, "findings.jsonl")
        print(f"{'tree':<20}{'start-up instr.':>18}{'scan instr.':>18}{'findings':>10}")
        for name, tree in trees.items():
            env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=tree,
                       INSPECT_WATCH_CACHE_DIR=str(cache / name))
            counts = []
            for where in (empty, logs):
                cmd = [sys.executable, "-m", "watcher", "watch", "--log-dir", str(where),
                       "--once", "--format", "jsonl", "-o", str(out), "--quiet", "-j", "1"]
                subprocess.run(cmd, env=env, capture_output=True, cwd=work)  # the caches
                out.unlink(missing_ok=True)  # (-o appends)
                got = subprocess.run(["valgrind", "--tool=callgrind",
                                      "--callgrind-out-file=/dev/null", *cmd],
                                     env=env, capture_output=True, text=True, cwd=work)
                m = _COLLECTED.search(got.stderr)
                if got.returncode not in (0, 1) or m is None:
                    sys.exit(f"callgrind run failed ({tree}):\n{got.stderr[-2000:]}")
                counts.append(int(m.group(1)))
            findings = len(out.read_text().splitlines())
            print(f"{name:<20}{counts[0] / 1e9:>17.3f}G{counts[1] / 1e9:>17.3f}G"
                  f"{findings:>10,}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=["both", "pure", "compiled"], default="both")
    ap.add_argument("--stream", choices=["both", "synthetic", "recorded"], default="both")
    ap.add_argument("--events", type=int, default=4000, help="synthetic events")
    ap.add_argument("--reps", type=int, default=3, help="passes over the recorded corpus")
    ap.add_argument("--tree", action="append", default=[],
                    help="measure this source or build tree instead (repeatable)")
    ap.add_argument("--whole", action="store_true",
                    help="whole watch processes: starting one, and the 375-run scan")
    ap.add_argument("--child", choices=["synthetic", "recorded"], help=argparse.SUPPRESS)
    ap.add_argument("--feed", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        sys.path.insert(0, str(REPO))
        child(args.child, args.feed, args.events, args.reps if args.child == "recorded" else 1)
        return
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    banner("bench_instructions")
    trees: dict[str, str] = {}
    if args.tree:
        trees = {str(Path(t).resolve()): str(Path(t).resolve()) for t in args.tree}
    elif args.engine in ("both", "pure"):
        trees["pure"] = str(REPO)
    if not args.tree and args.engine in ("both", "compiled"):
        print("building (or reusing) the compiled engine from the working tree ...", flush=True)
        sys.path.insert(0, str(REPO))
        from tests.compiled import compiled_tree

        trees["compiled"] = str(compiled_tree())
    if args.whole:
        whole({Path(t).name if args.tree else n: t for n, t in trees.items()
               if n != "pure" or args.engine == "pure"})
        return
    streams = ["synthetic", "recorded"] if args.stream == "both" else [args.stream]
    width = max(10, *(len(n) + 2 for n in trees))
    print(f"{'stream':<11}{'engine':<{width}}{'instructions/event':>20}{'events fed':>12}"
          f"{'findings':>10}")
    for stream in streams:
        for name, tree in trees.items():
            per, fed, found = measure(tree, stream, args.events, args.reps,
                                      None if args.tree else name == "compiled")
            print(f"{stream:<11}{name:<{width}}{per:>20,.0f}{fed:>12,}{found:>10,}", flush=True)


if __name__ == "__main__":
    main()
