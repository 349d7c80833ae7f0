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

``inspect_ai`` is imported inside functions only: importing it costs seconds,
and the live path must not pay for it. A post-hoc scan of local ``.eval`` files
does not import it at all when it can help it: the listing is a directory walk,
and a finished log's header, sample summaries and samples are JSON documents in
its zip (read with :mod:`zipfile`). Anything else (``.json`` logs, URLs, logs
still being written, documents that do not parse) goes through Inspect's reader.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from watcher import limits
from watcher.attachments import Expansion, resolve_attachments, resolve_text
from watcher.events import PROMPT_KEY, Tier
from watcher.sources.base import (
    BadResponse,
    EventPage,
    LimitExceeded,
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

try:  # a sample's JSON is tens of KB: orjson decodes it several times faster. It
    # refuses NaN and huge integers (a ValueError): such a log goes to Inspect's reader
    from orjson import dumps as _dumps
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - declared dependency
    _loads = json.loads  # type: ignore[assignment]  # same call, wider parameter
    _dumps = None  # type: ignore[assignment]  # tested before use

LOG_SUFFIXES = (".eval", ".json")
# Inspect's own test for a `.json` log file name (``log_file_pattern``)
_JSON_LOG_NAME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}[:-]\d{2}[:-]\d{2}.*$")
_CANCELLED_EXC_NAMES = ("CancelledError", "Cancelled")


@dataclass
class _FileInfo:
    """What ``list_eval_logs`` reports of a file (``name`` is a ``file://`` URL)."""

    name: str
    size: int
    mtime: float  # milliseconds, as Inspect's filesystem reports it


def _local_path(location: str) -> str | None:
    """The local path of a plain path or ``file://`` URL; ``None`` for other URLs."""
    if location.startswith("file://"):
        return location[len("file://"):]
    if "://" in location:
        return None
    return location


def _local_info(path: str) -> _FileInfo:
    st = os.stat(path)
    return _FileInfo("file://" + os.path.abspath(path), st.st_size, st.st_mtime_ns / 1e6)


def _list_local(path: str, recursive: bool) -> list[_FileInfo] | None:
    """Log files under a local directory (or the file itself), newest first, as
    ``list_eval_logs`` lists them; ``None`` when the path does not exist."""
    if os.path.isfile(path):
        return [_local_info(path)]
    if not os.path.isdir(path):
        return None
    found: list[_FileInfo] = []
    for root, dirs, files in os.walk(path):
        for name in files:
            if name.endswith(".eval") or (name.endswith(".json") and _JSON_LOG_NAME.match(name)):
                try:
                    found.append(_local_info(os.path.join(root, name)))
                except OSError:
                    continue  # gone while listing
        if not recursive:
            dirs.clear()
    found.sort(key=lambda f: f.mtime, reverse=True)
    return found


def attempt_nonce(uuid: str | None, sample_id: Any, epoch: int, attempts: int) -> str:
    """The server's nonce for one attempt of a sample (see ``_attempt_nonce`` in inspect)."""
    return f"{uuid or f'{sample_id}:{epoch}'}:{attempts}"


def to_unix(value: Any) -> float | None:
    """An ISO string or datetime (as found in log headers/summaries) as unix seconds."""
    if value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, datetime):
        return value.timestamp()
    try:
        return datetime.fromisoformat(str(value)).timestamp()
    except ValueError:
        return None


def _is_cancellation(message: str | None) -> bool:
    # Inspect's test, without importing Inspect for it (seconds) unless it is loaded
    mod = sys.modules.get("inspect_ai._util.error")
    test = getattr(mod, "is_cancellation_message", None)
    if test is not None:
        return bool(test(message))
    return message is not None and any(
        message.startswith(f"{name}(") for name in _CANCELLED_EXC_NAMES)


