"""setup.py's COMPILED list: the modules that exist and run per event, and no others.

mypyc compiles exactly the modules listed (setup.py); a module that runs for every event
but is missing from the list silently runs interpreted (the compiled build loses its
speed), and a listed path that no longer exists breaks the build. Both lists together
cover watcher/engine, so a new engine module must be placed in one of them.
"""

from __future__ import annotations

import ast
import collections
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from tests.engine.util import REPO
from watcher.engine import Engine, RunContext, load_rules
from watcher.engine.runtime import SampleStatus
from watcher.events import normalise
from watcher.findings import SampleRef

# what runs per event but stays interpreted on purpose (setup.py says why)
INTERPRETED_ON_PURPOSE = {
    "watcher/findings.py",  # frozen dataclasses, compiled, cannot be unpickled (--jobs)
}


def _setup_list(name: str) -> list[str]:
    tree = ast.parse((REPO / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"setup.py has no {name}")


COMPILED = _setup_list("COMPILED")
INTERPRETED = _setup_list("INTERPRETED")


def test_listed_modules_exist_once() -> None:
    for path in COMPILED + INTERPRETED:
        assert (REPO / path).is_file(), path
    assert len(set(COMPILED)) == len(COMPILED) and not set(COMPILED) & set(INTERPRETED)


def test_the_two_lists_cover_the_engine() -> None:
    engine = {str(p.relative_to(REPO)) for p in (REPO / "watcher" / "engine").rglob("*.py")}
    assert engine == {p for p in COMPILED + INTERPRETED if p.startswith("watcher/engine/")}


def _per_event_modules() -> collections.Counter[str]:
    """The watcher modules whose Python functions run while the built-in pack reads the
    shared corpus (rows, events, a tick, the end of each sample), after a first pass
    has built everything built lazily (the RE2 sets, the dispatch table)."""
    from tests.corpus import CORPUS
    from watcher.sources.logfiles import iter_log_samples

    engine = Engine(load_rules())
    # a few samples of each log are enough to reach every kind of rule the pack has
    data = []
    for log in sorted(CORPUS.glob("*.eval")):
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / log.name).symlink_to(log)
            for k, (_task, row, evs) in enumerate(iter_log_samples(tmp)):
                data.append((row, [normalise(e, engine.tier) for e in evs]))
                if k == 11:
                    break
    root = str(REPO / "watcher")
    seen: collections.Counter[str] = collections.Counter()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(root):
            seen[frame.f_code.co_filename] += 1

    def run() -> None:
        for n, (row, evs) in enumerate(data):
            watch = engine.open_sample(SampleRef(task="t", task_id="t", eval_id="e",
                                                 model="m", sample_id=str(n), epoch=1))
            watch.sample_row(row, RunContext())
            for e in evs:
                watch.feed(e)
            watch.tick(time.time(), SampleStatus(last_event_at=0.0))
            watch.finalize()

    run()
    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return collections.Counter({str(Path(f).relative_to(REPO)): c for f, c in seen.items()})


@pytest.mark.slow  # traces a scan
def test_what_runs_per_event_is_compiled() -> None:
    pytest.importorskip("watcher.sources.logfiles")
    from watcher.engine import COMPILED as RUNNING_COMPILED

    if RUNNING_COMPILED:
        pytest.skip("the compiled build: its functions are not seen by the profiler")
    ran = _per_event_modules()
    assert ran["watcher/engine/runtime.py"] > 0 and ran["watcher/engine/detectors/repeat.py"]
    missing = set(ran) - set(COMPILED) - INTERPRETED_ON_PURPOSE
    assert not missing, f"run per event but not in setup.py's COMPILED: {sorted(missing)}"
