"""Cost of one events page: HttpSource (in-process HTTP) vs ``inspect ctl … --json``.

    python benchmarks/bench_poll.py [--http-reads 200] [--cli-reads 5] [--limit 500]
                                    [--client own|httpx|both]

Starts a real ``inspect eval`` (scripted model, ``--ctl-server keep``, a long
sample), waits until its sample has events, then reads the same page of the same
sample (from the start, the built-in pack's event types, content tier) through
both transports, side by side in one run:

* HttpSource: ``time.process_time`` of this process (client CPU) and wall time;
* CliSource: ``resource.getrusage(RUSAGE_CHILDREN)`` of the ``inspect ctl``
  subprocesses and wall time.

The eval process's own CPU to serve the page is the same for both and is not
counted. Prints per-page figures and the CPU ratio (target: HTTP >= 200x cheaper).

``--client httpx`` (or ``both``, alternating rounds in one run) reads the HTTP side
through ``httpx.HTTPTransport(uds=…)`` instead of the watcher's own client (issue
24), bounded the same way (a streamed body with a size cap, a total deadline), so the
two are compared doing the same job.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import banner, children_cpu, start_eval, tmpdir, wait_running  # noqa: E402

from watcher.engine import Engine, load_rules  # noqa: E402
from watcher.sources.cli import CliSource  # noqa: E402
from watcher.sources.http import HttpSource  # noqa: E402


class HttpxUds:
    """The ``UdsClient`` interface over httpx's UDS transport, with the same bounds."""

    def __init__(self, path: str, timeout: float = 5.0, total_timeout: float = 30.0,
                 max_bytes: int = 128 * 1024 * 1024) -> None:
        import httpx

        self.max_bytes, self.total_timeout = max_bytes, total_timeout
        self._client = httpx.Client(transport=httpx.HTTPTransport(uds=path),
                                    base_url="http://inspect-control",
                                    timeout=httpx.Timeout(timeout, connect=2.0))

    def get(self, path: str, params: dict[str, str] | None = None) -> tuple[int, bytes]:
        deadline = time.monotonic() + self.total_timeout
        with self._client.stream("GET", path, params=params,
                                 headers={"Accept": "application/json"}) as response:
            parts, size = [], 0
            for part in response.iter_raw():
                size += len(part)
                if size > self.max_bytes or time.monotonic() > deadline:
                    raise OSError("response over a bound")
                parts.append(part)
            return response.status_code, b"".join(parts)

    def close(self) -> None:
        self._client.close()


def _time_http(http: HttpSource, task: Any, row: Any, types: Any, tier: Any,
               reads: int, limit: int) -> tuple[float, float, int]:
    """CPU and wall seconds per page (after one warm-up read), and events per round."""
    def read() -> int:
        return len(http.events(task, row.sample_id, row.epoch, since=None, types=types,
                               tier=tier, limit=limit).events)

    read()
    n = 0
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(reads):
        n += read()
    return (time.process_time() - c0) / reads, (time.perf_counter() - w0) / reads, n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--http-reads", type=int, default=200)
    ap.add_argument("--cli-reads", type=int, default=5)
    ap.add_argument("--limit", type=int, default=200,
                    help="events page size; the run waits until the page is full, so both "
                    "transports read the same events although the sample keeps growing")
    ap.add_argument("--client", choices=["own", "httpx", "both"], default="own",
                    help="the HTTP client: the watcher's own (stdlib), httpx's UDS "
                    "transport, or both in alternating rounds (3 each)")
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

        # -- HTTP: warm, then time (each client in turn when comparing)
        own = http._client
        order = {"own": ["own"], "httpx": ["httpx"], "both": ["own", "httpx"] * 3}
        per_client: dict[str, list[tuple[float, float]]] = {}
        for name in order[args.client]:
            socket_path = str(info["server"].socket_path)
            http._client = own if name == "own" else HttpxUds(socket_path)  # type: ignore[assignment]
            cpu, wall, n_http = _time_http(http, task, row, types, tier, args.http_reads,
                                           args.limit)
            per_client.setdefault(name, []).append((cpu, wall))
            if name == "httpx":
                http._client.close()
        http._client = own
        http.close()
        best = {name: min(runs) for name, runs in per_client.items()}
        http_cpu, http_wall = best["own" if "own" in best else "httpx"]

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
    for name, (cpu, wall) in best.items():
        label = "http" if len(best) == 1 else f"http/{name}"
        rounds = ", ".join(f"{c * 1000:.2f}" for c, _ in per_client[name])
        print(f"{label:<10} {args.http_reads:>6} {cpu * 1000:>10.2f}ms "
              f"{wall * 1000:>10.2f}ms   (cpu ms per round: {rounds})")
    print(f"{'cli':<10} {args.cli_reads:>6} {cli_cpu * 1000:>10.0f}ms "
          f"{cli_wall * 1000:>10.0f}ms")
    for name, (cpu, wall) in best.items():
        print(f"HTTP ({name} client) is {cli_cpu / cpu:,.0f}x cheaper in CPU and "
              f"{cli_wall / wall:,.0f}x faster in wall time per page (target >= 200x CPU)")


if __name__ == "__main__":
    main()
