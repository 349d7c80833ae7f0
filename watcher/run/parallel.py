"""``--jobs``: a post-hoc scan of a log directory split over forked processes.

Rules are per sample, so samples split cleanly: each worker reads every log's
listing (so sample rules compare against the whole task, as in one process) but
streams only the samples of its shard (:meth:`~watcher.run.values.RunOptions.owns`).
Workers are forked after the rules are compiled, so they start at once and nothing
that cannot be pickled (compiled rules) crosses a process boundary; what they find
comes back to the parent (:func:`run_shards`), which routes it as usual
(:func:`merge_shards`: state, filters, sinks).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

from watcher.findings import Finding, Notice
from watcher.run.router import Router
from watcher.state import WatchState
from watcher.summary import RunSummary, SampleSummary, StatusSnapshot, TaskSummary

# what one worker found (in order), the summary of what it read, and the samples it
# read to their end
ShardResult = tuple[list[Finding | Notice], RunSummary, set[str]]


class Collect:
    """A worker's sink: everything the runner emitted, in order, for the parent."""

    def __init__(self) -> None:
        self.items: list[Finding | Notice] = []

    def start(self, context: Any) -> None:
        return None

    def finding(self, f: Finding) -> None:
        self.items.append(f)

    def notice(self, n: Notice) -> None:
        self.items.append(n)

    takes_status = False  # (the watch builds no snapshot for it)

    def status(self, snapshot: StatusSnapshot) -> None:
        return None

    def stop(self, summary: RunSummary | None = None) -> None:
        return None


# the parent's scan of one shard, for the forked workers: set just before the fork
_SCAN: Callable[[int], ShardResult] | None = None


def run_shards(jobs: int, scan: Callable[[int], ShardResult]) -> list[ShardResult]:
    """``scan(k)`` for k in 0..jobs-1, each in a forked worker. Ctrl+C (or the SIGTERM
    the caller turns into it) raises :class:`KeyboardInterrupt` here; the pool's
    workers are terminated."""
    import multiprocessing
    import pickle  # (here: a scan with --jobs 1 never needs it; the workers inherit it)

    from watcher.sources import logfiles  # noqa: F401  (imported once, inherited)

    global _SCAN
    _SCAN = scan
    try:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(jobs, initializer=_worker_signals) as pool:
            # workers pickle their results themselves: a result the pool's own thread
            # failed to unpickle would leave map() waiting for ever; here it is raised
            return [pickle.loads(b) for b in pool.map(_shard_worker, range(jobs))]
    finally:
        _SCAN = None


def merge_shards(results: list[ShardResult], router: Router,
                 state: WatchState) -> tuple[list[TaskSummary], list[SampleSummary]]:
    """Route the workers' outputs in the parent, in order; the tasks and samples they
    read (each once)."""
    seen_notices: set[tuple[str, str]] = set()
    tasks: dict[str, TaskSummary] = {}
    samples: dict[tuple[str, str, int], SampleSummary] = {}
    for outputs, summary, finished in results:
        for item in outputs:
            if isinstance(item, Notice):
                if (item.kind, item.message) in seen_notices:
                    continue  # every worker reads every listing: say it once
                seen_notices.add((item.kind, item.message))
            router.route(item)
        router.flush(force=True)
        for t in summary.tasks:
            tasks.setdefault(t.eval_id, t)
        for smp in summary.samples:
            samples.setdefault((smp.eval_id, smp.sample_id, smp.epoch), smp)
        if not router.output_failed:
            state.finished.update(finished)  # else read them again next run
    return list(tasks.values()), list(samples.values())


def _shard_worker(k: int) -> bytes:
    """Scan shard ``k``; its result, pickled."""
    assert _SCAN is not None
    import pickle

    from watcher.sources.logfiles import forget_open_zips

    forget_open_zips()  # inherited zip handles share file offsets with the parent's
    return pickle.dumps(_SCAN(k))


def _worker_signals() -> None:
    """In a parallel scan's worker: Ctrl+C at a terminal reaches the whole process group,
    but only the parent acts on it; SIGTERM (the pool's ``terminate``) ends the worker at
    once. A worker that handled either would keep the pool waiting for it for ever."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
