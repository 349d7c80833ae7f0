"""The watcher's cost against its floors, every row of issue 31 from one command.

    python benchmarks/bench_cost.py [--rounds 3] [--small-log-dir DIR] [--samples 5000]
                                    [--live-samples 125] [--base [NAME=]TREE] [--engine compiled]
                                    [--no-live] [--no-scout] [--save]

Every figure is a whole process as ``time`` sees it (user + system CPU from ``os.wait4``,
wall time, peak RSS), start-up and end included, on the engine ``pip install .`` builds
(``--engine source``: the pure-Python sources). Rows:

1. live against post-hoc, per event: ``bench_live_replay.py`` (125 real SWE-bench runs
   re-enacted live at once and watched by ``watch --poll 1`` until the eval ends; then the
   log it wrote scanned by ``watch --log-dir --once -j 1``), run once, its figures quoted.
2. post-hoc against its floor: ``watch --log-dir LOG --once --format jsonl -j 1`` over the
   shared corpus's 375 SWE-bench runs against a process that opens the ``.eval`` and
   orjson-decodes every sample.
3. post-hoc against Inspect Scout: the same log scanned by Scout (``inspect_scout.scan``,
   one process, ``max_processes=1``) with two scanners written here following Scout's
   conventions: a grep scanner (Scout's own ``grep_scanner``) and a repeated-call scanner
   (the same tool call, function and arguments, made twice or more).
4. 5,000 small samples post-hoc (``watch -j 1``) over a log the scripted model writes
   (``bench_posthoc.py``'s task, 2 tool calls a sample; reuse one with
   ``--small-log-dir``). ``--base [NAME=]TREE`` runs the same scan on another build (an
   older commit's installed package) in the same rounds.

Rows 2-4 run in interleaved rounds (floor, watch, Scout, small samples, base), so drift in
the machine's speed hits each alike; the medians and the ratio of medians are printed
with the machine's load average at the start.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import FLOOR, REPO, SWE, banner, tmpdir  # noqa: E402

TIME = "/usr/bin/time"  # GNU time (the Debian package "time")


# Scout's conventions: scanners are @scanner factories returning an async scan function
# of a Transcript; results carry a value, an explanation and references to events
SCOUT = '''
import json, sys
from inspect_scout import (Reference, Result, Scanner, Transcript, grep_scanner, scan,
                           scanner, transcripts_from)


@scanner(messages="all")
def grep_errors() -> Scanner[Transcript]:
    """Messages that mention a traceback or an error (Scout's grep scanner)."""
    return grep_scanner(["Traceback (most recent call last)", "error:"])


@scanner(events=["tool"])
def repeated_call() -> Scanner[Transcript]:
    """The same tool call (function and arguments, whole) made twice or more."""

    async def scan_one(transcript: Transcript) -> Result:
        seen: dict[str, list[str]] = {}
        for e in transcript.events:
            if getattr(e, "event", None) != "tool":
                continue
            key = e.function + json.dumps(e.arguments, sort_keys=True, default=str)
            seen.setdefault(key, []).append(e.uuid or "")
        repeats = {k: v for k, v in seen.items() if len(v) >= 2}
        most = max((len(v) for v in repeats.values()), default=0)
        refs = [Reference(type="event", id=u) for v in repeats.values() for u in v if u]
        return Result(value=most, explanation=f"{len(repeats)} call(s) made more than once",
                      references=refs)

    return scan_one


status = scan(scanners=[grep_errors(), repeated_call()],
              transcripts=transcripts_from(sys.argv[1]), scans=sys.argv[2],
              max_processes=1, display="none")
print("complete" if status.complete else "incomplete")
'''


def run(cmd: list[str], env: dict[str, str], cwd: str) -> tuple[float, float, float, str]:
    """(CPU seconds, wall seconds, peak RSS MB, stdout) of one whole process."""
    # GNU time reports the command's own peak RSS: a child's ru_maxrss from here would
    # count this (large) process's pages, which the child holds until it execs
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile("r") as peak:
        t0 = time.perf_counter()
        proc = subprocess.Popen([TIME, "-f", "%M", "-o", peak.name, *cmd], env=env, cwd=cwd,
                                stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        _, status, ru = os.wait4(proc.pid, 0)  # (with its waited-for child: the command)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, errors = out.read().decode(), err.read().decode()
        kb = peak.read().strip().splitlines()
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd[:6])} failed ({proc.returncode}):\n{errors[-3000:]}")
    return ru.ru_utime + ru.ru_stime, wall, int(kb[-1]) / 1024 if kb else 0.0, text


def generate_small(work: Path, samples: int) -> Path:
    """A log dir of ``samples`` scripted samples of 2 tool calls each."""
    from bench_posthoc import generate

    return generate(work, samples, 2)


def live_row(args: argparse.Namespace) -> dict[str, str]:
    """Run bench_live_replay.py once; its figures."""
    cmd = [sys.executable, str(REPO / "benchmarks" / "bench_live_replay.py"), "--samples",
           str(args.live_samples), "--engine", args.engine]
    print(f"\nrow 1: {' '.join(cmd[1:])} ...", flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    text = proc.stdout
    got: dict[str, str] = {"text": text}
    for name, rx in (("events", r"([\d,]+) events a rule reads"),
                     ("live", r"live \(watched while it ran\)\s+([\d.]+)\s+([\d.]+)"),
                     ("post", r"post-hoc \(the log, --jobs 1\)\s+([\d.]+)\s+([\d.]+)"),
                     ("ratio", r"live / post-hoc per event: ([\d.]+)x"),
                     ("same", r"findings: live .*: (identical|DIFFERENT)"),
                     ("peak", r"peak (\d+) MB")):
        m = re.search(rx, text)
        if m:
            got[name] = " / ".join(m.groups())
    if proc.returncode != 0 or "ratio" not in got:
        print(text[-3000:], proc.stderr[-3000:])
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--log", default=str(SWE), help="the log of rows 2 and 3")
    ap.add_argument("--small-log-dir", help="reuse this log dir of small samples (row 4)")
    ap.add_argument("--samples", type=int, default=5000, help="small samples to generate")
    ap.add_argument("--live-samples", type=int, default=125)
    ap.add_argument("--engine", choices=["compiled", "source"], default="compiled")
    ap.add_argument("--base", metavar="[NAME=]TREE", action="append", default=[],
                    help="an installed tree of another build (PYTHONPATH) scanned beside "
                         "(repeatable), e.g. before=build/compiled/<digest> (NAME: the "
                         "tree's directory name when not given)")
    ap.add_argument("--no-live", action="store_true")
    ap.add_argument("--no-scout", action="store_true")
    ap.add_argument("--save", action="store_true",
                    help="also write this report to benchmarks/results/cost.txt")
    args = ap.parse_args()
    # checked before any row runs (row 1 takes minutes)
    bases: dict[str, str] = {}
    for b in args.base:
        name, sep, base = b.rpartition("=")
        base = str(Path(base).resolve())
        if not (Path(base) / "watcher").is_dir():
            ap.error(f"--base {b}: no watcher package in {base}")
        bases[name if sep and name else Path(base).name] = base
    if args.save:
        from bench_live_replay import _tee

        _tee(REPO / "benchmarks" / "results" / "cost.txt")
    banner("bench_cost")
    work = tmpdir("bench-cost-")
    env0 = {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    env0["INSPECT_LOG_LEVEL"] = "warning"
    tree = str(REPO)
    if args.engine == "compiled":
        from tests.compiled import compiled_tree

        print("building (or reusing) the compiled engine from the working tree ...",
              flush=True)
        tree = str(compiled_tree())
    wenv = {**env0, "PYTHONPATH": tree}
    cwd = str(work)  # no `watcher` package here: PYTHONPATH decides what is imported
    says = run([sys.executable, "-m", "watcher", "--version"], wenv, cwd)[3].strip()
    print(f"engine: {says}")
    small = Path(args.small_log_dir) if args.small_log_dir else None
    if small is None:
        print(f"generating {args.samples} small samples ...", flush=True)
        small = generate_small(work, args.samples)
    small_n = sum(1 for _ in small.rglob("*.eval"))
    print(f"small-sample log dir: {small} ({small_n} log(s))")

    live: dict[str, str] = {}
    if not args.no_live:
        live = live_row(args)

    def watch(log: str) -> list[str]:
        return [sys.executable, "-m", "watcher", "watch", "--log-dir", log, "--once",
                "--format", "jsonl", "-o", os.devnull, "--quiet", "--jobs", "1"]

    runs: dict[str, tuple[list[str], dict[str, str]]] = {
        "floor": ([sys.executable, "-c", FLOOR, args.log], env0),
        "watch": (watch(args.log), wenv),
    }
    if not args.no_scout:
        (work / "scout_bench.py").write_text(SCOUT)
        runs["scout"] = ([sys.executable, str(work / "scout_bench.py"), args.log,
                          str(work / "scans")], env0)
    runs["small"] = (watch(str(small)), wenv)
    for name, base in bases.items():
        benv = {**env0, "PYTHONPATH": base}
        print(f"--base {name}: " + run([sys.executable, "-m", "watcher", "--version"], benv,
                                       cwd)[3].strip())
        runs[f"watch, {name}"] = (watch(args.log), benv)
        runs[f"small, {name}"] = (watch(str(small)), benv)
    print("\nwarming the file cache and byte-compiled modules ...", flush=True)
    events = int(run(*runs["floor"], cwd)[3].strip())
    for name, (cmd, env) in runs.items():
        if name != "floor":
            run(cmd, env, cwd)
    got: dict[str, list[tuple[float, float, float]]] = {k: [] for k in runs}
    for r in range(args.rounds):
        line = []
        for name, (cmd, env) in runs.items():
            cpu, wall, rss, _ = run(cmd, env, cwd)
            got[name].append((cpu, wall, rss))
            line.append(f"{name} {cpu:.2f}/{wall:.2f}s")
        print(f"round {r + 1} (CPU/wall): " + ", ".join(line), flush=True)

    med = {k: (statistics.median(c for c, _, _ in v), statistics.median(w for _, w, _ in v),
               max(m for _, _, m in v)) for k, v in got.items()}
    print(f"\nwhole processes, medians of {args.rounds} interleaved rounds; load average "
          "at the start above")
    print(f"{'':46}{'CPU s':>8}{'wall s':>8}{'peak MB':>9}")
    labels = {"floor": f"floor: open + orjson every sample ({events:,} ev.)",
              "watch": "watch --once -j 1, 375 SWE-bench runs",
              "scout": "Scout 0.6.1, grep + repeated-call scanners",
              "small": "watch --once -j 1, 5,000 small samples"}
    for name in bases:
        labels[f"watch, {name}"] = f"  the same 375 runs, {name} build"
        labels[f"small, {name}"] = f"  the same small samples, {name} build"
    for k, (cpu, wall, rss) in med.items():
        print(f"{labels.get(k, k):46}{cpu:8.2f}{wall:8.2f}{rss:9.0f}")

    print("\n| what | measured | goal |\n| --- | --- | --- |")
    if live:
        print(f"| live CPU per event / post-hoc, {live.get('events', '?')} events "
              f"(live / post-hoc CPU s, ms per event: {live.get('live', '?')}; "
              f"{live.get('post', '?')}; findings {live.get('same', '?')}) | "
              f"**{live.get('ratio', '?')}x** | <= 2x |")
    w, f = med["watch"], med["floor"]
    print(f"| post-hoc -j 1 / floor, 375 runs (CPU; wall) | **{w[0] / f[0]:.2f}x**; "
          f"{w[1] / f[1]:.2f}x | <= 3x |")
    if "scout" in med:
        s = med["scout"]
        print(f"| Scout (2 scanners) / post-hoc, same log (CPU; wall) | **{s[0] / w[0]:.1f}x**; "
              f"{s[1] / w[1]:.1f}x | >= 20x |")
    sm = med["small"]
    print(f"| small samples post-hoc -j 1 | **{sm[1]:.2f} s** wall, {sm[0]:.2f} s CPU "
          "| < 5.3 s |")
    print(f"| peak RSS, post-hoc of the 375 runs | {w[2]:.0f} MB | <= ~63 MB |")
    for name in bases:
        bw, bs = med[f"watch, {name}"], med[f"small, {name}"]
        scout = f"; Scout / it {med['scout'][0] / bw[0]:.1f}x" if "scout" in med else ""
        print(f"| {name} build: post-hoc / floor; small samples; peak RSS | "
              f"{bw[0] / f[0]:.2f}x (wall {bw[1] / f[1]:.2f}x){scout}; {bs[1]:.2f} s wall, "
              f"{bs[0]:.2f} s CPU; {bw[2]:.0f} MB | |")
    if live.get("text") and args.save:
        print("\nrow 1 in full:\n" + live["text"])
    rev = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                         capture_output=True, text=True).stdout.strip()
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"watcher at commit {rev}; largest child {peak:.0f} MB; work dir {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
