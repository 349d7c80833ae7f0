"""Findings as JSON Lines (schema in docs/findings.md), and reading them back.

Append-only: every snapshot is a new line and consumers fold by ``id``. Each
line goes out in one write followed by a flush, and file output uses an
``O_APPEND`` descriptor, so a second watcher appending to the same file never
interleaves with us. A reader racing a write can still see its first part (Linux
grows a file page by page as a write copies in): a line is whole once its newline
is there, and the reader below treats an unfinished last line so. Output is
ASCII-only JSON: agent text keeps its content but cannot put raw escape sequences
or bidi controls on a terminal that ``cat``s the file.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import threading
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any, TextIO

import orjson

from watcher.files import open_append
from watcher.findings import (
    ACTION,
    CONFIDENCE_LEVELS,
    SEVERITY_LEVELS,
    Action,
    Finding,
    Notice,
    SampleRef,
)
from watcher.reporters.base import OutputOptions, Reporter
from watcher.reporters.remote import RemoteReporter, is_url
from watcher.run.budget import merged_spend
from watcher.summary import ReportContext, RunSummary, fold_findings


def _log() -> Any:
    """This module's logger (logging imported on first use: 2.4 ms of every start-up)."""
    import logging

    return logging.getLogger(__name__)


EXCERPT_CAP = 500  # chars per agent_text excerpt unless full_evidence
EXCERPTS_MAX = 5  # excerpts per finding unless full_evidence


# JSON's own scalars, returned as they are (the exact types: a subclass, such as an
# enum, takes the general path below)
_SCALARS: frozenset[type] = frozenset({str, int, bool, type(None)})


def _json_safe(v: Any) -> Any:
    """Make facts serialisable as strict JSON (no NaN/Infinity, no arbitrary objects).

    A finding's record is mostly plain dicts, lists and scalars: those exact types are
    told by one type lookup, not a chain of ``isinstance`` tests (the walk cost as much
    as encoding the JSON on a scan writing many findings).
    """
    t = type(v)
    if t in _SCALARS:
        return v
    if t is dict:
        scalars = _SCALARS
        return {k if type(k) is str else str(k):
                x if type(x) in scalars else _json_safe(x) for k, x in v.items()}
    if t is list:
        scalars = _SCALARS
        return [x if type(x) in scalars else _json_safe(x) for x in v]
    return _json_safe_any(v)


class _Exponent(float):
    """A float whose JSON has a negative exponent (below 1e-4): Python writes ``1e-05``
    where orjson writes ``1e-5``, and :func:`dumps_line` keeps Python's spelling."""


def _json_safe_any(v: Any) -> Any:
    """:func:`_json_safe` of any value (its general case: floats, subclasses, sets)."""
    if isinstance(v, float):
        if not math.isfinite(v):
            return None
        return _Exponent(v) if 0.0 < abs(v) < 1e-4 else float(v)
    if isinstance(v, dict):
        return {str(k): _json_safe(x) for k, x in v.items()}
    if isinstance(v, list | tuple | set | frozenset):
        return [_json_safe(x) for x in v]
    if v is None or isinstance(v, str | int | bool):
        return v
    return str(v)


def finding_record(f: Finding, *, full_evidence: bool = False) -> dict[str, Any]:
    """``f.to_dict()``, with agent text capped unless ``full_evidence``.

    Capping adds ``evidence.agent_text_truncated: true`` so consumers know the
    excerpt is not the whole text.
    """
    d = f.to_dict()
    ev = d["evidence"]
    if not full_evidence:
        texts = list(ev.get("agent_text", []))
        capped = [t if len(t) <= EXCERPT_CAP else t[:EXCERPT_CAP] + "…"
                  for t in texts[:EXCERPTS_MAX]]
        if capped != texts:
            ev["agent_text"] = capped
            ev["agent_text_truncated"] = True
    return _json_safe(d)


def _python_dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":"))


def _fragment(value: Any) -> Any:
    """orjson's hook for what it does not write itself: an :class:`_Exponent`, as Python
    spells it; anything else is refused (the line is then Python's ``json``'s)."""
    if type(value) is _Exponent:
        return orjson.Fragment(float.__repr__(value).encode("ascii"))
    raise TypeError(type(value).__name__)


