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
import os
from pathlib import Path

ENV = "INSPECT_WATCH_CACHE_DIR"
_SUM = 32  # bytes of the payload's sha256 before it


def cache_dir() -> Path | None:
    """Where the caches are kept, or ``None`` (turned off)."""
    override = os.environ.get(ENV)
    if override is not None:
        return Path(override) if override.strip() else None
    from platformdirs import user_cache_path

    return user_cache_path("inspect-watch") / "rules"


def read(name: str) -> bytes | None:
    """The payload of the cache file ``name``, or ``None`` (missing, turned off,
    unreadable, or its checksum does not match: torn or altered)."""
    where = cache_dir()
    if where is None:
        return None
    try:
        raw = (where / name).read_bytes()
    except (OSError, ValueError):
        return None
    payload = raw[_SUM:]
    if len(raw) <= _SUM or hashlib.sha256(payload).digest() != raw[:_SUM]:
        return None
    return payload


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
