"""A running eval's shared sample buffer, read through fsspec (``inspect eval --log-shared N``).

With ``--log-shared N`` Inspect copies its sample buffer beside the log every N seconds,
so that a viewer on another machine sees running samples
(``inspect_ai/log/_recorders/buffer/filestore.py``). Beside ``<dir>/<stem>.eval`` the
directory ``<dir>/.buffer/<stem>/`` holds:

- ``manifest.json``, rewritten at every sync: each buffered sample's summary (the same
  ``EvalSampleSummary`` a log holds) and the ids of the segments holding its rows;
- ``segment.<n>.zip``, one per sync: a member ``<id>_<epoch>.json`` for each sample that
  had new rows, with those rows (``SampleData``): versions of events (a pending event and
  later its completed form, under the same ``event_id``, row ids increasing), attachments
  (``attachment://`` texts) and message and call pool entries (a model event names its
  input as ranges into the pool: ``input_refs``).

A sample is in the manifest while it runs and until Inspect has flushed it to the log; a
retried sample is dropped and comes back with new segments (its first segment changes);
the directory is removed when the eval ends. :class:`SharedBuffer` reads the manifest
(again only when it changed) and segments (cached, shared by the samples they hold);
:class:`BufferedSample` merges one attempt's rows into the transcript the control channel
and the log page: the events in the order of their first row, each at its latest version.

Everything here is untrusted input of bounded cost: each file is read up to
:data:`~watcher.limits.BUFFER_FILE_SIZE`, each inflated member up to
:data:`~watcher.limits.LOG_ENTRY_SIZE`, and what cannot be read or does not have the
shape Inspect writes is a :class:`BufferUnreadable` naming the file.
"""

from __future__ import annotations

import io
import threading
import zipfile
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import orjson

from watcher import limits
from watcher.sources.base import BadResponse, LimitExceeded, SourceBusy

try:  # Inspect writes zstd members; Python < 3.14 learns zstd from Inspect's dependency
    import zipfile_zstd  # type: ignore[import-not-found, import-untyped, unused-ignore]  # noqa: F401
except ImportError:  # pragma: no cover - Python 3.14+, or no Inspect installed
    pass

MANIFEST = "manifest.json"
# segment zips kept in memory per eval: one sync's segment holds every sample that moved,
# and each of them reads it; beyond this the oldest are dropped (and read again if needed)
SEGMENT_CACHE_BYTES = 64 * limits.MB


class BufferUnreadable(BadResponse):
    """A manifest or segment that cannot be read, or is not what Inspect writes."""


class BufferBusy(SourceBusy):
    """A buffer file the filesystem could not read now (the network, a throttled bucket):
    read again later."""


class BufferTooLarge(BufferUnreadable, LimitExceeded):
    """A buffer file past :data:`~watcher.limits.BUFFER_FILE_SIZE`, or a segment member
    that inflates past :data:`~watcher.limits.LOG_ENTRY_SIZE`."""


def loads(data: bytes | str) -> Any:
    """JSON as Inspect writes it here: orjson, or, for the ``NaN`` and ``Infinity`` it
    writes for metrics not yet known (``ser_json_inf_nan="constants"``), which orjson
    refuses, the standard library (a :class:`ValueError` either way)."""
    try:
        return orjson.loads(data)
    except ValueError:
        import json

        try:
            return json.loads(data)
        except RecursionError as ex:
            raise ValueError("nested too deep") from ex


def buffer_dir(log_location: str) -> str:
    """``<dir>/.buffer/<stem>`` for the log at ``<dir>/<stem>.eval`` (a path or URL)."""
    head, sep, name = log_location.rstrip("/").rpartition("/")
    stem = name.rsplit(".", 1)[0] if "." in name else name
    return f"{head}{sep}.buffer/{stem}"


def buffer_fs_options(url: str, fs_options: dict[str, Any] | None) -> dict[str, Any]:
    """The filesystem options Inspect reads the same URL with (its credentials set-up, as
    for Azure) and no listings cache: a cached listing (s3fs keeps one by default) would
    hide a rewritten manifest or a new segment for as long as it is kept."""
    options: dict[str, Any] = {}
    if "://" in url and not url.startswith("file://"):
        try:
            from inspect_ai._util.file import default_fs_options
        except ImportError:  # pragma: no cover - Inspect is a dependency
            pass
        else:
            options.update(default_fs_options(url))
    options["use_listings_cache"] = False
    options.update(fs_options or {})
    return options


