"""A :class:`~watcher.sources.base.Source` over Inspect log files (post-hoc or partly flushed).

Reads ``.eval`` and ``.json`` logs from a directory, a single log file, or any
URL Inspect's log reader accepts (``s3://``, ``memory://``, ``file://`` …), and
answers the same three questions as the control channel, in the same shapes,
so rules see identical input whether they watched a live run or read its log:

* ``tasks()`` — one :class:`TaskInfo` per log file, from its header.
* ``samples()`` — listing rows built from the sample summaries (cheap: no
  event is parsed), with the fields and status logic of the live listing.
* ``events()`` — pages of one sample's raw events (``model_dump(mode="json")``,
  i.e. what the server's ``full`` tier sends) with **attachments resolved**, so
  the stream's ``normalise(raw, tier)`` projects and truncates them exactly as
  the server would. Cursors use the server's encoding and nonce (sample uuid +
  attempt), so a cursor issued by a live server for the same sample attempt
  stays valid here.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from watcher import limits
from watcher.attachments import Expansion, resolve_attachments
from watcher.events import Event, Tier
from watcher.shard import Shard, owns
from watcher.sources.base import (
    BadResponse,
    EventPage,
    NotFound,
    SampleListing,
    SampleRow,
    Source,
    SourceError,
    SourceNotice,
    TaskInfo,
    decode_cursor,
    encode_cursor,
    sample_row,
)
from watcher.sources.logfiles.archive import (
    json_or_none,
    sample_entry,
    sample_json,
    zip_bytes,
    zip_entry_size,
    zip_json,
)
from watcher.sources.logfiles.header import (
    get_field,
    sample_counts,
    summary_row,
    task_from_header,
    task_from_log,
)
from watcher.sources.logfiles.listing import (
    LOG_SUFFIXES,
    UNKNOWN_STAMP,
    list_local,
    local_path,
    read_as_inspect,
    shard_set_logs,
    stat_log,
)
from watcher.sources.logfiles.project import project_page
from watcher.sources.logfiles.samples import (
    ParsedSample,
    parse_sample,
    parse_sample_json,
)


def _parse_lean(blob: bytes, epoch: int, types: frozenset[str]) -> ParsedSample | None:
    """``lean.parse_sample_lean``, imported on first use: msgspec takes 7 ms to import,
    which a live watch that never reads a log need not pay."""
    from watcher.sources.logfiles.lean import parse_sample_lean

    return parse_sample_lean(blob, epoch, types)


# the lean decode's refusals (with none served) after which a log is decoded whole
LEAN_TRIES = 3

# how long a log's stamp (size, mtime) stands before it is taken again (LogSource._stamp)
STAMP_FRESH = 0.25


@dataclass
class _LogEntry:
    """What we know of one log file; dropped when its size or mtime changes."""

    location: str
    stamp: tuple[Any, Any]
    task: TaskInfo
    summaries: list[Any] | None = None
    ids: dict[tuple[str, int], Any] = field(default_factory=dict)
    fast: bool = False  # a current-format .eval: its stored JSON is read directly
    # samples the lean decode served and refused (a shape its records do not take): a
    # log whose samples it keeps refusing is decoded whole from then on
    lean_served: int = 0
    lean_refused: int = 0


_SampleKey = tuple[str, str, int, bool, frozenset[str] | None]


def _cache_key(task: TaskInfo, sample_id: str, epoch: int,
               full: bool, types: frozenset[str] | None = None) -> _SampleKey:
    """A parsed sample's place in :attr:`LogSource._samples` (the log is the task's):
    the whole sample, or (below the full tier, for a set of ``types``) the lean one."""
    return (str(task.log_location), sample_id, epoch, full, None if full else types)


def _lean_types(types: frozenset[str] | None, tier: Tier) -> frozenset[str] | None:
    """The event types a content-tier page reads, when they are named (a lean decode
    serves them: ``lean.py``); ``None`` for every type or another tier."""
    if tier != "content" or types is None or types & {"all", "*"}:
        return None
    return types


class LogSource(Source):
    """Inspect logs as a :class:`Source`.

    ``log_dir`` may be a directory (searched recursively), one log file, or a
    URL. An unreadable log in a directory is skipped, recorded in
    :attr:`unreadable` and reported once as an ``unreadable`` notice naming the
    file and the reason (one corrupt file must not hide the others, nor pass
    unsaid) unless ``strict``; a single unreadable file always raises
    :class:`BadResponse`. Logs are untrusted input: a sample whose JSON does not
    parse, nests too deep or inflates past :data:`~watcher.limits.LOG_ENTRY_SIZE`
    is a :class:`BadResponse` naming the file and sample, and attachment
    references expand by at most :data:`~watcher.limits.EXPANSION_SIZE` per event.
    ``shard`` ``(k, n)`` keeps only the logs of the k-th of n shares (:mod:`watcher.shard`).
    """

    name = "logs"

    def __init__(self, log_dir: str, *, recursive: bool = True, strict: bool = False,
                 cache_size: int = 4, fs_options: dict[str, Any] | None = None,
                 shard: Shard | None = None) -> None:
        self.log_dir = log_dir
        self.shard = shard
        self.recursive = recursive
        self.strict = strict
        self.cache_size = max(1, cache_size)
        self.fs_options = fs_options or {}
        self.unreadable: dict[str, str] = {}
        self._logs: dict[str, _LogEntry] = {}
        # each log's last stamp and when it was taken (monotonic): see _stamp
        self._stamps: dict[str, tuple[float, tuple[Any, Any] | None]] = {}
        self._samples: OrderedDict[_SampleKey, ParsedSample] = OrderedDict()
        self._json_logs: OrderedDict[str, Any] = OrderedDict()
        self._notices: list[SourceNotice] = []
        self.max_entry = limits.LOG_ENTRY_SIZE.value()
        self.max_expansion = limits.EXPANSION_SIZE.value()
        # reading a local log is CPU work under the GIL: read one sample at a time
        # (parallel scans use processes: --jobs); remote reads wait on the network
        self.parallel_reads = 1 if local_path(log_dir) is not None else 4

    # -- listing -----------------------------------------------------------

    def _single_file(self) -> bool:
        return self.log_dir.rstrip("/").endswith(LOG_SUFFIXES)

    def _list(self) -> list[Any]:
        local = local_path(self.log_dir)
        if local is not None and not self.fs_options:
            found = list_local(local, self.recursive)
            if found is None and self._single_file():
                raise NotFound(f"{self.log_dir}: no such log file")
            return found or []
        from inspect_ai.log import list_eval_logs

        try:
            infos = list_eval_logs(self.log_dir, recursive=self.recursive,
                                   fs_options=self.fs_options)
        except Exception as ex:  # any reader failure is the source's
            raise BadResponse(f"{self.log_dir}: cannot list logs: {ex}") from ex
        if not infos and self._single_file():
            raise NotFound(f"{self.log_dir}: no such log file")
        return infos

    def _logs_to_read(self) -> list[Any]:
        """The listing, read the way Inspect reads a log directory (each sample once: a
        shard set as its merged log or as its shards, a log as its ``-recovered`` copy,
        no checkpoints; see :func:`~.listing.read_as_inspect`)."""
        infos, sets = read_as_inspect(self._list())
        for s in sets:
            finished = False
            if s.merged:
                try:
                    merged = s.merged[0]
                    finished = self._entry(merged.name, (merged.size, merged.mtime)
                                           ).task.status == "success"
                except BadResponse:
                    finished = False  # an unreadable merged log: the shards are read
            infos += shard_set_logs(s, finished)
        return infos

    def tasks(self) -> list[TaskInfo]:
        """One task per readable log file (of this source's shard), oldest first."""
        infos = [i for i in self._logs_to_read() if owns(self.shard, i.name)]
        seen: set[str] = set()
        out: list[TaskInfo] = []
        for info in infos:
            seen.add(info.name)
            try:
                out.append(self._entry(info.name, (info.size, info.mtime)).task)
            except BadResponse as ex:
                if self.strict or self._single_file():
                    raise
                if self.unreadable.get(info.name) != str(ex):  # said once per fault
                    self._notices.append(SourceNotice(
                        kind="unreadable", message=f"log could not be read: {ex}",
                        details={"scope": "log", "log": info.name, "reason": str(ex)}))
                self.unreadable[info.name] = str(ex)
        for gone in set(self._logs) - seen:
            self._forget(gone)
        out.sort(key=lambda t: (t.started_at or 0.0, t.log_location or ""))
        return out

    def _entry(self, location: str, stamp: tuple[Any, Any]) -> _LogEntry:
        entry = self._logs.get(location)
        if entry is not None and entry.stamp == stamp:
            return entry
        if entry is not None:
            self._forget(location)
        try:
            header = zip_json(location, "header.json")
            # older formats (no eval_id) need Inspect's migrations: read those with it
            fast = isinstance(header, dict) and "eval_id" in (header.get("eval") or {})
            if fast:
                task = task_from_header(header, location)  # type: ignore[arg-type]
            else:
                from inspect_ai.log import read_eval_log

                task = task_from_log(read_eval_log(location, header_only=True), location)
        except Exception as ex:
            raise BadResponse(f"{location}: unreadable log: {ex}") from ex
        entry = _LogEntry(location=location, stamp=stamp, task=task, fast=fast)
        self._logs[location] = entry
        self.unreadable.pop(location, None)
        try:
            entry.task.counts = sample_counts(self._summaries(entry))
        except BadResponse:
            self._forget(location)
            raise
        except Exception as ex:  # summaries of the wrong shape
            self._forget(location)
            raise BadResponse(f"{location}: unreadable sample summaries: "
                              f"{type(ex).__name__}: {ex}") from ex
        return entry

    def _forget(self, location: str) -> None:
        self._logs.pop(location, None)
        self._stamps.pop(location, None)
        self._json_logs.pop(location, None)
        for key in [k for k in self._samples if k[0] == location]:
            del self._samples[key]

    def _entry_for(self, task: TaskInfo, fresh: bool = True) -> _LogEntry:
        """The log's entry, re-read if the file changed; ``fresh=False`` (a sample's
        events) trusts a stamp taken in the last :data:`STAMP_FRESH` seconds (a listing
        always stats the file: see :meth:`_stamp`)."""
        location = task.log_location
        if location is None:
            raise NotFound(f"task {task.eval_id} has no log location")
        entry = self._logs.get(location)
        stamp = self._stamp(location, fresh)
        if stamp is None:
            raise NotFound(f"{location}: log file is gone")
        if stamp is UNKNOWN_STAMP and entry is not None:
            return entry  # cannot stat here: trust what we read before
        if entry is None or entry.stamp != stamp:
            entry = self._entry(location, stamp if stamp is not UNKNOWN_STAMP else (None, None))
        return entry

    def _stamp(self, location: str, fresh: bool) -> tuple[Any, Any] | None:
        """The log's ``(size, mtime)`` (:func:`stat_log`); unless ``fresh``, the last
        one if it is under :data:`STAMP_FRESH` seconds old. A listing (``samples``,
        ``has_sample``) always stats: a log that changed since is re-read. A scan of
        5,000 small samples stat'ed the log once per sample's events (2 % of its CPU)."""
        now = time.monotonic()
        got = self._stamps.get(location)
        if not fresh and got is not None and now - got[0] < STAMP_FRESH:
            return got[1]
        stamp = stat_log(location, self.fs_options)
        self._stamps[location] = (now, stamp)
        return stamp

    def _vouched(self, entry: _LogEntry) -> tuple[Any, Any] | None:
        """The entry's stamp when it is a local stat just checked (:meth:`_entry_for`),
        so the zip reader need not stat the file again; else ``None``."""
        stamp = entry.stamp
        if self.fs_options or stamp is UNKNOWN_STAMP or stamp[0] is None:
            return None
        return stamp

    def _summaries(self, entry: _LogEntry) -> list[Any]:
        if entry.summaries is None:
            try:
                stored = (zip_json(entry.location, "summaries.json",
                                   stamp=self._vouched(entry)) if entry.fast else None)
                if isinstance(stored, list) and all(isinstance(x, dict) for x in stored):
                    summaries = stored
                elif entry.location.endswith(".json"):
                    summaries = [s.summary() for s in self._json_log(entry.location).samples or []]
                else:
                    from inspect_ai.log import read_eval_log_sample_summaries

                    summaries = read_eval_log_sample_summaries(entry.location)
            except SourceError:
                raise
            except Exception as ex:
                raise BadResponse(f"{entry.location}: unreadable sample summaries: {ex}") from ex
            try:
                entry.ids = {(str(get_field(s, "id")), int(get_field(s, "epoch"))):
                             get_field(s, "id") for s in summaries}
            except (TypeError, ValueError) as ex:
                raise BadResponse(f"{entry.location}: unreadable sample summaries: "
                                  f"{type(ex).__name__}: {ex}") from ex
            entry.summaries = list(summaries)
        return entry.summaries

    def _json_log(self, location: str) -> Any:
        """A whole ``.json`` log, kept briefly: its samples can't be read one at a time."""
        log = self._json_logs.get(location)
        if log is None:
            from inspect_ai.log import read_eval_log

            try:
                log = read_eval_log(location)
            except Exception as ex:
                raise BadResponse(f"{location}: unreadable log: {ex}") from ex
            self._json_logs[location] = log
            while len(self._json_logs) > 1:
                self._json_logs.popitem(last=False)
        return log

    def samples(self, task: TaskInfo, active_since: float | None = None,
                all_rows: bool = False) -> SampleListing:
        """Every sample the log holds.

        ``active_since`` is ignored on purpose: a sample appears in a log when it
        is flushed, possibly long after it was last active, so filtering on
        activity time could drop it for good.
        """
        entry = self._entry_for(task)
        try:
            rows = [sample_row(summary_row(s)) for s in self._summaries(entry)]
        except SourceError:
            raise
        except Exception as ex:  # summaries of the wrong shape
            raise BadResponse(f"{entry.location}: unreadable sample summaries: "
                              f"{type(ex).__name__}: {ex}") from ex
        rows.sort(key=lambda r: (r.raw.get("started_at") or 0.0, r.sample_id, r.epoch))
        return SampleListing(as_of=time.time(), samples=rows)

    # -- events --------------------------------------------------------------

    def events(self, task: TaskInfo, sample_id: str, epoch: int, *, since: str | None,
               types: frozenset[str] | None, tier: Tier, limit: int = 500) -> EventPage:
        """A page of raw, attachment-resolved events (the tier is the stream's business).

        Like the server: the cursor offset counts every event scanned, the type
        filter applies after slicing, a cursor for another attempt restarts at 0.
        ``types=None`` (or a set holding ``"all"``/``"*"``) means every type.
        """
        lean = _lean_types(types, tier)
        parsed = self._parsed(task, str(sample_id), int(epoch), full=tier == "full",
                              types=lean)
        nonce, offset = decode_cursor(since)
        if nonce != parsed.nonce:
            offset = 0
        limit = max(1, limit)
        scanned = parsed.events[offset:offset + limit]
        next_offset = offset + len(scanned)
        wanted = None if types is None or types & {"all", "*"} else types
        unknown: set[str] = set()
        cut = 0
        out: list[Event] = []
        # one budget for the sample, not per event: 40 events each naming one 100 KB
        # attachment 16,000 times were 40 budgets' worth (2.86 GB at the peak)
        budget = parsed.budget
        if budget is None or offset == 0:  # (a read from the start: the sample again)
            budget = parsed.budget = Expansion(self.max_expansion)
        try:
            out, cut = project_page(scanned, wanted, tier, parsed.pool, parsed.attachments,
                                    unknown, budget)
        except Exception as ex:  # attachments of the wrong type, and the like
            raise BadResponse(f"{task.log_location}: unreadable sample {sample_id}/{epoch}: "
                              f"{type(ex).__name__}: {ex}") from ex
        if cut:
            mb = self.max_expansion / limits.MB
            self._notices.append(SourceNotice(
                kind="limit", message=f"{task.log_location} sample {sample_id} epoch {epoch}: "
                f"attachment references expand past {mb:g} MB for the sample; those of "
                f"{cut} event(s) are left unresolved (rules read those events without that "
                f"text; {limits.EXPANSION_SIZE.env} raises the limit)",
                details={"limit": limits.EXPANSION_SIZE.env, "events": cut}))
        if unknown:
            self._notices.append(SourceNotice(
                kind="gap", message=f"{task.log_location} sample {sample_id} epoch {epoch}: "
                f"{len(unknown)} attachment reference(s) not in the log: "
                + ", ".join(sorted(unknown)[:5])))
        done = next_offset >= len(parsed.events)
        if done:  # read to its end: a scan moves on, and the cache would hold it for nothing
            self._samples.pop(_cache_key(task, str(sample_id), int(epoch), tier == "full",
                                         lean), None)
        return EventPage(events=out, next=encode_cursor(parsed.nonce, next_offset), done=done)

    def has_sample(self, task: TaskInfo, sample_id: str, epoch: int) -> bool:
        """Whether the task's log holds the sample now (a running eval's log gains its
        samples as Inspect flushes them)."""
        entry = self._entry_for(task)
        self._summaries(entry)
        return (str(sample_id), int(epoch)) in entry.ids

    def parsed_sample(self, task: TaskInfo, sample_id: str, epoch: int,
                      full: bool = False, types: frozenset[str] | None = None,
                      ) -> ParsedSample:
        """The sample's unresolved events as :meth:`events` pages them for ``types``
        (cached; give the types and tier the pages will be read with, or the sample is
        decoded twice)."""
        return self._parsed(task, str(sample_id), int(epoch), full=full,
                            types=None if full else _lean_types(types, "content"))

    def pop_notices(self) -> list[SourceNotice]:
        """Notices gathered since the last call: unreadable logs, unresolvable or
        over-limit attachments."""
        notices, self._notices = self._notices, []
        return notices

    def _parsed(self, task: TaskInfo, sample_id: str, epoch: int,
                full: bool = True, types: frozenset[str] | None = None) -> ParsedSample:
        """The sample as paged: Inspect's reader (``full``), the stored JSON decoded
        whole, or for the content tier's ``types`` only what they read (lean.py)."""
        entry = self._entry_for(task, fresh=False)
        key = _cache_key(task, sample_id, epoch, full, types)
        cached = self._samples.get(key)
        if cached is not None:
            self._samples.move_to_end(key)
            return cached
        self._summaries(entry)
        if (sample_id, epoch) not in entry.ids:
            raise NotFound(f"{entry.location}: no sample {sample_id} epoch {epoch}")
        sid = entry.ids[(sample_id, epoch)]
        # below the full tier a model event's input and call are never read: the sample's
        # JSON straight from the .eval zip serves, without Inspect's (slow) validation
        blob = (None if full else
                zip_bytes(entry.location, sample_entry(sid, epoch), self.max_entry,
                          self._vouched(entry)))
        try:
            tried = blob is not None and types is not None and (
                entry.lean_refused < LEAN_TRIES or entry.lean_served > entry.lean_refused)
            lean = _parse_lean(blob, epoch, types) if tried else None  # type: ignore[arg-type]
            if tried:
                if lean is None:
                    entry.lean_refused += 1
                else:
                    entry.lean_served += 1
            fast = sample_json(json_or_none(blob)) if blob is not None and lean is None else None
            if lean is not None:
                parsed = lean
            elif fast is not None:
                parsed = parse_sample_json(fast, epoch)
            else:
                parsed = parse_sample(self._read_sample(entry, sid, epoch), epoch)
        except SourceError:
            raise
        except Exception as ex:  # hostile JSON: wrong shapes, nesting past any stack
            raise BadResponse(f"{entry.location}: unreadable sample {sid}/{epoch}: "
                              f"{type(ex).__name__}: {ex}") from ex
        self._samples[key] = parsed
        while len(self._samples) > self.cache_size:
            self._samples.popitem(last=False)
        return parsed

    def _read_sample(self, entry: _LogEntry, sid: Any, epoch: int) -> Any:
        if entry.location.endswith(".json"):
            for sample in self._json_log(entry.location).samples or []:
                if sample.id == sid and sample.epoch == epoch:
                    return sample
            raise NotFound(f"{entry.location}: no sample {sid} epoch {epoch}")
        from inspect_ai.log import read_eval_log_sample

        # Inspect's reader inflates the whole entry: check its size first
        zip_entry_size(entry.location, f"samples/{sid}_epoch_{epoch}.json", self.max_entry)
        try:
            return read_eval_log_sample(entry.location, sid, epoch, resolve_attachments=False)
        except Exception as ex:
            raise BadResponse(f"{entry.location}: unreadable sample {sid}/{epoch}: {ex}") from ex

    def close(self) -> None:
        """Drop every cache (logs are re-read on next use)."""
        self._logs.clear()
        self._stamps.clear()
        self._samples.clear()
        self._json_logs.clear()


def iter_log_samples(log_dir: str) -> Iterator[tuple[TaskInfo, SampleRow, list[dict[str, Any]]]]:
    """Every sample of every log under ``log_dir`` with all its resolved raw events.

    For post-hoc scans that want whole samples rather than pages: each sample
    is read once and not cached.
    """
    source = LogSource(log_dir, cache_size=1)
    for task in source.tasks():
        for row in source.samples(task).samples:
            parsed = source._parsed(task, row.sample_id, row.epoch)
            source._samples.clear()
            budget = Expansion(source.max_expansion)  # one for the sample
            events = [resolve_attachments(e, parsed.attachments, budget=budget)
                      for e in parsed.events]
            yield task, row, events
