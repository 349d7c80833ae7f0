"""Where each ``watch`` option goes, declared once; the copies are made from it.

An option of ``inspect-watch watch`` passes from its click option to
:class:`watcher.app.WatchOptions` (the same name: tests/test_app.py holds the pair),
then to :class:`~watcher.run.watch.WatchConfig`, and from there to
:class:`~watcher.run.values.RunOptions`, the :class:`~watcher.run.sources.SourcePicker`
and the :class:`~watcher.run.router.Router`. Each hop was a hand-written copy, and a
copy someone forgot fell back to its default without a word. :data:`ROUTES` says, for
each field of ``WatchConfig``, which library option feeds it and what it feeds; the
copies are made from it, and tests/test_option_routes.py fails on a field or keyword
that no route names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Route:
    """One ``WatchConfig`` field: the ``WatchOptions`` field that feeds it (``None``: set
    only by library callers, such as a parallel scan's workers), ``convert`` on the way,
    and the ``RunOptions`` field, ``SourcePicker`` keyword and ``Router`` keyword it
    feeds (``None``: the :class:`~watcher.run.watch.Watch` reads it itself)."""

    config: str
    option: str | None = None
    run: str | None = None
    picker: str | None = None
    router: str | None = None
    convert: Callable[[Any], Any] | None = None


ROUTES: tuple[Route, ...] = (
    Route("transport", "transport", picker="transport"),
    Route("log_dir", "log_dir", picker="log_dir"),
    Route("replay", "replay", picker="replay", convert=list),
    Route("follow", "follow", picker="follow"),
    Route("once", "once", run="once", picker="once"),
    Route("poll", "poll", run="poll"),
    Route("selector", "selector", run="selector", picker="selector"),
    Route("min_confidence", "min_confidence", router="min_confidence"),
    Route("fail_on", "fail_on", router="fail_on"),
    Route("wait_for_evals", "wait_for_evals"),
    Route("read_timeout", "read_timeout", picker="read_timeout"),
    Route("exit_grace", run="exit_grace"),
    Route("jobs", "jobs", convert=lambda jobs: jobs or 1),  # app.check decided None
    Route("shard", run="shard"),  # a parallel scan's worker: its share of the samples
    Route("log_shard", "shard", picker="shard"),  # --shard K/N: a share of the logs
    Route("alert_drain", "alert_drain"),
    Route("log_hints", "log_hints", router="log_hints"),
    Route("sample_detail", "sample_detail"),
    Route("recent_events", "recent_events", run="recent_events"),
    Route("task_budget", "task_budget"),
)

# WatchOptions fields that stop at watcher.app: the rules (the engine), the outputs
# (reporters), the alerts, the state file, the watchdog, --release-when-done, and
# --evals-from (app.check folds it into the selector)
APP_OPTIONS = frozenset({
    "evals_from", "state_path", "rules", "disable", "only", "needs_max", "no_builtin",
    "suppress", "format", "output", "summary_md", "summary_html", "full_evidence", "quiet",
    "verbose", "no_color", "on_finding", "on_finding_timeout", "notify",
    "notify_min_confidence", "notify_rate", "alert_queue", "act", "dry_run", "act_policy",
    "act_max", "act_max_task", "release_when_done"})
# RunOptions fields that are tuning, not options of a watch (tests and benchmarks set
# them on Watch.opts)
RUN_TUNING = frozenset({"page_limit", "resync_every"})


def config_kwargs(options: Any) -> dict[str, Any]:
    """The ``WatchConfig`` keywords from checked ``WatchOptions``."""
    out: dict[str, Any] = {}
    for r in ROUTES:
        if r.option is not None:
            value = getattr(options, r.option)
            out[r.config] = r.convert(value) if r.convert is not None else value
    return out


def run_kwargs(config: Any) -> dict[str, Any]:
    """The ``RunOptions`` keywords from a ``WatchConfig``."""
    return {r.run: getattr(config, r.config) for r in ROUTES if r.run is not None}


def picker_kwargs(config: Any) -> dict[str, Any]:
    """The ``SourcePicker`` keywords from a ``WatchConfig``."""
    return {r.picker: getattr(config, r.config) for r in ROUTES if r.picker is not None}


def router_kwargs(config: Any) -> dict[str, Any]:
    """The ``Router`` keywords from a ``WatchConfig``."""
    return {r.router: getattr(config, r.config) for r in ROUTES if r.router is not None}