@dataclass(frozen=True)
class Entry:
    """One sample of a manifest: its summary (a log's sample summary, as JSON) and the
    ids of the segments holding its rows, oldest first."""

    sample_id: str
    epoch: int
    summary: dict[str, Any]
    segments: tuple[int, ...]


@dataclass
class Manifest:
    samples: dict[tuple[str, int], Entry] = field(default_factory=dict)
    bad: list[str] = field(default_factory=list)  # entries left out, and why


def parse_manifest(data: Any, where: str) -> Manifest:
    """A manifest's samples; an entry that is not what Inspect writes is left out (said in
    ``bad``), a manifest that is no manifest at all raises :class:`BufferUnreadable`."""
    if not isinstance(data, dict) or not isinstance(data.get("samples", []), list):
        raise BufferUnreadable(f"{where}: not a sample buffer manifest")
    out = Manifest()
    for i, item in enumerate(data.get("samples") or []):
        summary = item.get("summary") if isinstance(item, dict) else None
        segments = item.get("segments", []) if isinstance(item, dict) else None
        epoch = summary.get("epoch") if isinstance(summary, dict) else None
        sid = summary.get("id") if isinstance(summary, dict) else None
        ids: list[Any] | None = [s.get("id") if isinstance(s, dict) else s
                                 for s in segments] if isinstance(segments, list) else None
        if (not isinstance(sid, str | int) or isinstance(sid, bool) or type(epoch) is not int
                or ids is None or not all(type(s) is int for s in ids)):
            named = f"sample {sid!r}" if isinstance(sid, str | int) else f"sample entry {i}"
            out.bad.append(f"{named}: not a sample entry")
            continue
        out.samples[(str(sid), epoch)] = Entry(str(sid), epoch, summary,  # type: ignore[arg-type]
                                               tuple(sorted(set(ids))))
    return out


