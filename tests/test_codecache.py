"""watcher/codecache.py: the methods ``@dataclass`` writes for the package's classes are
compiled once and read back in the next run, exactly as compiled; nobody else's classes
are touched, and no table can fail an import."""

from __future__ import annotations

import dataclasses
import json
import marshal
import os
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from watcher import cachefiles, codecache

ROOT = Path(__file__).resolve().parents[1]

# a class of every kind dataclasses writes methods for: defaults, factories, a field
# left out of __init__, keyword-only fields, frozen (__setattr__, __delattr__, __hash__)
SOURCE = """
from dataclasses import dataclass, field, KW_ONLY

@dataclass(frozen=True)
class Frozen:
    a: int
    b: str = "x"
    c: tuple = field(default_factory=tuple)
    d: int = field(init=False, default=3)

@dataclass(order=True)
class Ordered:
    x: float
    _: KW_ONLY
    y: tuple = ()

@dataclass(slots=True)
class Slotted:
    n: int = 0
"""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    where = tmp_path / "cache"
    monkeypatch.setenv(cachefiles.ENV, str(where))
    codecache.reset()
    yield where
    codecache.reset()  # the next test reads its own directory's table


def _module(name: str) -> types.ModuleType:
    """SOURCE's classes made in a fresh module called ``name``."""
    mod = types.ModuleType(name)
    sys.modules[name] = mod
    try:
        exec(compile(SOURCE, f"<{name}>", "exec"), mod.__dict__)
    finally:
        del sys.modules[name]
    return mod


def _methods(mod: types.ModuleType) -> dict[str, Any]:
    """Every method dataclasses wrote for the module's classes: its code object."""
    out = {}
    for cname in ("Frozen", "Ordered", "Slotted"):
        cls = getattr(mod, cname)
        for name, value in vars(cls).items():
            # (__repr__ is wrapped against recursion: the method written is inside)
            code = getattr(getattr(value, "__wrapped__", value), "__code__", None)
            if code is not None and code.co_filename == "<string>":
                out[f"{cname}.{name}"] = code
    return out


def _next_run() -> None:
    """What a new process sees: the table written, nothing in memory."""
    codecache.flush()
    codecache.reset()


