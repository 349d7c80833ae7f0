"""Real transcripts re-enacted live: the watcher's CPU per event, live against post-hoc.

    python benchmarks/bench_live_replay.py [--samples 125] [--epochs 1] [--turn-delay 0]
                                           [--poll 1] [--engine source|compiled]
                                           [--account] [--profile FILE]

The shared corpus's 375 SWE-bench runs (``mswe-gemini3pro-swebench-replay.eval``: real
model turns and real tool outputs, several KB each) are re-enacted by a real Inspect
``react()`` agent: the scripted model (``inspect_watch_scripted``, driven through
``custom_outputs``) emits each sample's recorded turns in order, and its ``bash`` tool
returns the recorded output. ``--samples N`` takes the first N sample ids in sha256 order
(``benchmarks/labels/view.py --select``), ``--epochs K`` runs each K times (375 x 3 =
1,125 samples for a fleet of a thousand); all of them run at once. ``--turn-delay S``
waits S seconds (+- 50 %) before each model turn: 0 replays as fast as the eval can,
3 is a realistic pace (a model turn every few seconds).

The eval is watched live by ``inspect-watch watch --format jsonl -o FILE --poll P`` (a
subprocess; its CPU from ``os.wait4``), then the log it wrote is scanned post-hoc by
``inspect-watch watch --log-dir LOG --once --jobs 1`` (same engine; ``--post-runs``
times, 3 by default, the median CPU taken: that short process's CPU moved by up to a
quarter between runs, and with it the ratio). Printed side by
side: events, CPU and CPU per event of each, their ratio, the live watcher's share of
one core over the eval's life, detection latency (p50 / p95, from the completion of each
finding's last evidence event), and whether the live findings equal the post-hoc ones.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_fleet import completion_times, reap, sample_peak, tail  # noqa: E402
from common import REPO, banner, percentile, tmpdir, watch_cmd  # noqa: E402
from common import SWE as LOG  # noqa: E402

_REF = re.compile(r"attachment://([0-9a-f]{32})")

TASK = '''
import asyncio, json, os, random
from inspect_ai import Task, task
from inspect_ai.agent import react
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, get_model
from inspect_ai.scorer import includes
from inspect_ai.tool import tool
from inspect_ai.util import store
import watcher.scripted  # registers inspect_watch_scripted

SCRIPTS = json.load(open(os.environ["REPLAY_SCRIPTS"]))
DELAY = float(os.environ.get("REPLAY_TURN_DELAY", "0"))
NAME = "inspect_watch_scripted/replay"


async def outputs(input, tools, tool_choice, config):
    first = next(m for m in input if m.role == "user")
    sid = first.text.split("]")[0].lstrip("[")
    turn = sum(1 for m in input if m.role == "assistant")
    script = SCRIPTS[sid]
    if DELAY:
        await asyncio.sleep(DELAY * (0.5 + random.random()))
    if turn >= len(script):
        return ModelOutput.for_tool_call(NAME, "submit", {"answer": "done"})
    step = script[turn]
    if "tool" in step:
        store().set("replay_result", step.get("result", ""))
        return ModelOutput.for_tool_call(NAME, step["tool"], step["args"],
                                         content=step.get("text") or None)
    return ModelOutput.from_content(NAME, step.get("text", ""))


@tool
def bash():
    async def execute(cmd: str):
        """Run a bash command (replayed: the recorded output).

        Args:
            cmd: the command
        """
        return store().get("replay_result", "")
    return execute


@task
def replay():
    return Task(
        dataset=[Sample(id=sid, input=f"[{sid}] Resolve the issue described in the "
                        "repository.", target="done") for sid in SCRIPTS],
        solver=react(tools=[bash()]), scorer=includes(), message_limit=2000,
        model=get_model(NAME, custom_outputs=outputs),
    )
'''


def _resolve(value: Any, att: dict[str, str]) -> Any:
    if isinstance(value, str):
        return _REF.sub(lambda m: att.get(m.group(1), m.group(0)), value)
    if isinstance(value, dict):
        return {k: _resolve(v, att) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, att) for v in value]
    return value


def scripts(n: int) -> dict[str, list[dict[str, Any]]]:
    """Each sample's recorded turns: text, the tool call, the tool's recorded output."""
    import zipfile_zstd  # noqa: F401  (registers zstd with zipfile)

    z = zipfile.ZipFile(LOG)
    names = {n[len("samples/"):].rsplit("_epoch_", 1)[0]: n for n in z.namelist()
             if n.startswith("samples/")}
    ids = sorted(names, key=lambda i: hashlib.sha256(i.encode()).hexdigest())[:n]
    out: dict[str, list[dict[str, Any]]] = {}
    for sid in ids:
        d = json.loads(z.read(names[sid]))
        att = d.get("attachments") or {}
        steps: list[dict[str, Any]] = []
        for e in d["events"]:
            if e.get("event") == "model":
                msg = ((e.get("output") or {}).get("choices") or [{}])[0].get("message") or {}
                content = _resolve(msg.get("content"), att)
                text = content if isinstance(content, str) else ""
                calls = msg.get("tool_calls") or []
                call = calls[0] if calls else None
                if call is not None and call.get("function") == "submit":
                    break
                step: dict[str, Any] = {"text": text}
                if call is not None:
                    step.update(tool=call["function"], args=_resolve(call["arguments"], att))
                steps.append(step)
            elif e.get("event") == "tool" and steps and "tool" in steps[-1]:
                result = _resolve(e.get("result"), att)
                steps[-1]["result"] = result if isinstance(result, str) else json.dumps(result)
        out[sid] = steps
    return out


def folded(path: Path) -> dict[tuple[str, str, int, str], tuple[str, int]]:
    out: dict[tuple[str, str, int, str], tuple[str, int]] = {}
    for line in path.read_text().splitlines():
        d = json.loads(line)
        if d.get("kind") == "finding":
            out[(d["sample_id"], str(d["epoch"]), d["attempt"], d["rule"] + f"#{d['episode']}")] = (
                d["confidence"], d["count"])
    return out


def sample_ends(log_dir: Path) -> dict[tuple[str, int], float]:
    """(sample id, epoch) -> when the sample completed (epoch seconds), from its log."""
    from datetime import datetime

    import inspect_ai.log  # noqa: F401  (registers the zstd compression its logs use)

    out: dict[tuple[str, int], float] = {}
    for log in sorted(log_dir.glob("*.eval")):
        with zipfile.ZipFile(log) as z:
            for name in z.namelist():
                if name.startswith("samples/") and name.endswith(".json"):
                    d = json.loads(z.read(name))
                    if isinstance(d.get("completed_at"), str):
                        out[(str(d["id"]), int(d["epoch"]))] = datetime.fromisoformat(
                            d["completed_at"]).timestamp()
    return out


def events_in(log_dir: Path) -> int:
    """Events a rule pack reads (model, tool, error ...) in the logs: the live count."""
    wanted = {"model", "tool", "error", "info", "sample_limit"}
    import inspect_ai.log  # noqa: F401  (registers the zstd compression its logs use)

    total = 0
    for log in sorted(log_dir.glob("*.eval")):
        with zipfile.ZipFile(log) as z:
            for name in z.namelist():
                if name.startswith("samples/") and name.endswith(".json"):
                    evs = json.loads(z.read(name)).get("events") or []
                    total += sum(1 for e in evs if e.get("event") in wanted)
    return total


class _Tee:
    """stdout, copied into a file."""

    def __init__(self, stream: Any, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.stream, self.file = stream, path.open("w")

    def write(self, text: str) -> int:
        self.file.write(text)
        self.file.flush()
        return int(self.stream.write(text))

    def flush(self) -> None:
        self.stream.flush()


def _tee(path: Path) -> None:
    sys.stdout = _Tee(sys.stdout, path)  # type: ignore[assignment]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=125)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--turn-delay", type=float, default=0.0)
    ap.add_argument("--poll", type=float, default=1.0)
    ap.add_argument("--transport", choices=["auto", "http"], default="auto")
    ap.add_argument("--engine", choices=["source", "compiled"], default="source")
    ap.add_argument("--profile", metavar="FILE",
                    help="sample the live watcher with py-spy (threads holding the GIL) into "
                         "FILE, collapsed stacks; py-spy must be installed, its CPU counts")
    ap.add_argument("--account", action="store_true",
                    help="print thread CPU per component, live beside post hoc "
                         "(benchmarks/account_probe.py wraps the watcher's methods: the "
                         "CPU figures of such a run carry the wrapping's cost)")
    ap.add_argument("--profile-rate", type=int, default=100, metavar="HZ",
                    help="py-spy samples per second (with --profile)")
    ap.add_argument("--profile-all", action="store_true",
                    help="sample every thread that is running, not only the one holding "
                         "the GIL (C code such as SQLite's runs without it)")
    ap.add_argument("--post-runs", type=int, default=3, metavar="N",
                    help="post-hoc scans of the log the eval wrote (each a whole process); "
                         "the median CPU is the figure")
    ap.add_argument("--save", action="store_true",
                    help="also write this report to benchmarks/results/ (the figures the "
                         "README quotes)")
    args = ap.parse_args()
    if args.save:
        name = (f"live_replay-{args.samples}x{args.epochs}-delay{args.turn_delay:g}"
                f"-poll{args.poll:g}-{args.engine}{'-accounted' if args.account else ''}.txt")
        _tee(REPO / "benchmarks" / "results" / name)
    banner("bench_live_replay")
    work = tmpdir("bench-replay-")
    data = scripts(args.samples)
    (work / "scripts.json").write_text(json.dumps(data))
    (work / "replay_task.py").write_text(TASK)
    compiled: str | None = None
    if args.engine == "compiled":
        sys.path.insert(0, str(REPO))
        from tests.compiled import compiled_tree

        print("building (or reusing) the compiled engine from the working tree ...", flush=True)
        compiled = str(compiled_tree())
    total = len(data) * args.epochs
    turns = sum(len(s) for s in data.values()) * args.epochs
    print(f"{len(data)} recorded SWE-bench runs x {args.epochs} epoch(s) = {total} samples at "
          f"once, {turns:,} model turns; turn delay {args.turn_delay}s (+-50%); watcher poll "
          f"{args.poll}s, transport {args.transport}, engine "
          f"{'compiled' if compiled else 'pure Python (sources)'}")

    env = {**os.environ, "XDG_DATA_HOME": str(work / "data"), "INSPECT_LOG_LEVEL": "warning",
           "REPLAY_SCRIPTS": str(work / "scripts.json"),
           "REPLAY_TURN_DELAY": str(args.turn_delay)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    wenv = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    cwd = None
    if compiled is not None:  # beside no sources, so the compiled tree is imported
        wenv["PYTHONPATH"] = compiled
        cwd = str(work)
    account = work / "account.jsonl"
    if args.account:  # the watcher processes' sitecustomize, first on their path
        from account_probe import probe_dir

        probe = probe_dir(work / "account")
        wenv["PYTHONPATH"] = os.pathsep.join(
            [str(probe)] + ([wenv["PYTHONPATH"]] if wenv.get("PYTHONPATH") else []))
        wenv["IW_ACCOUNT"] = str(account)
    t0 = time.perf_counter()
    t_start = time.time()  # wall clock, as event timestamps are
    proc = subprocess.Popen(
        [sys.executable, "-m", "inspect_ai._cli.main", "eval", "replay_task.py@replay",
         "--log-dir", str(work / "logs"), "--display", "none", "--epochs", str(args.epochs),
         "--max-samples", str(total), "--max-connections", str(total)],
        env=env, cwd=work, stdout=(work / "eval.out").open("wb"), stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL)
    disc = work / "data" / "inspect_ai" / "control" / f"{proc.pid}.json"
    while not disc.exists() and proc.poll() is None:
        time.sleep(0.05)
    live = work / "live.jsonl"
    found: dict[str, tuple[float, dict[str, Any]]] = {}
    stop = threading.Event()
    tailer = threading.Thread(target=tail, args=(live, found, stop), daemon=True)
    tailer.start()
    w0 = time.perf_counter()
    live_cmd = watch_cmd("watch", "--format", "jsonl", "-o", str(live), "--poll", str(args.poll),
                         "--transport", args.transport)
    if args.profile:
        live_cmd[:0] = ["py-spy", "record", "--format", "raw", "--rate", str(args.profile_rate),
                        *([] if args.profile_all else ["--gil"]),
                        "--nonblocking", "-o", str(Path(args.profile).resolve()), "--"]
    watcher = subprocess.Popen(
        live_cmd,
        env=wenv, cwd=cwd, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
        stderr=(work / "watch.err").open("wb"))
    peaks: dict[int, float] = {}
    threading.Thread(target=sample_peak, args=(watcher.pid, peaks, stop), daemon=True).start()
    code, eval_cpu = reap(proc)
    eval_wall = time.perf_counter() - t0
    wcode, live_cpu = reap(watcher)
    live_wall = time.perf_counter() - w0
    time.sleep(0.3)
    stop.set()
    tailer.join()
    post = work / "post.jsonl"
    # the post-hoc scan is short (half a second) and its CPU moved by up to a quarter
    # between runs of one build: the median of several runs, each a whole process
    post_cpus: list[float] = []
    codes: list[int] = []
    for k in range(max(1, args.post_runs)):
        out = post if k == 0 else work / f"post-{k}.jsonl"
        before = os.times()
        res = subprocess.run(watch_cmd("watch", "--log-dir", str(work / "logs"), "--once",
                                       "--jobs", "1", "--format", "jsonl", "-o", str(out)),
                             env=wenv, cwd=cwd, capture_output=True, text=True)
        after = os.times()
        post_cpus.append(after.children_user - before.children_user
                         + after.children_system - before.children_system)
        codes.append(res.returncode)
        if k and folded(out) != folded(post):
            print(f"post-hoc run {k + 1} found other findings than the first")
    post_cpu = statistics.median(post_cpus)
    events = events_in(work / "logs")
    print(f"eval: exit {code}, wall {eval_wall:.1f}s, cpu {eval_cpu:.1f}s; "
          f"live watcher exit {wcode}, post-hoc exit {max(codes)}")
    print(f"\n{events:,} events a rule reads; CPU seconds, whole processes with start-up")
    print(f"{'':30}{'CPU s':>8}{'ms/event':>10}")
    print(f"{'live (watched while it ran)':30}{live_cpu:8.2f}{1000 * live_cpu / events:10.3f}")
    print(f"{'post-hoc (the log, --jobs 1)':30}{post_cpu:8.2f}{1000 * post_cpu / events:10.3f}"
          + (f"   (median of {len(post_cpus)} runs: "
             + ", ".join(f"{c:.2f}" for c in post_cpus) + ")" if len(post_cpus) > 1 else ""))
    print(f"live / post-hoc per event: {live_cpu / post_cpu:.2f}x; live watcher: "
          f"{100 * live_cpu / live_wall:.1f}% of one core over {live_wall:.0f}s, peak "
          f"{peaks.get(watcher.pid, 0):.0f} MB")
    completed = completion_times(work / "logs")
    ends = sample_ends(work / "logs")
    lat: list[float] = []
    by_rule: dict[str, list[float]] = {}
    near_end: list[float] = []  # evidence within two polls of its sample's end
    records: list[dict[str, Any]] = []  # each finding's latency, kept in the work dir
    for at, rec in found.values():
        ev = rec.get("evidence") or {}
        stamps = [t for t in ev.get("timestamps") or [] if isinstance(t, int | float)]
        if not stamps:
            continue
        done = [completed.get(u) for u in ev.get("event_uuids") or []]
        last = max([d for d in done if d is not None] + [max(stamps)])
        lat.append(at - last)
        records.append({"rule": rec["rule"], "sample_id": rec["sample_id"],
                        "epoch": rec["epoch"], "evidence_done": last, "seen": at,
                        "since_start": last - t_start})
        by_rule.setdefault(rec["rule"], []).append(at - last)
        end = ends.get((str(rec["sample_id"]), int(rec["epoch"])))
        if end is not None and end - last <= 2 * args.poll:
            near_end.append(at - last)
    if lat:
        print(f"detection latency from the last evidence event's completion: p50 "
              f"{percentile(lat, 50):.2f}s  p95 {percentile(lat, 95):.2f}s  max {max(lat):.2f}s "
              f"(n={len(lat)}); within two polls ({2 * args.poll:g}s): "
              f"{100 * sum(1 for x in lat if x <= 2 * args.poll) / len(lat):.1f}%")
        if near_end:
            print(f"  of which the sample ended within two polls of the evidence: n="
                  f"{len(near_end)}, p50 {percentile(near_end, 50):.2f}s  p95 "
                  f"{percentile(near_end, 95):.2f}s")
        (work / "latency.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        slow = [r for r in records if r["seen"] - r["evidence_done"] > 2 * args.poll]
        if slow:
            when = sorted(r["since_start"] for r in slow)
            print(f"  slower than two polls: {len(slow)}, their evidence at {when[0]:.0f}-"
                  f"{when[-1]:.0f}s after the eval started (median {percentile(when, 50):.0f}s)")
        print(f"  {'rule':34}{'n':>6}{'p50 s':>8}{'p95 s':>8}{'max s':>8}")
        for rule, xs in sorted(by_rule.items(), key=lambda kv: -len(kv[1])):
            print(f"  {rule:34}{len(xs):6}{percentile(xs, 50):8.2f}{percentile(xs, 95):8.2f}"
                  f"{max(xs):8.2f}")
    a, b = folded(live), folded(post)
    same = a == b
    print(f"findings: live {len(a)} episodes, post-hoc {len(b)}: "
          f"{'identical' if same else 'DIFFERENT'}")
    if not same:
        for k in [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)][:10]:
            print(f"  {k}: live {a.get(k)} post-hoc {b.get(k)}")
    notices = [json.loads(x) for x in live.read_text().splitlines()]
    gaps = [n for n in notices if n.get("kind") == "notice"
            and n.get("notice") in ("gap", "unreadable", "sample_abandoned")]
    print(f"live notices of unread events: {len(gaps)}")
    if args.account:
        from account_probe import table

        runs = [json.loads(x) for x in account.read_text().splitlines()]
        live_run = next(r for r in runs if "--log-dir" not in r["argv"])
        post_run = next(r for r in runs if "--log-dir" in r["argv"])
        print("\nwhere the CPU went (accounted: the figures above include the wrapping)")
        print(table(live_run, post_run))
    print(f"(work dir {work})")
    rev = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                         capture_output=True, text=True).stdout.strip()
    print(f"watcher at commit {rev}")


if __name__ == "__main__":
    main()
