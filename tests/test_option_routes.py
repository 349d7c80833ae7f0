"""Every option of `watch` reaches where it is used: a field or keyword that no route of
watcher/run/options.py names fails here (it used to fall back to its default unsaid)."""

from __future__ import annotations

import inspect
from dataclasses import fields
from pathlib import Path

from watcher import app
from watcher.engine import Engine
from watcher.run.options import APP_OPTIONS, ROUTES, RUN_TUNING, config_kwargs
from watcher.run.router import Router
from watcher.run.sources import SourcePicker
from watcher.run.values import RunOptions, Selector
from watcher.run.watch import Watch, WatchConfig
from watcher.state import WatchState

# Router keywords that are wiring (who decides, what a hand-off says), not options
ROUTER_WIRING = {"alerts", "deciders", "live_eval", "remote_eval", "before_save", "handoff",
                 "actions"}


def _keywords(cls: type) -> set[str]:
    return {p.name for p in inspect.signature(cls).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY}


def test_every_config_field_has_one_route() -> None:
    named = [r.config for r in ROUTES]
    assert sorted(named) == sorted(f.name for f in fields(WatchConfig))


def test_every_library_option_is_routed_or_read_by_the_app() -> None:
    options = {f.name for f in fields(app.WatchOptions)}
    routed = {r.option for r in ROUTES if r.option is not None}
    assert routed <= options
    assert not routed & APP_OPTIONS
    assert options - routed == APP_OPTIONS


def test_every_runner_option_and_keyword_is_fed() -> None:
    fed = {r.run for r in ROUTES if r.run is not None}
    assert fed | RUN_TUNING == {f.name for f in fields(RunOptions)}
    assert {r.picker for r in ROUTES if r.picker} == _keywords(SourcePicker)
    assert {r.router for r in ROUTES if r.router} == _keywords(Router) - ROUTER_WIRING


def test_a_non_default_option_arrives_at_each_stop(tmp_path: Path) -> None:
    """Each routed value, set away from its default, is what the runner, the source
    picker and the router were given."""
    options = app.WatchOptions(
        selector=Selector(task="t"), log_dir=str(tmp_path), replay=(), transport="http",
        poll=2.5, once=True, follow=True, wait_for_evals=3.0, read_timeout=7.0, jobs=None,
        shard=(1, 3), min_confidence="medium", fail_on="high", alert_drain=4.0,
        log_hints=False, sample_detail=True, recent_events=9, task_budget=1000)
    config = WatchConfig(**config_kwargs(options))
    assert config.jobs == 1 and config.replay == [] and config.log_shard == (1, 3)
    watch = Watch(Engine([]), config, WatchState(), [])
    for r in ROUTES:
        value = getattr(config, r.config)
        if r.run is not None:
            assert getattr(watch.opts, r.run) == value, r
        if r.picker is not None:
            assert getattr(watch.sources, r.picker) == value, r
        if r.router is not None:
            assert getattr(watch.router, r.router) == value, r
