"""Cost of one events page: HttpSource (in-process HTTP) vs ``inspect ctl … --json``.

    python benchmarks/bench_poll.py [--http-reads 200] [--cli-reads 5] [--limit 500]

Starts a real ``inspect eval`` (scripted model, ``--ctl-server keep``, a long
sample), waits until its sample has events, then reads the same page of the same
sample (from the start, the built-in pack's event types, content tier) through
both transports, side by side in one run:

* HttpSource: ``time.process_time`` of this process (client CPU) and wall time;
* CliSource: ``resource.getrusage(RUSAGE_CHILDREN)`` of the ``inspect ctl``
  subprocesses and wall time.

The eval process's own CPU to serve the page is the same for both and is not
counted. Prints per-page figures and the CPU ratio (target: HTTP >= 200x cheaper).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import banner, children_cpu, start_eval, tmpdir, wait_running  # noqa: E402

from watcher.engine import Engine, load_rules  # noqa: E402
from watcher.sources.cli import CliSource  # noqa: E402
from watcher.sources.http import HttpSource  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--http-reads", type=int, default=200)
    ap.add_argument("--cli-reads", type=int, default=5)
    ap.add_argument("--limit", type=int, default=200,
                    help="events page size; the run waits until the page is full, so both "
                    "transports read the same events although the sample keeps growing")
    args = ap.parse_args()
    banner("bench_poll")
    engine = Engine(load_rules(builtin=True, user_dir=False))
    types, tier = engine.event_types, engine.tier

    work = tmpdir("bench-poll-")
    proc = start_eval(work, "slow", "-T", "samples=1", "-T", "turns=400", "--ctl-server",
                      "keep", tool_delay=0.05)
    try:
        info = wait_running(proc)
        os.environ["XDG_DATA_HOME"] = str(proc.data_home)  # the CLI discovers the same eval
        http = HttpSource(info["server"])
        task = info["task"]
        row = next(r for r in info["rows"] if r.status == "running")
        deadline = time.time() + 120
        while time.time() < deadline:
            page = http.events(task, row.sample_id, row.epoch, since=None, types=types,
                               tier=tier, limit=args.limit)
            if len(page.events) >= args.limit:
                break
            time.sleep(0.5)
        print(f"eval pid {proc.proc.pid}, sample {row.sample_id}: page of up to "
              f"{args.limit} events, types={sorted(types) if types else 'all'}, tier={tier}")

        # -- HTTP: warm, then time
        http.events(task, row.sample_id, row.epoch, since=None, types=types, tier=tier,
                    limit=args.limit)
        n_http = 0
        c0, w0 = time.process_time(), time.perf_counter()
        for _ in range(args.http_reads):
            page = http.events(task, row.sample_id, row.epoch, since=None, types=types,
                               tier=tier, limit=args.limit)
            n_http += len(page.events)
        http_cpu = (time.process_time() - c0) / args.http_reads
        http_wall = (time.perf_counter() - w0) / args.http_reads
        http.close()

        # -- CLI
        cli = CliSource(pid=proc.proc.pid)
        cli_tasks = [t for t in cli.tasks() if t.eval_id == task.eval_id] or [task]
        n_cli = 0
        c0, w0 = children_cpu(), time.perf_counter()
        for _ in range(args.cli_reads):
            page = cli.events(cli_tasks[0], row.sample_id, row.epoch, since=None, types=types,
                              tier=tier, limit=args.limit)
            n_cli += len(page.events)
        cli_cpu = (children_cpu() - c0) / args.cli_reads
        cli_wall = (time.perf_counter() - w0) / args.cli_reads
    finally:
        proc.stop()

    print(f"events per page: http {n_http / args.http_reads:.0f}, "
          f"cli {n_cli / args.cli_reads:.0f}")
    print(f"{'transport':<10} {'reads':>6} {'cpu/page':>12} {'wall/page':>12}")
    print(f"{'http':<10} {args.http_reads:>6} {http_cpu * 1000:>10.2f}ms "
          f"{http_wall * 1000:>10.2f}ms")
    print(f"{'cli':<10} {args.cli_reads:>6} {cli_cpu * 1000:>10.0f}ms "
          f"{cli_wall * 1000:>10.0f}ms")
    print(f"HTTP is {cli_cpu / http_cpu:,.0f}x cheaper in CPU and "
          f"{cli_wall / http_wall:,.0f}x faster in wall time per page "
          f"(target >= 200x CPU)")


if __name__ == "__main__":
    main()
