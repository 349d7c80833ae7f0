"""Files a watch keeps between runs to start faster: where they are, and reading and
writing one whole or not at all.

Where: ``$INSPECT_WATCH_CACHE_DIR``, else the user's cache directory
(``~/.cache/inspect-watch/rules`` on Linux); ``INSPECT_WATCH_CACHE_DIR=`` (empty) turns
every cache off. Each file holds a sha256 of its payload before it: a file torn by a
crash, or altered, is passed over as if it were not there. Nothing here raises.

A module of its own, importing no other part of the package: :mod:`watcher.codecache`
reads a file here before any other module of the package is imported.
"""

from __future__ import annotations

import contextlib
import hashlib
import marshal
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

ENV = "INSPECT_WATCH_CACHE_DIR"
_SUM = 32  # bytes of the payload's sha256 before it


def cache_dir() -> Path | None:
    """Where the caches are kept, or ``None`` (turned off)."""
    override = os.environ.get(ENV)
    if override is not None:
        return Path(override) if override.strip() else None
    from platformdirs import user_cache_path

    return user_cache_path("inspect-watch") / "rules"


def read(name: str, private: bool = False) -> bytes | None:
    """The payload of the cache file ``name``, or ``None`` (missing, turned off,
    unreadable, or its checksum does not match: torn or altered).

    ``private``: the payload is code this process will run, so a file someone else
    owns, or that others may write (as this module never writes one), is not read: the
    checksum tells a torn file, not who wrote it."""
    where = cache_dir()
    if where is None:
        return None
    try:
        with open(where / name, "rb") as fh:
            if private and not _own(os.fstat(fh.fileno())):
                return None
            raw = fh.read()
    except (OSError, ValueError):
        return None
    payload = raw[_SUM:]
    if len(raw) <= _SUM or hashlib.sha256(payload).digest() != raw[:_SUM]:
        return None
    return payload


def _own(st: os.stat_result) -> bool:
    """Whether a file is this user's and writable by nobody else (POSIX; elsewhere
    there is no such test here, and every file passes)."""
    getuid = getattr(os, "getuid", None)
    if getuid is None:
        return True
    return st.st_uid == getuid() and not st.st_mode & 0o022


def write(name: str, payload: bytes) -> Path | None:
    """Write the cache file ``name`` whole or not at all (best effort): the directory it
    was written in, or ``None``."""
    where = cache_dir()
    if where is None:
        return None
    import tempfile  # (only a run that writes a cache needs it)

    tmp = None
    try:
        where.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=where, prefix=".part-")
        with os.fdopen(fd, "wb") as fh:
            fh.write(hashlib.sha256(payload).digest() + payload)
        os.replace(tmp, where / name)
        tmp = None
        return where
    except OSError:
        return None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


class MarshalTable:
    """A dict kept in one cache file (marshal), shared by the processes that use it: read
    on first use, and written back, merged with what other processes wrote meanwhile,
    when this one added to it (:meth:`flush`).

    ``name`` gives the file's name (called when it is needed); ``entries`` keeps what a
    table read may hold (a table that does not hold a dict is empty); ``trim`` gives
    what to write of a merged table grown past ``max_entries`` (the merged table and
    this process's); ``private``: see :func:`read`."""

    def __init__(self, name: Callable[[], str], max_entries: int,
                 trim: Callable[[dict[Any, Any], dict[Any, Any]], dict[Any, Any]],
                 entries: Callable[[dict[Any, Any]], dict[Any, Any]] | None = None,
                 private: bool = False) -> None:
        self._name = name
        self._private = private  # (see read())
        self.max_entries = max_entries
        self._trim = trim
        self._entries = entries
        self.table: dict[Any, Any] | None = None
        self.dirty = False  # this process added to the table

    def read(self) -> dict[Any, Any]:
        """The table as the file holds it now (empty: none, unreadable, untrusted)."""
        payload = read(self._name(), self._private)
        if payload is None:
            return {}
        try:
            table = marshal.loads(payload)
        except (EOFError, ValueError, TypeError):
            return {}
        if not isinstance(table, dict):
            return {}
        return table if self._entries is None else self._entries(table)

    def load(self) -> dict[Any, Any]:
        """The table, read on first use."""
        if self.table is None:
            self.table = self.read()
        return self.table

    def flush(self) -> None:
        """Write the table if this process added to it; a no-op otherwise."""
        if not self.dirty or self.table is None:
            return
        self.dirty = False
        merged = self.read()
        merged.update(self.table)
        if len(merged) > self.max_entries:
            merged = self._trim(merged, self.table)
        self.table = merged
        try:
            payload = marshal.dumps(merged)
        except ValueError:  # a value marshal does not take: keep none of this run's
            return
        write(self._name(), payload)

    def reset(self) -> None:
        """Forget the table read (tests: another cache directory)."""
        self.table = None
        self.dirty = False
