"""Finding Inspect log files, and telling when one changed.

A local directory is walked here (as ``list_eval_logs`` lists it, without importing
Inspect); a URL is listed with Inspect's reader by :class:`~.source.LogSource`. A log's
``(size, mtime)`` stamp, checked before every read, tells a partly flushed log that
grew from the one read before.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

LOG_SUFFIXES = (".eval", ".json")

# Inspect's own test for a `.json` log file name (``log_file_pattern``)
_JSON_LOG_NAME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}[:-]\d{2}[:-]\d{2}.*$")


@dataclass


class FileInfo:
    """What ``list_eval_logs`` reports of a file (``name`` is a ``file://`` URL)."""

    name: str
    size: int
    mtime: float  # milliseconds, as Inspect's filesystem reports it


def local_path(location: str) -> str | None:
    """The local path of a plain path or ``file://`` URL; ``None`` for other URLs."""
    if location.startswith("file://"):
        return location[len("file://"):]
    if "://" in location:
        return None
    return location


def local_info(path: str) -> FileInfo:
    st = os.stat(path)
    return FileInfo("file://" + os.path.abspath(path), st.st_size, st.st_mtime_ns / 1e6)


def list_local(path: str, recursive: bool) -> list[FileInfo] | None:
    """Log files under a local directory (or the file itself), newest first, as
    ``list_eval_logs`` lists them; ``None`` when the path does not exist."""
    if os.path.isfile(path):
        return [local_info(path)]
    if not os.path.isdir(path):
        return None
    found: list[FileInfo] = []
    for root, dirs, files in os.walk(path):
        for name in files:
            if name.endswith(".eval") or (name.endswith(".json") and _JSON_LOG_NAME.match(name)):
                try:
                    found.append(local_info(os.path.join(root, name)))
                except OSError:
                    continue  # gone while listing
        if not recursive:
            dirs.clear()
    found.sort(key=lambda f: f.mtime, reverse=True)
    return found


UNKNOWN_STAMP: Any = ("?", "?")


def stat_log(location: str, fs_options: dict[str, Any]) -> tuple[Any, Any] | None:
    """``(size, mtime)`` as ``list_eval_logs`` reports them; ``None`` if the file is gone.

    Checked on every ``samples``/``events`` call so a partly flushed log that
    grew since it was listed is re-read rather than served stale.
    """
    local = local_path(location)
    if local is not None and not fs_options:
        try:
            info = local_info(local)
        except FileNotFoundError:
            return None
        except OSError:
            return UNKNOWN_STAMP
        return (info.size, info.mtime)
    from inspect_ai._util.file import filesystem

    try:
        remote = filesystem(location, fs_options).info(location)
    except FileNotFoundError:
        return None
    except Exception:  # a filesystem that cannot stat: let the caller trust its cache
        return UNKNOWN_STAMP
    return (remote.size, remote.mtime)
