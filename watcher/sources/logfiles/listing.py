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
        dirs[:] = [d for d in dirs if not skipped_dir(d)]  # as Inspect's walk
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


# -- a directory read the way Inspect reads it: shard sets, recovered copies -----------
#
# inspect-ai writes per-worker shard logs in a companion directory beside a merged log
# (``<name>.eval`` and ``<name>.shards/<k>/<attempt>.eval``), ``-recovered.eval`` copies
# after a recovery, and sandbox checkpoints in ``<name>.checkpoints/``
# (inspect_ai/_util/log_layout.py). Each sample is in several of these files; read
# file by file, a merged log of 6 samples and its shards gave 15 finding episodes.

SHARDS = ".shards"
RECOVERED = "-recovered"
_SKIPPED = (".buffer",)  # sample buffer segments (Inspect's walk never descends there)
_TIMESTAMP = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2})[:-](\d{2})[:-](\d{2})")


def skipped_dir(name: str) -> bool:
    """A directory Inspect's log walk does not descend into: ``.buffer/`` and
    ``<name>.checkpoints/`` (sandbox checkpoints, not logs of their own)."""
    return name in _SKIPPED or name.endswith(".checkpoints")


def _parts(location: str) -> list[str]:
    return [p for p in re.split(r"[/\\]", location) if p]


def log_basename(name: str) -> str:
    """A log's name without ``.eval`` and ``-recovered`` (Inspect's ``log_basename``)."""
    base = name.rsplit("/", 1)[-1]
    base = base[: -len(".eval")] if base.endswith(".eval") else base
    return base[: -len(RECOVERED)] if base.endswith(RECOVERED) else base


def attempt_key(info: FileInfo) -> tuple[bool, str, bool, float]:
    """Inspect's attempt order of one shard's (or one log's) files: the ``{created}``
    timestamp of the name, a ``-recovered`` copy after the file it was recovered from,
    then the modification time (``attempt_sort_key``)."""
    name = info.name.rsplit("/", 1)[-1]
    m = _TIMESTAMP.match(name)
    if m is None:
        return (False, "", False, info.mtime)
    stem = name[: -len(".eval")] if name.endswith(".eval") else name
    return (True, "".join(m.groups()), stem.endswith(RECOVERED), info.mtime)


@dataclass
class ShardSet:
    """A ``<name>.shards/`` companion: the newest attempt of each shard, and the merged
    logs beside it (``<name>.eval``, ``<name>-recovered.eval``), newest first."""

    companion: str
    members: list[FileInfo]
    merged: list[FileInfo]


def read_as_inspect(infos: list[FileInfo]) -> tuple[list[FileInfo], list[ShardSet]]:
    """The logs of a listing that hold each sample once, and its shard sets to decide.

    Outside shard sets, a log and its ``-recovered`` copy are one attempt: only the
    copy, which holds the original's samples and what was recovered, is read. Logs in
    ``.buffer/`` or ``*.checkpoints/`` are not logs of the directory. A shard set is
    returned apart, with the newest attempt of each shard and its merged logs: which of
    them holds its samples depends on the merged log's status (:func:`shard_set_logs`).
    """
    sets: dict[str, ShardSet] = {}
    plain: list[FileInfo] = []
    for info in infos:
        parts = _parts(info.name)
        if any(skipped_dir(p) for p in parts[:-1]):
            continue
        # <dir>/<name>.shards/<k>/<file>.eval
        if (len(parts) >= 3 and parts[-3].endswith(SHARDS) and parts[-3] != SHARDS
                and parts[-1].endswith(".eval") and not parts[-2].startswith(".")):
            companion = info.name[: info.name.rindex(parts[-3]) + len(parts[-3])]
            sets.setdefault(companion, ShardSet(companion, [], [])).members.append(info)
            continue
        plain.append(info)
    # each shard's current attempt only (older attempts are superseded)
    for s in sets.values():
        newest: dict[str, FileInfo] = {}
        for m in s.members:
            shard = _parts(m.name)[-2]
            if shard not in newest or attempt_key(m) > attempt_key(newest[shard]):
                newest[shard] = m
        s.members = [newest[k] for k in sorted(newest, key=lambda k: (
            not k.isdigit(), int(k) if k.isdigit() else 0, k))]
    # the merged logs beside each companion belong to its set
    out: list[FileInfo] = []
    groups: dict[tuple[str, str], list[FileInfo]] = {}
    for info in plain:
        directory = info.name[: len(info.name) - len(info.name.rsplit("/", 1)[-1])]
        if info.name.endswith(".eval"):
            companion = directory + log_basename(info.name) + SHARDS
            if companion in sets:
                sets[companion].merged.append(info)
                continue
            groups.setdefault((directory, log_basename(info.name)), []).append(info)
        else:
            out.append(info)
    for group in groups.values():  # a log and its -recovered copy: the newest attempt
        out.append(max(group, key=attempt_key))
    for s in sets.values():
        s.merged.sort(key=attempt_key, reverse=True)
    order = {i.name: n for n, i in enumerate(infos)}
    out.sort(key=lambda i: order[i.name])
    return out, list(sets.values())


def shard_set_logs(s: ShardSet, merged_finished: bool) -> list[FileInfo]:
    """The logs that hold a shard set's samples, each once: its newest merged log when
    that finished (``success``) after every shard was last written, as Inspect's viewer
    hides the shards it covers; else the shards' current attempts, as ``inspect ctl
    --log-dir`` reads a shard set (the merged log then only names the run)."""
    if s.merged and merged_finished and all(m.mtime < s.merged[0].mtime for m in s.members):
        return [s.merged[0]]
    return list(s.members)