# what ensure_ascii escapes and orjson writes raw (non-ASCII, and DEL): only ever
# inside strings, where a \u escape means the same
_RAW = re.compile("[^\x00-\x7e]")


def _escape(m: re.Match[str]) -> str:
    n = ord(m.group())
    if n < 0x10000:
        return f"\\u{n:04x}"
    n -= 0x10000
    return f"\\u{0xD800 | n >> 10:04x}\\u{0xDC00 | n & 0x3FF:04x}"


def _orjson_dumps(value: Any) -> str:
    text = orjson.dumps(value, default=_fragment).decode("utf-8")
    return text if text.isascii() and "\x7f" not in text else _RAW.sub(_escape, text)


def _agrees() -> bool:
    """Whether this orjson writes what Python's ``json`` does for the cases that differ
    between versions (floats, escapes); if not, every line is Python's."""
    probe = [0.0, -0.0, 0.0001, 1e-05, 2.5e-300, 1e16, 1e22, 123456.789, 1.7976931348623157e308,
             "\x00\x1f\x7f\b\t\n\f\r\"\\/ é \u2028 \U0001f600", {"k": [True, None, -1]}]
    try:
        return all(_orjson_dumps(_json_safe(v)) == _python_dumps(_json_safe(v)) for v in probe)
    except Exception:  # noqa: BLE001 - an orjson without Fragment, or another refusal
        return False


def dumps_line(record: dict[str, Any], *, safe: bool = False) -> str:
    """One compact, ASCII-only, strict JSON line with its newline (``safe``: the record
    has been through ``_json_safe`` already, as :func:`finding_record`'s has).

    The text is exactly Python's ``json.dumps(..., ensure_ascii=True,
    separators=(",", ":"))``, written by orjson in a tenth of the time (3 us a finding
    line); what orjson refuses (a lone surrogate, an integer past 64 bits, nesting past
    254) is written by ``json``.
    """
    value = record if safe else _json_safe(record)
    if _FAST:
        try:
            return _orjson_dumps(value) + "\n"
        except TypeError:  # (orjson.JSONEncodeError is one)
            pass
    return _python_dumps(value) + "\n"


_FAST: bool = _agrees()


class JsonlReporter(Reporter):
    """Writes finding snapshots and notices, one JSON object per line.

    Give either ``path`` (opened for append; created if missing) or ``stream``.
    Status updates are not written: the file is a record of findings, not a log.
    """

    name = "jsonl"
    commands = frozenset({"watch"})

    @classmethod
    def open(cls, output: str | None, options: OutputOptions) -> Reporter:
        """To standard output, appended to a local file, or spooled to a local file and
        uploaded to a URL (:class:`~watcher.reporters.remote.RemoteReporter`)."""
        if output and is_url(output):
            return RemoteReporter(output, lambda spool: cls(
                spool, full_evidence=options.full_evidence))
        if output:
            return cls(output, full_evidence=options.full_evidence)
        return cls(stream=sys.stdout, full_evidence=options.full_evidence)

    def __init__(self, path: str | os.PathLike[str] | None = None, *,
                 stream: TextIO | None = None, full_evidence: bool = False) -> None:
        if (path is None) == (stream is None):
            raise ValueError("JsonlReporter needs exactly one of path or stream")
        self.path = None if path is None else os.fspath(path)
        self.stream = stream
        self.full_evidence = full_evidence
        self._fd: int | None = None
        self._lock = threading.Lock()

    def _write_line(self, record: dict[str, Any], *, safe: bool = False) -> None:
        line = dumps_line(record, safe=safe)
        with self._lock:
            if self.stream is not None:
                self.stream.write(line)
                self.stream.flush()
                return
            if self._fd is None:
                assert self.path is not None
                self._fd = open_append(self.path)
            data = line.encode("ascii")
            while data:  # regular files take it in one go; loop only for safety
                data = data[os.write(self._fd, data):]

    def start(self, context: ReportContext) -> None:
        if self.path is not None and self._fd is None:
            self._fd = open_append(self.path)

    def finding(self, f: Finding) -> None:
        self._write_line(finding_record(f, full_evidence=self.full_evidence), safe=True)

    def update(self, f: Finding) -> None:
        """A live finding as it stands (its count and spend grew): one more snapshot
        line with its id, which folding keeps as the latest (docs/findings.md)."""
        self.finding(f)

    def notice(self, n: Notice) -> None:
        self._write_line(n.to_dict())

    def stop(self, summary: RunSummary | None = None) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