def _get(obj: Any, name: str) -> Any:
    """An attribute of a pydantic summary, or a key of its stored JSON."""
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def summary_row(summary: Any) -> dict[str, Any]:
    """A listing row from an ``EvalSampleSummary`` (or its JSON), shaped like the live
    listing's."""
    error = _get(summary, "error")
    if isinstance(error, dict):  # stored JSON of an older log: an EvalError
        error = error.get("message")
    if error is not None and _is_cancellation(error):
        status, error = "cancelled", None
    elif error is not None:
        status = "error"
    elif _get(summary, "completed"):
        status = "completed"
    else:
        status = "running"
    usage = _get(summary, "model_usage") or {}
    limit = _get(summary, "limit")
    if isinstance(limit, dict):  # stored JSON of an older log: an EvalSampleLimit
        limit = limit.get("type")
    return {
        "sample_id": str(_get(summary, "id")),
        "epoch": _get(summary, "epoch"),
        "status": status,
        "started_at": to_unix(_get(summary, "started_at")),
        "completed_at": to_unix(_get(summary, "completed_at")),
        "total_time": _get(summary, "total_time"),
        "total_tokens": sum(_get(u, "total_tokens") or 0 for u in usage.values()),
        "message_count": _get(summary, "message_count"),
        "turn_count": _get(summary, "turn_count"),
        "scores": {name: _get(sc, "value") for name, sc in (_get(summary, "scores") or {}).items()},
        "error": error,
        "retries": _get(summary, "retries") or 0,
        "limit": limit,
        "limit_reason": _get(summary, "limit_reason"),
        "uuid": _get(summary, "uuid"),
    }


@dataclass
class _LogEntry:
    """What we know of one log file; dropped when its size or mtime changes."""

    location: str
    stamp: tuple[Any, Any]
    task: TaskInfo
    summaries: list[Any] | None = None
    ids: dict[tuple[str, int], Any] = field(default_factory=dict)
    fast: bool = False  # a current-format .eval: its stored JSON is read directly