def test_a_method_read_back_is_the_code_exec_compiles(cache: Path) -> None:
    assert dataclasses.exec is codecache._exec  # type: ignore[attr-defined]
    before = codecache.compiled
    first = _methods(_module("watcher._probe_one"))
    assert codecache.compiled - before == len(first) >= 16  # compiled here, and kept
    _next_run()
    assert [p.name for p in cache.iterdir()] == [codecache._name()]
    again = _methods(_module("watcher._probe_one"))
    assert codecache.compiled - before == len(first)  # nothing compiled: all read back
    codecache.uninstall()
    try:
        plain = _methods(_module("watcher._probe_one"))  # the builtin exec's
    finally:
        codecache.install()
    assert first.keys() == again.keys() == plain.keys()
    for name, code in plain.items():
        assert again[name] == code and first[name] == code, name
        assert again[name].co_filename == code.co_filename == "<string>"
    # and the classes behave: frozen, ordered, slotted, defaults and factories
    mod = _module("watcher._probe_one")
    f = mod.Frozen(1)
    assert (f.b, f.c, f.d) == ("x", (), 3) and f == mod.Frozen(1) and hash(f) == hash(
        mod.Frozen(1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.a = 2  # type: ignore[misc]
    assert mod.Ordered(1.0) < mod.Ordered(2.0, y=(1,))
    assert repr(mod.Slotted(4)) == "Slotted(n=4)" and not hasattr(mod.Slotted(), "__dict__")


def test_another_packages_classes_are_made_as_always(cache: Path) -> None:
    before = codecache.compiled
    _module("not_watcher.probe")
    _module("watcherish")  # a name that only starts like ours
    assert codecache.compiled == before and not codecache._TABLE.dirty
    codecache.flush()
    assert not cache.exists()  # nothing to keep


def test_a_table_that_cannot_be_trusted_is_passed_over(cache: Path) -> None:
    _module("watcher._probe_two")
    _next_run()
    (path,) = cache.iterdir()
    raw = path.read_bytes()
    path.write_bytes(raw[:-10])  # torn: its checksum no longer holds
    before = codecache.compiled
    _module("watcher._probe_two")
    assert codecache.compiled > before  # compiled again, and written again whole
    _next_run()
    assert path.read_bytes() == raw
    # a table whose entries are not code: each such entry is ignored, not run
    cachefiles.write(codecache._name(), marshal.dumps({"def f(): pass": 42, 7: "x"}))
    codecache.reset()
    assert codecache._load() == {}


def _run(code: str, env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


REPORT = """
import dataclasses, json, sys
import watcher.cli
from watcher import codecache
from watcher.findings import SampleRef
r = SampleRef(task="t", task_id="i", eval_id="e", model="m", sample_id="s", epoch=1,
              attempt=1)
print(json.dumps({"compiled": codecache.compiled, "used": len(codecache._used),
                  "hooked": getattr(dataclasses, "exec", None) is codecache._exec,
                  "equal": r == SampleRef(**vars(r)), "repr": repr(r)[:9]}))
"""


def test_the_packages_classes_are_compiled_once_across_processes(tmp_path: Path) -> None:
    env = {cachefiles.ENV: str(tmp_path / "cache")}
    first = _run(REPORT, env)
    assert first["hooked"] and first["compiled"] == first["used"] >= 50
    second = _run(REPORT, env)
    assert second == {**first, "compiled": 0}  # every method read back; same classes
    off = _run(REPORT, {cachefiles.ENV: ""})  # caches turned off: exec as always
    assert not off["hooked"] and off["compiled"] == 0 and off["equal"]


def test_a_shared_table_merges_what_processes_add_and_trims_past_its_bound(
        cache: Path) -> None:
    """cachefiles.MarshalTable, the code cache's table and the regex cache's: what two
    processes add is merged; past its bound it keeps what ``trim`` says; a file that
    holds no dict, or entries ``entries`` refuses, reads empty."""
    def name() -> str:
        return "probe.table"

    def mine_only(merged: dict[Any, Any], mine: dict[Any, Any]) -> dict[Any, Any]:
        return dict(mine)

    one = cachefiles.MarshalTable(name, 3, mine_only)
    two = cachefiles.MarshalTable(name, 3, mine_only)
    one.load()["a"] = 1
    two.load()["b"] = 2  # read before one wrote: empty, then its own entry
    one.dirty = two.dirty = True
    one.flush()
    two.flush()
    assert cachefiles.MarshalTable(name, 3, mine_only).load() == {"a": 1, "b": 2}
    two.flush()  # nothing added since: no write
    assert cachefiles.MarshalTable(name, 3, mine_only).load() == {"a": 1, "b": 2}

    def other() -> str:
        return "probe2.table"

    late = cachefiles.MarshalTable(other, 3, mine_only)
    late.load()["c"] = 3  # read while the file was not there yet
    late.load()["d"] = 4
    late.dirty = True
    early = cachefiles.MarshalTable(other, 3, mine_only)
    early.load().update({"a": 1, "b": 2})
    early.dirty = True
    early.flush()
    late.flush()  # a, b, c, d merged: past 3, so trim() keeps its own
    assert cachefiles.MarshalTable(other, 3, mine_only).load() == {"c": 3, "d": 4}
    cachefiles.write(name(), marshal.dumps([1, 2]))  # not a dict
    assert cachefiles.MarshalTable(name, 3, mine_only).load() == {}
    cachefiles.write(name(), marshal.dumps({"x": 1, "y": "z"}))
    ints = cachefiles.MarshalTable(name, 3, mine_only,
                                   lambda t: {k: v for k, v in t.items() if type(v) is int})
    assert ints.load() == {"x": 1}


def test_a_table_others_may_write_is_not_run(cache: Path) -> None:
    """The code table is code the watcher runs: a file others may write is passed over
    (and replaced by this user's own when the methods are compiled again)."""
    _module("watcher._probe_three")
    _next_run()
    (path,) = cache.iterdir()
    assert path.stat().st_mode & 0o077 == 0  # written private
    path.chmod(0o666)
    before = codecache.compiled
    _module("watcher._probe_three")
    assert codecache.compiled > before  # not read: compiled again
    _next_run()
    assert path.stat().st_mode & 0o022 == 0
    before = codecache.compiled
    _module("watcher._probe_three")
    assert codecache.compiled == before  # this user's own file: read


def test_another_packages_replacement_of_exec_stays_in_the_chain(cache: Path) -> None:
    """A package that replaced ``dataclasses``' exec before the watcher was imported keeps
    getting every call (its own classes' texts, and the compiled code of ours), and gets
    its place back when the hook is taken out."""
    seen: list[Any] = []

    def theirs(source: Any, g: Any = None, l: Any = None, /, **kw: Any) -> Any:  # noqa: E741
        seen.append(type(source).__name__)
        return exec(source, g, l, **kw)

    codecache.uninstall()
    dataclasses.exec = theirs  # type: ignore[attr-defined]
    try:
        codecache.install()
        assert dataclasses.exec is codecache._exec  # type: ignore[attr-defined]
        _module("not_watcher.probe_four")
        assert seen and set(seen) == {"str"}  # theirs, as they were written
        seen.clear()
        _module("watcher._probe_four")
        assert seen and set(seen) == {"code"}  # ours, compiled here, through theirs
        codecache.uninstall()
        assert dataclasses.exec is theirs  # type: ignore[attr-defined]
    finally:
        codecache.uninstall()
        if getattr(dataclasses, "exec", None) is theirs:
            del dataclasses.exec  # type: ignore[attr-defined]
        codecache.install()
    assert dataclasses.exec is codecache._exec  # type: ignore[attr-defined]
    seen.clear()
    _module("watcher._probe_four")
    assert not seen  # theirs is out of the chain again