# --- reading -----------------------------------------------------------------


def notice_from_dict(d: dict[str, Any]) -> Notice:
    """Inverse of :meth:`Notice.to_dict`."""
    s = d.get("sample")
    ref = None
    if isinstance(s, dict):
        known = set(SampleRef.__dataclass_fields__)
        ref = SampleRef(**{k: v for k, v in s.items() if k in known})
    return Notice(kind=str(d.get("notice", "")), message=str(d.get("message", "")), sample=ref,
                  at=float(d.get("at") or 0.0), details=dict(d.get("details") or {}))


def _open_text(path: str) -> Any:
    if "://" in path:
        import fsspec  # installed with inspect_ai; only needed for remote paths

        return fsspec.open(path, "rt", encoding="utf-8", errors="replace").open()
    return open(path, encoding="utf-8", errors="replace")


def _numbered_records(path: str | os.PathLike[str],
                      skipped: list[str] | None) -> Iterator[tuple[int, dict[str, Any]]]:
    """Parsed lines of one JSONL file (local path or fsspec URL), with line numbers.

    A line that does not parse is skipped with a warning (and ``file:line: reason`` in
    ``skipped``): at the end of the file it is the normal sign of a writer caught
    mid-line (or killed); in the middle it means the file was damaged, which is worth a
    louder message.
    """
    p = os.fspath(path)
    with _open_text(p) as fh:
        lines = fh.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    last = len(lines) - 1
    for i, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
            if not isinstance(rec, dict):
                raise ValueError("not an object")
        except ValueError:
            if i == last:
                _log().warning("%s: skipping truncated last line %d", p, i + 1)
            else:
                _log().warning("%s: skipping unparseable line %d", p, i + 1)
            if skipped is not None:
                skipped.append(f"{p}:{i + 1}: not a JSON object"
                               + (" (truncated last line)" if i == last else ""))
            continue
        yield i + 1, rec


class MalformedRecord(ValueError):
    """A record whose fields a report cannot render (a wrong type, a time out of range)."""