@dataclass
class _ParsedSample:
    """A sample's unresolved event dumps plus what resolving and paging them needs."""

    nonce: str
    events: list[dict[str, Any]]
    attachments: dict[str, str]
    # the sample's message pool (``events_data.messages``): model events of current logs
    # name their input by ranges into it (``input_refs``) and hold no input themselves
    pool: list[Any] = field(default_factory=list)


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
    """

    name = "logs"

    def __init__(self, log_dir: str, *, recursive: bool = True, strict: bool = False,
                 cache_size: int = 4, fs_options: dict[str, Any] | None = None) -> None:
        self.log_dir = log_dir
        self.recursive = recursive
        self.strict = strict
        self.cache_size = max(1, cache_size)
        self.fs_options = fs_options or {}
        self.unreadable: dict[str, str] = {}
        self._logs: dict[str, _LogEntry] = {}
        self._samples: OrderedDict[tuple[str, str, int, bool], _ParsedSample] = OrderedDict()
        self._json_logs: OrderedDict[str, Any] = OrderedDict()
        self._notices: list[SourceNotice] = []
        self.max_entry = limits.LOG_ENTRY_SIZE.value()
        self.max_expansion = limits.EXPANSION_SIZE.value()
        # reading a local log is CPU work under the GIL: read one sample at a time
        # (parallel scans use processes: --jobs); remote reads wait on the network
        self.parallel_reads = 1 if _local_path(log_dir) is not None else 4

    # -- listing -----------------------------------------------------------

    def _single_file(self) -> bool:
        return self.log_dir.rstrip("/").endswith(LOG_SUFFIXES)

    def _list(self) -> list[Any]:
        local = _local_path(self.log_dir)
        if local is not None and not self.fs_options:
            found = _list_local(local, self.recursive)
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

    def tasks(self) -> list[TaskInfo]:
        """One task per readable log file, oldest first."""
        infos = self._list()
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
            header = _zip_json(location, "header.json")
            # older formats (no eval_id) need Inspect's migrations: read those with it
            fast = isinstance(header, dict) and "eval_id" in (header.get("eval") or {})
            if fast:
                task = _task_info_json(header, location)  # type: ignore[arg-type]
            else:
                from inspect_ai.log import read_eval_log

                task = _task_info(read_eval_log(location, header_only=True), location)
        except Exception as ex:
            raise BadResponse(f"{location}: unreadable log: {ex}") from ex
        entry = _LogEntry(location=location, stamp=stamp, task=task, fast=fast)
        self._logs[location] = entry
        self.unreadable.pop(location, None)
        try:
            entry.task.counts = _counts(self._summaries(entry))
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
        self._json_logs.pop(location, None)
        for key in [k for k in self._samples if k[0] == location]:
            del self._samples[key]

    def _entry_for(self, task: TaskInfo) -> _LogEntry:
        location = task.log_location
        if location is None:
            raise NotFound(f"task {task.eval_id} has no log location")
        entry = self._logs.get(location)
        stamp = _stat(location, self.fs_options)
        if stamp is None:
            raise NotFound(f"{location}: log file is gone")
        if stamp is _UNKNOWN and entry is not None:
            return entry  # cannot stat here: trust what we read before
        if entry is None or entry.stamp != stamp:
            entry = self._entry(location, stamp if stamp is not _UNKNOWN else (None, None))
        return entry

    def _summaries(self, entry: _LogEntry) -> list[Any]:
        if entry.summaries is None:
            try:
                stored = _zip_json(entry.location, "summaries.json") if entry.fast else None
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
                entry.ids = {(str(_get(s, "id")), int(_get(s, "epoch"))): _get(s, "id")
                             for s in summaries}
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
        parsed = self._parsed(task, str(sample_id), int(epoch), full=tier == "full")
        nonce, offset = decode_cursor(since)
        if nonce != parsed.nonce:
            offset = 0
        limit = max(1, limit)
        scanned = parsed.events[offset:offset + limit]
        next_offset = offset + len(scanned)
        wanted = None if types is None or types & {"all", "*"} else types
        unknown: set[str] = set()
        cut = 0
        out = []
        try:
            for e in scanned:
                if wanted is None or e.get("event") in wanted:
                    budget = Expansion(self.max_expansion)
                    out.append(_resolved(e, parsed.attachments, unknown, budget)
                               if tier == "full" else
                               _light(e, parsed.pool, parsed.attachments, unknown, budget))
                    cut += budget.exceeded > 0
        except Exception as ex:  # attachments of the wrong type, and the like
            raise BadResponse(f"{task.log_location}: unreadable sample {sample_id}/{epoch}: "
                              f"{type(ex).__name__}: {ex}") from ex
        if cut:
            mb = self.max_expansion / limits.MB
            self._notices.append(SourceNotice(
                kind="limit", message=f"{task.log_location} sample {sample_id} epoch {epoch}: "
                f"attachment references in {cut} event(s) expand past {mb:g} MB; the rest "
                f"are left unresolved (rules read those events without that text; "
                f"{limits.EXPANSION_SIZE.env} raises the limit)",
                details={"limit": limits.EXPANSION_SIZE.env, "events": cut}))
        if unknown:
            self._notices.append(SourceNotice(
                kind="gap", message=f"{task.log_location} sample {sample_id} epoch {epoch}: "
                f"{len(unknown)} attachment reference(s) not in the log: "
                + ", ".join(sorted(unknown)[:5])))
        return EventPage(events=out, next=encode_cursor(parsed.nonce, next_offset),
                         done=next_offset >= len(parsed.events))

    def pop_notices(self) -> list[SourceNotice]:
        """Notices gathered since the last call: unreadable logs, unresolvable or
        over-limit attachments."""
        notices, self._notices = self._notices, []
        return notices

    def _parsed(self, task: TaskInfo, sample_id: str, epoch: int,
                full: bool = True) -> _ParsedSample:
        entry = self._entry_for(task)
        key = (entry.location, sample_id, epoch, full)
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
        fast = (None if full else
                read_eval_zip_sample(entry.location, sid, epoch, self.max_entry))
        try:
            if fast is not None:
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
        _zip_entry_size(entry.location, f"samples/{sid}_epoch_{epoch}.json", self.max_entry)
        try:
            return read_eval_log_sample(entry.location, sid, epoch, resolve_attachments=False)
        except Exception as ex:
            raise BadResponse(f"{entry.location}: unreadable sample {sid}/{epoch}: {ex}") from ex

    def close(self) -> None:
        """Drop every cache (logs are re-read on next use)."""
        self._logs.clear()
        self._samples.clear()
        self._json_logs.clear()


# what only the ``full`` tier shows (the whole conversation, tool definitions, the raw
# API call, a tool's sub-events and view): neither resolved nor projected below it
_HEAVY_KEYS = {"model": frozenset({"input", "input_refs", "call", "config", "tools"}),
               "tool": frozenset({"events", "view"})}


def _resolved(e: dict[str, Any], attachments: dict[str, str],
              unknown: set[str], budget: Expansion | None = None) -> dict[str, Any]:
    """``resolve_attachments(e)``, skipped for an event that holds no reference.

    Walking an event in Python costs far more than serialising it in C and looking
    for the prefix, and most events hold none. Events are read-only downstream
    (``normalise`` builds new dicts), so one without references is passed as is.
    """
    if _dumps is not None:
        try:
            blob = _dumps(e)
        except TypeError:  # not plain JSON data: walk it
            blob = b"attachment://"
        if b"attachment://" not in blob and b"tc://" not in blob:
            return e
    return resolve_attachments(e, attachments, unknown, budget)  # type: ignore[no-any-return]


def _light(e: dict[str, Any], pool: list[Any] | None = None,
           attachments: dict[str, str] | None = None,
           unknown: set[str] | None = None, budget: Expansion | None = None) -> dict[str, Any]:
    """An event without what only the ``full`` tier shows, attachments resolved; a model
    event keeps the last message of its input (``events.PROMPT_KEY``: what the model was
    answering).

    Only what the content tier reads is resolved, each value looked at once: a string is
    a substring test, a tool's arguments one level of values. Walking every event's
    structure for references (or serialising it to look) cost half as much again as
    decoding the log.
    """
    event = e.get("event")
    heavy = _HEAVY_KEYS.get(event)  # type: ignore[arg-type]
    found = unknown if unknown is not None else set()
    att = attachments or {}
    if heavy is None:
        return _resolved(e, att, found, budget)
    out: dict[str, Any] = {}
    for k, v in e.items():
        if k in heavy:
            continue
        if type(v) is str:
            out[k] = resolve_text(v, att, found, budget) if "://" in v else v
        elif type(v) is dict:
            if k == "output":
                out[k] = _slim_output(v, att, found, budget)
            elif k == "arguments":
                out[k] = _values(v, att, found, budget)
            else:
                out[k] = resolve_attachments(v, att, found, budget) if v else v
        elif type(v) is list:
            out[k] = resolve_attachments(v, att, found, budget) if v else v
        else:
            out[k] = v
    if event == "model":
        prompt = last_input(e, pool or [])
        if prompt is not None:
            out[PROMPT_KEY] = {"role": prompt.get("role"),
                               "content": _content(prompt.get("content"), att, found, budget)}
    return out


def _content(v: Any, att: dict[str, str], found: set[str], budget: Expansion | None) -> Any:
    """A message's content (a string, or a list of parts), resolved."""
    if type(v) is str:
        return resolve_text(v, att, found, budget) if "://" in v else v
    return resolve_attachments(v, att, found, budget) if v else v


