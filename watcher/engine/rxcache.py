"""Regex analyses made before, kept between runs: the answers of pure functions of a
rule regex's text, by their arguments.

Loading a rule set reads each of its regexes several times through Python's own regex
parser: to validate it (W106, W107), to translate it for RE2 (for ASCII text and for
any), to find its required literals, its first characters, the failure library's
line-start prefilter. For the built-in pack that was about a fifth of starting a watch
(callgrind: ~200 M of 1.12 G instructions), the same work every run for the same texts.
A function wrapped by :func:`persistent` answers from a table kept in one cache file
beside the parsed rule files (:mod:`watcher.cachefiles`, which says where and how to turn it
off); a miss is computed as before and kept. Only answers are kept: a call that raises
(a regex Python or RE2 cannot take) raises again, each time.

The table is named by a digest of this format, the package version, the Python version
(the ``re`` parser is Python's) and the source of every module that wraps a function
here (:data:`MODULES`; a test keeps the list whole): a change to any of them reads a
new table. Nothing here can fail a load: a table that cannot be read or trusted is
passed over, one that cannot be written is not.
"""

from __future__ import annotations

import functools
import hashlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from watcher import __version__, cachefiles

FORMAT = b"inspect-watch regex cache 1"
MAX_ENTRIES = 20_000  # past this the table starts again (a library of generated regexes)
_SUFFIX = ".regex"

F = TypeVar("F", bound=Callable[..., Any])

# the modules (under watcher/engine) whose functions are wrapped here
MODULES = ("rx.py", "scan.py", "lang/regex.py", "lang/callspec.py")

computed = 0  # answers computed (not read from the table) by this process


def persistent(kind: str) -> Callable[[F], F]:
    """Wrap a pure function of hashable, marshallable arguments whose answer marshal
    can write: its answers are kept between runs under ``kind`` (its module must be in
    :data:`MODULES`)."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def memo(*args: Any, **kwargs: Any) -> Any:
            global computed
            key = (kind, _plain(args), _plain(tuple(sorted(kwargs.items())))
                   ) if kwargs else (kind, _plain(args))
            table = _load()
            try:
                return table[key]
            except KeyError:
                pass
            except TypeError:  # an argument that cannot be a key: not kept
                return fn(*args, **kwargs)
            value = fn(*args, **kwargs)
            table[key] = value
            _TABLE.dirty = True
            computed += 1
            return value

        return memo  # type: ignore[return-value]

    return wrap


def _plain(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The arguments as marshal writes them: flags (``re.RegexFlag``) as plain ints."""
    return tuple(int(a) if isinstance(a, int) and type(a) not in (int, bool) else
                 _plain(a) if type(a) is tuple else a for a in args)


@functools.lru_cache(maxsize=1)
def _name() -> str:
    h = hashlib.sha256(FORMAT + __version__.encode() + b"\0" + sys.version.encode())
    here = Path(__file__).parent
    for module in MODULES:
        try:  # compiled, the sources are installed beside the binaries
            h.update(b"\0" + (here / module).read_bytes())
        except OSError:  # (an install without sources: its version stands for them)
            h.update(b"\0")
    return h.hexdigest()[:40] + _SUFFIX


# past MAX_ENTRIES: this process's answers alone, if they fit
_TABLE = cachefiles.MarshalTable(
    _name, MAX_ENTRIES,
    lambda _merged, mine: dict(mine) if len(mine) <= MAX_ENTRIES else {})


def _load() -> dict[Any, Any]:
    return _TABLE.load()


def flush() -> None:
    """Write the answers computed since the table was read (merged with what another
    process wrote meanwhile); a no-op when there are none."""
    _TABLE.flush()


def reset() -> None:
    """Forget the table read (tests: another cache directory)."""
    _TABLE.reset()
