"""Build hook: compile the engine's hot path with mypyc (and its C whitespace fold),
or install pure Python.

The modules in ``COMPILED`` carry every event through the rule pack; compiled
they process recorded transcripts about 1.6 times as fast (benchmarks/README.md).
They stay plain, type-checked Python, and the package works unchanged without
compilation: a missing C compiler or mypy, a type error, a failed C build, an
editable install (``pip install -e .``, where a stale binary would shadow edited
sources) or ``INSPECT_WATCH_PURE=1`` all give the pure-Python package, with a
warning saying why.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

COMPILED = [
    # the run time: every event of every rule goes through these
    "watcher/engine/rule.py",
    "watcher/engine/text.py",
    "watcher/engine/gate.py",
    "watcher/engine/scanmatch.py",
    "watcher/engine/rx.py",
    "watcher/engine/runtime.py",
    # each tool call's effect and failure, set before any rule reads it
    "watcher/engine/calls.py",
    "watcher/engine/shell.py",
    "watcher/engine/pace.py",
    "watcher/engine/detectors/base.py",
    "watcher/engine/detectors/keys.py",
    "watcher/engine/detectors/match.py",
    "watcher/engine/detectors/repeat.py",
    "watcher/engine/detectors/threshold.py",
    "watcher/engine/detectors/sequence.py",
    "watcher/engine/detectors/absence.py",
    "watcher/engine/detectors/idle.py",
    "watcher/engine/detectors/sample.py",
    "watcher/engine/detectors/unseen.py",
    # load time, but what they build runs per event: getters, predicates, searches,
    # exception and fact tests are closures defined in these modules
    "watcher/engine/lang/facts.py",
    "watcher/engine/lang/paths.py",
    "watcher/engine/lang/nodes.py",
    "watcher/engine/lang/regex.py",
    "watcher/engine/lang/schema.py",
    # every event of every source passes through these two before the rules see it
    "watcher/events.py",
    "watcher/stream.py",
    # ... and a logged or buffered model or tool event is made that event in one pass
    "watcher/sources/logfiles/project.py",
    "watcher/sources/logfiles/messages.py",
]
# the engine's other modules stay interpreted on purpose: they run once per rule set
# (loading, validating, the registry and declarations, the JSON Schema), and scan.py's
# tests replace parts of it (its RE2 sets are built once, lazily); the two lists cover
# every module of watcher/engine, and everything the profiler sees run per event is
# in COMPILED (tests/engine/test_compiled_list.py)
INTERPRETED = [
    "watcher/engine/__init__.py",
    "watcher/engine/errors.py",
    "watcher/engine/yamlsrc.py",
    "watcher/engine/loader.py",
    "watcher/engine/lang/callspec.py",
    "watcher/engine/model.py",
    "watcher/engine/scan.py",
    "watcher/engine/testing.py",
    "watcher/engine/detectors/__init__.py",
    "watcher/engine/detectors/params.py",
    "watcher/engine/lang/__init__.py",
    "watcher/engine/lang/ctx.py",
    "watcher/engine/lang/params.py",
    "watcher/engine/lang/published.py",
    "watcher/engine/lang/predicates.py",
    "watcher/engine/lang/templates.py",
    "watcher/engine/re2_known.py",
    "watcher/engine/rxcache.py",
    "watcher/engine/rulecache.py",
]
# not watcher/findings.py: its frozen dataclasses, compiled, cannot be unpickled, and
# findings cross process boundaries (``watch --jobs``)

# hand-written C beside the compiled modules: whitespace folding without a string per
# word, ASCII lower-casing and the cosmetic normaliser (watcher/engine/_fold.c; each
# falls back to Python without it)
FOLD = Extension("watcher.engine._fold", ["watcher/engine/_fold.c"])


def _say(msg: str) -> None:
    print(f"inspect-watch: {msg}", file=sys.stderr)


class OptionalBuildExt(build_ext):
    """Build the compiled modules if the C build works; otherwise leave none behind
    (a half-built set would import a shim whose shared library is missing)."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any build failure means pure Python
            _say(f"compiling the engine failed ({exc}); installing pure Python")
            for out in self.get_outputs():
                Path(out).unlink(missing_ok=True)
            self.extensions = []


def _clear_stale_binaries() -> None:
    """``build/`` outlives a build, and what is in its ``lib*`` goes into the wheel: a
    binary left there by an earlier build (of a module since dropped from ``COMPILED``,
    or before ``INSPECT_WATCH_PURE``) would be packaged beside the current sources."""
    for lib in Path("build").glob("lib*"):
        for f in [*lib.glob("watcher/**/*.so"), *lib.glob("watcher/**/*.pyd"),
                  *lib.glob("*__mypyc*")]:
            f.unlink()


BUILD_COMMANDS = {"bdist_wheel", "build", "build_ext", "install"}


def _extensions() -> list:
    commands = set(sys.argv[1:])
    building = bool(BUILD_COMMANDS & commands)
    if building:
        _clear_stale_binaries()
    if os.environ.get("INSPECT_WATCH_PURE"):
        _say("INSPECT_WATCH_PURE is set: installing pure Python")
        return []
    if {"editable_wheel", "develop"} & commands:
        return []  # the sources are imported in place; a binary would shadow edits
    if not building:
        return []  # metadata or an sdist: nothing to compile
    try:
        from mypyc.build import mypycify
    except ImportError:
        _say("mypy is not installed: installing pure Python")
        return []
    try:
        return [*mypycify([*COMPILED, "--ignore-missing-imports"], opt_level="3"), FOLD]
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a type error exits
        _say(f"mypyc could not compile the engine ({exc!r}); installing pure Python")
        return []


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