def _time(value: Any, name: str) -> None:
    """A unix time a report can print (finite, within the years ``datetime`` knows)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MalformedRecord(f"{name} is not a number: {value!r:.40}")
    try:
        datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError) as e:
        raise MalformedRecord(f"{name} is not a time: {value!r:.40}") from e


def _kind(value: Any, types: Any, name: str) -> None:
    if value is not None and (isinstance(value, bool) and types is not bool
                              or not isinstance(value, types)):
        raise MalformedRecord(f"{name} has the wrong type: {value!r:.40}")


def check_finding_record(d: dict[str, Any]) -> None:
    """Raise :class:`MalformedRecord` for a finding record a report cannot render.

    Findings files are read from other hosts and other versions, and may be damaged:
    each field ``report`` uses is checked, so one bad record is skipped and counted
    instead of costing the whole report (or a traceback half-way through writing it).
    """
    for name in ("id", "rule"):
        if not isinstance(d.get(name), str) or not d[name]:
            raise MalformedRecord(f"{name} is missing or not a string")
    for name in ("title", "category", "summary", "confidence_reason", "handoff", "task",
                 "task_id", "eval_id", "model", "status"):
        if name in d and not isinstance(d[name], str):
            raise MalformedRecord(f"{name} is not a string: {d[name]!r:.40}")
    _kind(d.get("log_location"), str, "log_location")
    if d.get("confidence", "low") not in CONFIDENCE_LEVELS:
        raise MalformedRecord(f"unknown confidence {d.get('confidence')!r:.40}")
    if d.get("severity", "warning") not in SEVERITY_LEVELS:
        raise MalformedRecord(f"unknown severity {d.get('severity')!r:.40}")
    for name in ("epoch", "attempt", "count", "episode"):
        _kind(d.get(name), int, name)
    score = d.get("score", 0.0)
    _kind(score, int | float, "score")
    if not math.isfinite(float(score or 0.0)):
        raise MalformedRecord("score is not finite")
    for name in ("first_seen", "last_seen"):
        if name in d:
            _time(d[name], name)
    ev = d.get("evidence")
    if ev is None:
        return
    if not isinstance(ev, dict):
        raise MalformedRecord(f"evidence is a {type(ev).__name__}, not an object")
    for name in ("event_uuids", "timestamps", "agent_text"):
        _kind(ev.get(name), list, f"evidence.{name}")
    for ts in ev.get("timestamps") or []:
        _time(ts, "evidence.timestamps")
    if not all(isinstance(t, str) for t in ev.get("agent_text") or []):
        raise MalformedRecord("evidence.agent_text holds a non-string")
    _kind(ev.get("facts"), dict, "evidence.facts")


def check_notice_record(d: dict[str, Any]) -> None:
    """Raise :class:`MalformedRecord` for a notice record a report cannot render."""
    for name in ("notice", "message"):
        _kind(d.get(name), str, name)
    if d.get("at") is not None:
        _time(d["at"], "at")
    _kind(d.get("details"), dict, "details")
    _kind(d.get("sample"), dict, "sample")
    s = d.get("sample") or {}
    for name in ("epoch", "attempt", "pid"):
        _kind(s.get(name), int, f"sample.{name}")


def check_action_record(d: dict[str, Any]) -> None:
    """Raise :class:`MalformedRecord` for an action record a report cannot render."""
    for name in ("verb", "outcome", "message", "finding_id"):
        _kind(d.get(name), str, name)
    if d.get("at") is not None:
        _time(d["at"], "at")
    for name in ("args", "details", "dry_run_answer", "server_answer"):
        _kind(d.get(name), dict, name)
    for name in ("epoch", "attempt", "pid"):
        _kind(d.get(name), int, name)


def read_jsonl(paths: Iterable[str | os.PathLike[str]],
               skipped: list[str] | None = None) -> tuple[list[Finding], list[Notice]]:
    """All finding snapshots (unfolded, in reading order) and distinct notices (and the
    watchdog's action records, which are notices too).

    A record that does not parse or that a report could not render is skipped with
    a warning, and ``file:line: reason`` is added to ``skipped`` when given.
    """
    findings: list[Finding] = []
    notices: list[Notice] = []
    seen_notices: set[str] = set()  # two watchers of one eval report the same notice
    for path in paths:
        for line, rec in _numbered_records(path, skipped):
            kind = rec.get("kind", "finding")
            try:
                if kind == "finding":
                    check_finding_record(rec)
                    findings.append(Finding.from_dict(rec))
                elif kind in ("notice", ACTION):
                    (check_notice_record if kind == "notice" else check_action_record)(rec)
                    key = dumps_line(rec)
                    if key not in seen_notices:
                        seen_notices.add(key)
                        notices.append(notice_from_dict(rec) if kind == "notice"
                                       else Action.from_dict(rec))
            except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
                _log().warning("%s:%s: skipping malformed %s record: %s", os.fspath(path),
                               line, kind, e)
                if skipped is not None:
                    skipped.append(f"{os.fspath(path)}:{line}: {kind}: {e}")
    return findings, notices


def merge_findings(paths: Iterable[str | os.PathLike[str]]) -> list[Finding]:
    """Folded findings from several JSONL files (several watchers or hosts).

    One finding per id: the latest snapshot (see
    :func:`~watcher.reporters.base.fold_findings`), sorted by first_seen.
    """
    findings, _ = read_jsonl(paths)
    return fold_findings(findings)


def summary_from_jsonl(paths: Iterable[str | os.PathLike[str]],
                       skipped: list[str] | None = None) -> RunSummary:
    """A :class:`RunSummary` from findings files alone (no eval logs needed).

    Records that were skipped (see :func:`read_jsonl`) are counted in a closing
    ``skipped_records`` notice, so the report itself says it is not the whole file.
    """
    bad: list[str] = [] if skipped is None else skipped
    findings, notices = read_jsonl(paths, bad)
    if bad:
        notices.append(Notice(kind="skipped_records", at=0.0,
                              details={"skipped": len(bad), "first": bad[:5]},
                              message=f"{len(bad)} malformed record(s) were skipped; the "
                                      f"report shows the rest (first: {bad[0]})"))
    return RunSummary.from_findings(findings, merged_spend(notices))