def _values(d: dict[str, Any], att: dict[str, str], found: set[str],
            budget: Expansion | None) -> dict[str, Any]:
    """A flat mapping (tool arguments), its string values resolved; deeper values walked."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if type(v) is str:
            out[k] = resolve_text(v, att, found, budget) if "://" in v else v
        elif type(v) is dict or type(v) is list:
            out[k] = resolve_attachments(v, att, found, budget)
        else:
            out[k] = v
    return out


def _slim_output(output: dict[str, Any], att: dict[str, str], found: set[str],
                 budget: Expansion | None) -> dict[str, Any]:
    """A model output with what the content tier reads of it, resolved: the first
    choice's message (its text and tool calls), the stop reason, the completion and the
    token usage. The rest (other choices, logprobs, provider metadata, a call's view) is
    not read below the ``full`` tier."""
    out: dict[str, Any] = {k: output[k] for k in ("model", "stop_reason", "usage")
                           if k in output}
    completion = output.get("completion")
    if type(completion) is str:
        out["completion"] = resolve_text(completion, att, found, budget) \
            if "://" in completion else completion
    choices = output.get("choices")
    if type(choices) is list and choices and type(choices[0]) is dict:
        first = choices[0]
        message = first.get("message")
        slim: dict[str, Any] = {"stop_reason": first.get("stop_reason")}
        if type(message) is dict:
            msg: dict[str, Any] = {"role": message.get("role"),
                                   "content": _content(message.get("content"), att, found,
                                                       budget)}
            calls = message.get("tool_calls")
            if type(calls) is list:
                msg["tool_calls"] = [
                    {"function": c.get("function"),
                     "arguments": _values(c["arguments"], att, found, budget)
                     if type(c.get("arguments")) is dict else c.get("arguments")}
                    for c in calls if type(c) is dict]
            slim["message"] = msg
        out["choices"] = [slim]
    return out


def last_input(e: dict[str, Any], pool: list[Any]) -> dict[str, Any] | None:
    """The last input message of a raw model event: from its ``input``, or, when the
    input is pooled, the pool entry its last ``input_refs`` range ends at."""
    messages = e.get("input")
    if isinstance(messages, list) and messages:
        last = messages[-1]
        return last if isinstance(last, dict) else None
    refs = e.get("input_refs")
    if isinstance(refs, list) and refs and isinstance(refs[-1], list | tuple) and len(
            refs[-1]) == 2:
        end = refs[-1][1]
        if isinstance(end, int) and 0 < end <= len(pool) and isinstance(pool[end - 1], dict):
            return pool[end - 1]  # type: ignore[no-any-return]
    return None


_ZIPS: OrderedDict[tuple[str, float, int], Any] = OrderedDict()
_ZIPS_LOCK = threading.Lock()


def _open_zip(path: str) -> Any:
    """An open ``ZipFile`` for ``path``, reused while the file is unchanged.

    Reading the central directory of a 1,000-sample log costs milliseconds; doing it
    once per sample made post-hoc scans quadratic in the number of samples.
    """
    import zipfile

    st = os.stat(path)
    key = (path, st.st_mtime, st.st_size)
    with _ZIPS_LOCK:
        z = _ZIPS.get(key)
        if z is None:
            z = zipfile.ZipFile(path)
            _ZIPS[key] = z
            while len(_ZIPS) > 8:
                _ZIPS.popitem(last=False)[1].close()
        else:
            _ZIPS.move_to_end(key)
        return _LockedZip(z)


def forget_open_zips() -> None:
    """Drop (without closing) the cached zip handles: for a forked child, whose
    inherited file descriptors share their read offsets with the parent's."""
    with _ZIPS_LOCK:
        _ZIPS.clear()


class _LockedZip:
    """A shared ``ZipFile`` whose reads are serialised (threads share one file handle)."""

    def __init__(self, z: Any) -> None:
        self._z = z

    def read(self, name: str, limit: float | None = None) -> bytes:
        """An entry's bytes; past ``limit`` (checked before inflating, then while
        inflating: the declared size may lie) :class:`EntryTooLarge`."""
        with _ZIPS_LOCK:
            if limit is None:
                data: bytes = self._z.read(name)
                return data
            size = self._z.getinfo(name).file_size
            if size > limit:
                raise EntryTooLarge(name, size, limit)
            with self._z.open(name) as fh:
                data = fh.read(int(limit) + 1)
        if len(data) > limit:
            raise EntryTooLarge(name, len(data), limit)
        return data

    def size(self, name: str) -> int:
        with _ZIPS_LOCK:
            return int(self._z.getinfo(name).file_size)


class EntryTooLarge(LimitExceeded):
    """A log's zip entry inflates past the limit (a zip bomb, or a limit set too low)."""

    def __init__(self, name: str, size: float, limit: float) -> None:
        super().__init__(f"{name} inflates to {size / limits.MB:.1f} MB or more, over the "
                         f"{limit / limits.MB:g} MB limit ({limits.LOG_ENTRY_SIZE.env} "
                         "raises it); not read")


def read_eval_zip_sample(location: str, sid: Any, epoch: int,
                         limit: float | None = None) -> dict[str, Any] | None:
    """A local ``.eval`` sample's stored JSON, or ``None`` (then Inspect's reader is used)."""
    data = _zip_json(location, f"samples/{sid}_epoch_{epoch}.json", limit)
    if not isinstance(data, dict) or not isinstance(data.get("events"), list):
        return None
    return data


def parse_sample_json(data: dict[str, Any], epoch: int) -> _ParsedSample:
    """:func:`parse_sample` for a sample's stored JSON (pooled inputs stay refs)."""
    nonce = attempt_nonce(data.get("uuid"), data.get("id"), epoch,
                          len(data.get("error_retries") or []))
    events = [e for e in data["events"] if isinstance(e, dict)]
    pools = data.get("events_data")
    pool = pools.get("messages") if isinstance(pools, dict) else None
    return _ParsedSample(nonce=nonce, events=events,
                         attachments=dict(data.get("attachments") or {}),
                         pool=pool if isinstance(pool, list) else [])


def parse_sample(sample: Any, epoch: int) -> _ParsedSample:
    """Dump a sample's events (pooled inputs expanded), keeping attachments for paging."""
    events = list(sample.events)
    pools = sample.events_data or {}
    if pools:
        try:
            from inspect_ai.event._pool import (
                resolve_model_event_calls,
                resolve_model_event_inputs,
            )

            events = resolve_model_event_inputs(events, pools.get("messages") or [])
            events = resolve_model_event_calls(events, pools.get("calls") or [])
        except ImportError:  # pooled refs stay refs; the raw event still names them
            pass
    nonce = attempt_nonce(sample.uuid, sample.id, epoch, len(sample.error_retries or []))
    return _ParsedSample(nonce=nonce, events=[e.model_dump(mode="json") for e in events],
                         attachments=dict(sample.attachments or {}))


def _task_info(log: Any, location: str) -> TaskInfo:
    spec, stats = log.eval, log.stats
    results = log.results
    return TaskInfo(
        eval_id=spec.eval_id,
        task=spec.task,
        task_id=spec.task_id,
        model=spec.model,
        status=log.status,
        started_at=to_unix(stats.started_at) if stats else None,
        completed_at=to_unix(stats.completed_at) if stats else None,
        log_location=location,
        run_id=spec.run_id,
        raw={
            "eval_id": spec.eval_id, "run_id": spec.run_id, "task": spec.task,
            "task_id": spec.task_id, "model": spec.model, "status": log.status,
            "log_location": location, "version": log.version,
            "created": to_unix(spec.created),
            "total_samples": results.total_samples if results else None,
            "completed_samples": results.completed_samples if results else None,
            "error": log.error.message if log.error else None,
            "scores": _scores(results.scores if results else None),
        },
    )


def _scores(scores: Any) -> dict[str, float]:
    """The header's metrics as ``{name: value}`` (``scorer/name`` when there are several
    scorers), from ``EvalScore`` objects or their stored JSON."""
    scores = list(scores or [])
    out: dict[str, float] = {}
    for score in scores:
        scorer = _get(score, "name") or _get(score, "scorer") or "score"
        for name, metric in (_get(score, "metrics") or {}).items():
            value = _get(metric, "value")
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[f"{scorer}/{name}" if len(scores) > 1 else str(name)] = float(value)
    return out


def _zip_json(location: str, name: str, limit: float | None = None) -> Any:
    """A JSON document stored in a local ``.eval`` zip, or ``None`` (not there, not a
    local ``.eval``, or unreadable: the caller then asks Inspect's reader).

    An ``.eval`` log is a zip of JSON documents (zstd-compressed in newer versions;
    the ``zipfile-zstd`` package Inspect depends on teaches ``zipfile`` that). An
    entry larger than ``limit`` (default :data:`~watcher.limits.LOG_ENTRY_SIZE`)
    raises :class:`EntryTooLarge`: Inspect's reader would inflate it whole.
    """
    path = _local_path(location)
    if path is None or not path.endswith(".eval"):
        return None
    if limit is None:
        limit = limits.LOG_ENTRY_SIZE.value()
    try:
        import zipfile

        try:
            import zipfile_zstd  # noqa: F401  (registers zstd with zipfile)
        except ImportError:
            pass
        return _loads(_open_zip(path).read(name, limit))
    except (OSError, KeyError, ValueError, NotImplementedError, RuntimeError,
            zipfile.BadZipFile):
        return None


def _zip_entry_size(location: str, name: str, limit: float) -> None:
    """Raise :class:`EntryTooLarge` if a local ``.eval``'s entry is over ``limit``."""
    path = _local_path(location)
    if path is None or not path.endswith(".eval"):
        return
    try:
        size = _open_zip(path).size(name)
    except Exception:  # noqa: BLE001 - not there, not a zip: Inspect's reader says so
        return
    if size > limit:
        raise EntryTooLarge(name, size, limit)


def _task_info_json(header: dict[str, Any], location: str) -> TaskInfo:
    """:func:`_task_info` from a finished log's stored ``header.json``."""
    spec = header.get("eval") or {}
    stats = header.get("stats") or {}
    results = header.get("results") or {}
    error = header.get("error") or {}
    return TaskInfo(
        eval_id=spec["eval_id"],
        task=spec["task"],
        task_id=spec["task_id"],
        model=spec["model"],
        status=header.get("status") or "unknown",
        started_at=to_unix(stats.get("started_at") or None),
        completed_at=to_unix(stats.get("completed_at") or None),
        log_location=location,
        run_id=spec.get("run_id"),
        raw={
            "eval_id": spec["eval_id"], "run_id": spec.get("run_id"), "task": spec["task"],
            "task_id": spec["task_id"], "model": spec["model"],
            "status": header.get("status"), "log_location": location,
            "version": header.get("version"), "created": to_unix(spec.get("created")),
            "total_samples": results.get("total_samples") if results else None,
            "completed_samples": results.get("completed_samples") if results else None,
            "error": error.get("message") if error else None,
            "scores": _scores(results.get("scores") if results else None),
        },
    )


def _counts(summaries: list[Any]) -> dict[str, int]:
    """The live task row's ``samples`` counts, over the samples the log holds."""
    counts = {"total": len(summaries), "completed": 0, "errored": 0, "cancelled": 0,
              "in_flight": 0}
    key = {"completed": "completed", "error": "errored", "cancelled": "cancelled"}
    for summary in summaries:
        counts[key.get(summary_row(summary)["status"], "in_flight")] += 1
    return counts


_UNKNOWN: Any = ("?", "?")


def _stat(location: str, fs_options: dict[str, Any]) -> tuple[Any, Any] | None:
    """``(size, mtime)`` as ``list_eval_logs`` reports them; ``None`` if the file is gone.

    Checked on every ``samples``/``events`` call so a partly flushed log that
    grew since it was listed is re-read rather than served stale.
    """
    local = _local_path(location)
    if local is not None and not fs_options:
        try:
            info = _local_info(local)
        except FileNotFoundError:
            return None
        except OSError:
            return _UNKNOWN
        return (info.size, info.mtime)
    from inspect_ai._util.file import filesystem

    try:
        remote = filesystem(location, fs_options).info(location)
    except FileNotFoundError:
        return None
    except Exception:  # a filesystem that cannot stat: let the caller trust its cache
        return _UNKNOWN
    return (remote.size, remote.mtime)


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
            events = [resolve_attachments(e, parsed.attachments,
                                          budget=Expansion(source.max_expansion))
                      for e in parsed.events]
            yield task, row, events