class SharedBuffer:
    """One eval's shared sample buffer (a directory of any fsspec filesystem)."""

    def __init__(self, log_location: str, fs_options: dict[str, Any] | None = None) -> None:
        from fsspec.core import url_to_fs

        self.dir = buffer_dir(log_location)
        self.fs, self.root = url_to_fs(self.dir, **buffer_fs_options(self.dir, fs_options))
        self.max_file = limits.BUFFER_FILE_SIZE.value()
        self.max_entry = limits.LOG_ENTRY_SIZE.value()
        self.lock = threading.Lock()  # the manifest and the segment cache
        self._stamp: Any = None
        self._manifest: Manifest | None = None
        self._segments: OrderedDict[int, bytes] = OrderedDict()
        self._cached = 0

    def _path(self, name: str) -> str:
        return f"{self.root.rstrip('/')}/{name}"

    def exists(self) -> bool:
        """Whether the eval shares a buffer at all (Inspect makes the directory, with a
        ``.keep`` file, when the eval starts; the manifest follows at the first sync)."""
        try:
            return bool(self.fs.exists(self._path(".keep")) or self.fs.exists(self.root))
        except Exception:  # noqa: BLE001 - any backend's failure: cannot tell, so no
            return False

    def manifest(self) -> Manifest | None:
        """The manifest now (read again only when its stamp changed); ``None`` when there
        is none: not synced yet, or the eval ended and Inspect removed the directory."""
        path = self._path(MANIFEST)
        with self.lock:
            try:
                info = self.fs.info(path)
            except FileNotFoundError:
                self._stamp, self._manifest = None, None
                return None
            except Exception as ex:  # noqa: BLE001 - a backend's own error types
                raise BufferBusy(f"{self.dir}/{MANIFEST}: cannot read: "
                                 f"{type(ex).__name__}: {ex}") from ex
            stamp = tuple(str(info.get(k)) for k in ("ETag", "etag", "size", "mtime",
                                                     "LastModified", "created"))
            if stamp == self._stamp and self._manifest is not None:
                return self._manifest
            data = self._read(path, f"{self.dir}/{MANIFEST}")
            if data is None:
                self._stamp, self._manifest = None, None
                return None
            try:
                parsed = parse_manifest(loads(data), f"{self.dir}/{MANIFEST}")
            except ValueError as ex:
                raise BufferUnreadable(f"{self.dir}/{MANIFEST}: not JSON: {ex}") from ex
            self._stamp, self._manifest = stamp, parsed
            return parsed

    def cached(self) -> Manifest | None:
        """The manifest read last (``None`` before the first)."""
        return self._manifest

    def _read(self, path: str, where: str) -> bytes | None:
        """A whole file, up to the limit; ``None`` if it is gone."""
        try:
            with self.fs.open(path, "rb") as fh:
                data: bytes = fh.read(int(self.max_file) + 1)
        except FileNotFoundError:
            return None
        except Exception as ex:  # noqa: BLE001 - a backend's own error types
            raise BufferBusy(f"{where}: cannot read: {type(ex).__name__}: {ex}") from ex
        if len(data) > self.max_file:
            raise BufferTooLarge(f"{where} is larger than the {self.max_file / limits.MB:g} MB "
                                 f"limit ({limits.BUFFER_FILE_SIZE.env} raises it); not read")
        return data

    def rows(self, segment: int, sample_id: str, epoch: int) -> dict[str, Any] | None:
        """One sample's rows in one segment, checked for shape; ``None`` if the segment is
        gone (the eval ended: the log holds the sample)."""
        name = f"segment.{segment}.zip"
        where = f"{self.dir}/{name}"
        with self.lock:
            data = self._segments.get(segment)
            if data is None:
                data = self._read(self._path(name), where)
                if data is None:
                    return None
                self._segments[segment] = data
                self._cached += len(data)
                while self._cached > SEGMENT_CACHE_BYTES and len(self._segments) > 1:
                    self._cached -= len(self._segments.popitem(last=False)[1])
            else:
                self._segments.move_to_end(segment)
        member = f"{sample_id}_{epoch}.json"
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as z:
                size = z.getinfo(member).file_size
                if size > self.max_entry:
                    raise BufferTooLarge(self._too_large(where, member, size))
                with z.open(member) as fh:
                    raw = fh.read(int(self.max_entry) + 1)
        except BufferTooLarge:
            raise
        except KeyError as ex:
            raise BufferUnreadable(f"{where}: no rows for sample {sample_id} epoch {epoch}, "
                                   "which the manifest says it holds") from ex
        except Exception as ex:  # noqa: BLE001 - a damaged zip raises many types
            raise BufferUnreadable(f"{where}: not a readable zip: {type(ex).__name__}: "
                                   f"{ex}") from ex
        if len(raw) > self.max_entry:
            raise BufferTooLarge(self._too_large(where, member, len(raw)))
        try:
            rows = loads(raw)
        except ValueError as ex:
            raise BufferUnreadable(f"{where}: {member} is not JSON: {ex}") from ex
        return check_rows(rows, f"{where}: {member}")

    def _too_large(self, where: str, member: str, size: float) -> str:
        return (f"{where}: {member} inflates to {size / limits.MB:.1f} MB or more, over the "
                f"{self.max_entry / limits.MB:g} MB limit ({limits.LOG_ENTRY_SIZE.env} "
                "raises it); not read")

    def forget(self) -> None:
        """Drop what is cached (the eval ended)."""
        with self.lock:
            self._segments.clear()
            self._cached = 0
            self._manifest = None
            self._stamp = None


def check_rows(rows: Any, where: str) -> dict[str, Any]:
    """A segment member's rows, if they have the shape Inspect writes (``SampleData``)."""
    def rows_of(key: str, *fields: tuple[str, type]) -> list[dict[str, Any]]:
        items = rows.get(key) or []
        if not isinstance(items, list) or not all(
                isinstance(x, dict) and all(isinstance(x.get(f), t) for f, t in fields)
                for x in items):
            raise BufferUnreadable(f"{where}: its {key} are not what Inspect writes")
        return items

    if not isinstance(rows, dict):
        raise BufferUnreadable(f"{where}: not a sample's rows")
    return {"events": rows_of("events", ("id", int), ("event_id", str), ("event", dict)),
            "attachments": rows_of("attachments", ("id", int), ("hash", str),
                                   ("content", str)),
            "message_pool": rows_of("message_pool", ("id", int), ("data", str)),
            "call_pool": rows_of("call_pool", ("id", int), ("data", str))}


