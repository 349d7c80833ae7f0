"""The methods ``@dataclass`` writes for this package's classes, compiled once and kept
between runs.

For each dataclass, :mod:`dataclasses` writes the source of ``__init__``, ``__repr__``,
``__eq__`` (and more for frozen classes) and compiles it with ``exec``: 84 classes are
made by the time a watch starts, and compiling their 357 methods took 40 ms of the
0.20 s of CPU a watch of an empty log directory took (10 runs each way, whole
processes; callgrind: 0.908 G instructions before, 0.682 G with this alone). Compiling
a text is a pure function of the text and of the interpreter, so the code objects are
kept in one cache file (:mod:`watcher.cachefiles`, beside the parsed rule files), keyed
by their text, in a table named for the Python version and optimisation level; a text
not in it is compiled as before and kept at exit.

Only ``exec`` calls ``dataclasses`` makes for a class of this package are answered
here (:func:`install` replaces the name ``exec`` in the ``dataclasses`` module by a
function that passes every other call on unchanged, to the builtin or to what another
package put there before): a user's classes, in a process that imports the watcher, are
made as they always are. Compiled here with
the flags ``dataclasses`` compiles with (none inherited), each code object is the one
``exec`` would have compiled. Nothing here can fail an import: a table that cannot be
read or trusted is passed over, one that cannot be written is not. The table is code the
watcher runs: a file another user owns, or others may write, is not read (as trusted as
Python's own ``__pycache__``: whoever can write your cache directory could also write
your site-packages).
"""

from __future__ import annotations

import atexit
import builtins
import hashlib
import sys
from typing import Any

from watcher import cachefiles

FORMAT = b"inspect-watch dataclass code 1"
MAX_ENTRIES = 2_000  # past this, a write keeps only what this process used
_SUFFIX = ".code"
_PACKAGE = "watcher"

_used: set[str] = set()  # texts this process asked for
# what ``dataclasses`` called before install(): the builtin, or another package's own
# replacement, which every call goes on to
_builtin_exec: Any = builtins.exec
compiled = 0  # texts compiled (not read from the table) by this process


def install() -> None:
    """Answer ``dataclasses``' compiles of this package's methods from the table (once
    per process; a no-op when caching is turned off)."""
    import dataclasses

    global _builtin_exec
    current = getattr(dataclasses, "exec", None)
    if current is _exec or cachefiles.cache_dir() is None:
        return
    if current is not None:  # another package's: kept in the chain, and put back
        _builtin_exec = current
    dataclasses.exec = _exec  # type: ignore[attr-defined]


def uninstall() -> None:
    """Put back what was there before (tests)."""
    global _builtin_exec
    import dataclasses

    if getattr(dataclasses, "exec", None) is _exec:
        if _builtin_exec is builtins.exec:
            del dataclasses.exec  # type: ignore[attr-defined]
        else:
            dataclasses.exec = _builtin_exec  # type: ignore[attr-defined]
        _builtin_exec = builtins.exec


def _ours(globals_: Any) -> bool:
    name = globals_.get("__name__") if type(globals_) is dict else None
    return type(name) is str and (name == _PACKAGE or name.startswith(_PACKAGE + "."))


def _exec(source: Any, globals_: Any = None, locals_: Any = None, /, **kwargs: Any) -> Any:
    """``exec``, answering a method's text from the table when the class is ours."""
    if type(source) is not str or kwargs or not _ours(globals_):
        return _builtin_exec(source, globals_, locals_, **kwargs)
    return _builtin_exec(code_of(source), globals_, locals_)


def code_of(source: str) -> Any:
    """The code object ``exec(source)`` compiles in ``dataclasses``, from the table when
    it holds it."""
    global compiled
    table = _TABLE.load()
    _used.add(source)
    code = table.get(source)
    if code is None:
        code = table[source] = compile(source, "<string>", "exec", dont_inherit=True)
        compiled += 1
        if not _TABLE.dirty:  # written at exit, with what else this process compiles
            _TABLE.dirty = True
            atexit.register(flush)
    return code


def _name() -> str:
    h = hashlib.sha256(FORMAT + b"\0" + sys.version.encode() + b"\0"
                       + str(sys.implementation.cache_tag).encode() + b"\0"
                       + str(sys.flags.optimize).encode())
    return "dataclasses-" + h.hexdigest()[:32] + _SUFFIX


def _code_entries(table: dict[Any, Any]) -> dict[str, Any]:
    """The entries of a table read that are a text and its code object."""
    code_type = type(_code_entries.__code__)
    return {k: v for k, v in table.items() if type(k) is str and type(v) is code_type}


# older versions' texts past MAX_ENTRIES: keep this process's
_TABLE = cachefiles.MarshalTable(
    _name, MAX_ENTRIES, lambda merged, _mine: {k: v for k, v in merged.items() if k in _used},
    _code_entries, private=True)


def _load() -> dict[str, Any]:
    return _TABLE.load()


def flush() -> None:
    """Write the table if this process compiled a text (merged with what another process
    wrote meanwhile); a no-op otherwise."""
    _TABLE.flush()


def reset() -> None:
    """Forget the table read (tests: another cache directory)."""
    _TABLE.reset()
    _used.clear()
