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

Needs valgrind (``apt-get install valgrind``); 2-8 minutes per engine and stream.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, banner  # noqa: E402

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=["both", "pure", "compiled"], default="both")
    ap.add_argument("--stream", choices=["both", "synthetic", "recorded"], default="both")
    ap.add_argument("--events", type=int, default=4000, help="synthetic events")
    ap.add_argument("--reps", type=int, default=3, help="passes over the recorded corpus")
    ap.add_argument("--tree", action="append", default=[],
                    help="measure this source or build tree instead (repeatable)")
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