class BufferedSample:
    """One attempt of one sample, merged from its segments: what a page is cut from.

    ``order`` holds every event's uuid in the order of its first row (kept for the whole
    attempt: the finished log's offsets are checked against it); ``data`` the latest
    version of those from ``base`` on (the stream never reads before the page it last
    read, so older ones are dropped).
    """

    def __init__(self, first_segment: int) -> None:
        self.first_segment = first_segment
        self.segments: list[int] = []  # read so far, in order
        self.order: list[str] = []
        self.data: dict[str, dict[str, Any]] = {}
        self.version: dict[str, int] = {}  # each event's latest row id
        self.attachments: dict[str, str] = {}
        self.budget: Any = None  # the attempt's attachment expansion budget (shared.py)
        self.pool: list[Any] = []  # message pool, in position order (row ids increasing)
        self.calls: list[Any] = []
        self._pool_row = 0
        self._call_row = 0
        self.base = 0
        self.last = 0  # where the previous read started
        self.broken = False  # a segment could not be read: the rest comes from the log

    def add(self, segment: int, rows: dict[str, Any]) -> None:
        """Take in one segment's rows (segments come in id order)."""
        self.segments.append(segment)
        for row in rows["events"]:
            uuid, rid = row["event_id"], row["id"]
            held = self.version.get(uuid)
            if held is None:
                self.order.append(uuid)
            elif rid <= held or uuid not in self.data:
                continue  # an older version, or one of an event read past (final there)
            self.version[uuid] = rid
            self.data[uuid] = row["event"]
        for a in rows["attachments"]:
            self.attachments[a["hash"]] = a["content"]
        for m in rows["message_pool"]:
            if m["id"] > self._pool_row:
                self._pool_row = m["id"]
                self.pool.append(_json(m["data"]))
        for c in rows["call_pool"]:
            if c["id"] > self._call_row:
                self._call_row = c["id"]
                self.calls.append(_json(c["data"]))

    @property
    def first_uuid(self) -> str | None:
        return self.order[0] if self.order else None

    def trim(self, offset: int) -> None:
        """Forget the events before ``offset`` (and before the previous read's start: the
        stream re-reads from the page that held a pending event)."""
        keep = min(offset, self.last)
        self.last = offset
        for uuid in self.order[self.base:keep]:
            self.data.pop(uuid, None)
        self.base = max(self.base, keep)

    def events(self, offset: int, limit: int) -> list[dict[str, Any]]:
        """Raw events ``[offset, offset + limit)``, latest versions (unresolved)."""
        self.trim(offset)
        start = max(offset, self.base)
        return [self.data[u] for u in self.order[start:start + limit] if u in self.data]


def _json(text: str) -> Any:
    try:
        return loads(text)
    except ValueError:
        return None  # a pool entry that is no JSON: the prompt it holds is unknown


def expand_pools(e: dict[str, Any], pool: list[Any], calls: list[Any]) -> dict[str, Any]:
    """A model event as the ``full`` tier shows it: its input and its API call's messages
    restored from the pools they are kept in (``input_refs``, ``call.call_refs``)."""
    if e.get("event") != "model":
        return e
    out = dict(e)
    refs = e.get("input_refs")
    if isinstance(refs, list) and not e.get("input"):
        out["input"] = [m for m in _expand(refs, pool) if isinstance(m, dict)]
        out["input_refs"] = None
    call = e.get("call")
    if isinstance(call, dict) and isinstance(call.get("call_refs"), list):
        request = dict(call.get("request") or {})
        request[str(call.get("call_key") or "messages")] = _expand(call["call_refs"], calls)
        out["call"] = {**call, "request": request, "call_refs": None, "call_key": None}
    return out


def _expand(refs: list[Any], pool: list[Any]) -> list[Any]:
    out: list[Any] = []
    for ref in refs:
        if isinstance(ref, list) and len(ref) == 2 and all(type(x) is int for x in ref):
            out.extend(pool[max(0, ref[0]):max(0, ref[1])])
    return out
