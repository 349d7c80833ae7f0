"""Rule files parsed before, kept between runs: their values and positions, by content.

Parsing the built-in pack's YAML (and importing PyYAML to do it) was about a quarter of
loading the pack, paid by every command that loads rules: a watch, each scan, the demo.
A text parsed without a problem is stored here as what :mod:`yamlsrc` built of it (each
document's values and the line and column of every value and key), named by a digest of
the text, of this format and of yamlsrc's own source (a change to how files are read is
a new name); the next load of the same text reads that instead of parsing.

Where, and how files are read and written: :mod:`watcher.cachefiles`
(``INSPECT_WATCH_CACHE_DIR=``, empty, turns it off). Nothing here can fail a load: a cache
that cannot be read, written or trusted (its checksum does not match what it holds) is
passed over, and the file parsed as before.
At most :data:`MAX_ENTRIES` texts are kept (the oldest go first).
"""

from __future__ import annotations

import contextlib
import hashlib
import marshal
from pathlib import Path
from typing import Any

from watcher import __version__
from watcher.cachefiles import ENV, cache_dir, read, write

__all__ = ["ENV", "cache_dir", "load", "read", "store", "write"]

FORMAT = b"inspect-watch rule cache 1"
MAX_ENTRIES = 256
_SUFFIX = ".rules"

# one parsed document: its values, value and key positions by path, first line
Entry = tuple[Any, dict[Any, Any], dict[Any, Any], int]

_salt: bytes | None = None


def _name(text: str) -> str:
    global _salt
    if _salt is None:
        here = Path(__file__).with_name("yamlsrc.py")
        try:
            source = here.read_bytes()
        except OSError:  # (an install without sources: its version stands for them)
            source = b""
        _salt = hashlib.sha256(FORMAT + __version__.encode() + b"\0" + source).digest()
    digest = hashlib.sha256(_salt + text.encode("utf-8", "surrogatepass")).hexdigest()
    return digest[:40] + _SUFFIX


def load(text: str) -> list[Entry] | None:
    """What was stored for ``text``, or ``None`` (never stored, turned off, unreadable)."""
    payload = read(_name(text))
    if payload is None:
        return None
    try:
        entries = marshal.loads(payload)
    except (EOFError, ValueError, TypeError):
        return None
    if not isinstance(entries, list) or not all(
            isinstance(e, tuple) and len(e) == 4 for e in entries):
        return None
    return entries


def store(text: str, entries: list[Entry]) -> None:
    """Keep what ``text`` parsed to (best effort: written whole or not at all)."""
    try:
        payload = marshal.dumps(entries)
    except ValueError:  # a value marshal does not take (none that YAML builds)
        return
    where = write(_name(text), payload)
    if where is not None:
        with contextlib.suppress(OSError):
            _prune(where)


def _prune(where: Path) -> None:
    """Drop the oldest entries past :data:`MAX_ENTRIES`."""
    entries = [p for p in where.iterdir() if p.suffix == _SUFFIX]
    if len(entries) <= MAX_ENTRIES:
        return
    entries.sort(key=lambda p: p.stat().st_mtime)
    for p in entries[:len(entries) - MAX_ENTRIES]:
        with contextlib.suppress(OSError):
            p.unlink()
