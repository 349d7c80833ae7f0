"""A :class:`~watcher.sources.base.Source` over recorded JSONL, for replays and rule fixtures.

Recording format (schema 1), one JSON object per line, written by
:func:`write_recording` / :class:`RecordingWriter` (the ``record`` command)::

    {"kind": "header", "schema": 1, "task": "demo", "task_id": "…", "eval_id": "…",
     "model": "inspect_watch_scripted/demo", "sample_id": "clean", "epoch": 1, "tier": "content"}
    {"kind": "row", "sample_id": "clean", "epoch": 1, "status": "running", …}
    {"kind": "page", "events": [ … ], "next": "<server cursor>", "done": false}
    {"kind": "page", "events": [ … ], "next": "<server cursor>", "done": true}

* ``header`` names one sample of one task and the tier its events were
  served at; ``"partial": true`` says the sample had not ended when it was
  recorded (``record`` of a live sample). A file may hold several
  recordings back to back: each header starts a new one. Recordings sharing
  an ``eval_id`` (in one file or across files) form one task.
* ``page`` lines are event pages exactly as the control channel served them,
  in order. Replay serves them one page per call, as recorded (``limit`` does
  not re-page them); the last page is always ``done`` because nothing more
  will ever arrive.
* ``row`` lines (optional) are sample-listing rows as served; the last row
  for a sample wins. Without one, a row is synthesised (``completed`` if the
  last page was ``done``, else ``running``).

A replay ends at the end of its input: a recording whose last page is not
``done`` (taken mid-sample) is replayed to its end, its task reads as
finished (status ``partial``: nothing more will ever arrive) and a ``partial``
notice says so, where a live watch would wait for the rest.

The simpler fixture shape is also accepted: a file whose lines are each one
event dict (no ``kind``) is one synthetic task (named after the file) with one
sample ``"1"`` epoch 1, paged ``limit`` events at a time.

Blank lines are skipped. Anything else malformed raises :class:`BadResponse`
naming ``file:line``.
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from watcher import limits
from watcher.events import Tier
from watcher.sources.base import (
    BadResponse,
    EventPage,
    NotFound,
    SampleListing,
    Source,
    SourceNotice,
    TaskInfo,
    sample_row,
)

SCHEMA = 1
HEADER_FIELDS = ("task", "task_id", "eval_id", "model", "sample_id", "epoch", "tier")


@dataclass
class Recording:
    """One recorded sample: its header, pages and (optional) listing row."""

    header: dict[str, Any]
    pages: list[EventPage] = field(default_factory=list)
    row: dict[str, Any] | None = None
    paged: bool = True  # False: a plain event list, re-paged by ``limit``

    @property
    def key(self) -> tuple[str, str, int]:
        h = self.header
        return str(h["eval_id"]), str(h["sample_id"]), int(h.get("epoch") or 1)

    @property
    def events(self) -> list[dict[str, Any]]:
        return [e for page in self.pages for e in page.events]


def _page_dict(page: EventPage | dict[str, Any]) -> dict[str, Any]:
    if isinstance(page, EventPage):
        return {"events": page.events, "next": page.next, "done": page.done}
    return {"events": page.get("events") or [], "next": page.get("next"),
            "done": bool(page.get("done"))}


class RecordingWriter:
    """Append a recording line by line, so a live ``record`` survives being interrupted."""

    def __init__(self, path: str | Path, header: dict[str, Any]) -> None:
        self.path = Path(path)
        self._fh: IO[str] = self.path.open("w", encoding="utf-8")
        line: dict[str, Any] = {"kind": "header", "schema": SCHEMA}
        line.update({k: header.get(k) for k in HEADER_FIELDS})
        line.update({k: v for k, v in header.items() if k not in ("kind", "schema")})
        self._write(line)

    def _write(self, obj: dict[str, Any]) -> None:
        self._fh.write(json.dumps(obj, default=str, ensure_ascii=False) + "\n")
        self._fh.flush()

    def page(self, page: EventPage | dict[str, Any]) -> None:
        """Record one page as served."""
        self._write({"kind": "page", **_page_dict(page)})

    def row(self, row: dict[str, Any]) -> None:
        """Record one sample-listing row as served."""
        self._write({**row, "kind": "row"})

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> RecordingWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def write_recording(path: str | Path, header: dict[str, Any],
                    pages: Iterable[EventPage | dict[str, Any]],
                    rows: Iterable[dict[str, Any]] = ()) -> None:
    """Write a whole recording (header, then rows, then pages) to ``path``."""
    with RecordingWriter(path, header) as writer:
        for row in rows:
            writer.row(row)
        for page in pages:
            writer.page(page)


def _read_text(path: Path) -> str:
    """A recording's text: a regular file only (``/dev/zero`` was read until memory ran
    out, a FIFO without a writer blocked), and at most :data:`~watcher.limits.RECORDING_SIZE`
    bytes, checked before it is read."""
    limit = limits.RECORDING_SIZE.value()
    # O_NONBLOCK: opening a FIFO without a writer would wait for one
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadResponse(f"{path}: not a recording: not a regular file (a device, "
                              "FIFO, socket or directory)")
        if st.st_size > limit:
            raise BadResponse(f"{path}: the recording is {st.st_size:,} bytes, over the "
                              f"{limit:,.0f}-byte limit ({limits.RECORDING_SIZE.env} raises "
                              "it)")
        data = fh.read(int(limit) + 1)
    if len(data) > limit:  # it grew while read
        raise BadResponse(f"{path}: the recording grew past the {limit:,.0f}-byte limit")
    return data.decode("utf-8")


def read_recordings(path: str | Path) -> list[Recording]:
    """Parse one recording file (either shape) into its recordings."""
    path = Path(path)
    try:
        lines = _read_text(path).splitlines()
    except FileNotFoundError as ex:
        raise NotFound(f"{path}: no such recording") from ex
    except (OSError, UnicodeDecodeError) as ex:
        raise BadResponse(f"{path}: unreadable recording: {ex}") from ex

    recordings: list[Recording] = []
    plain: list[dict[str, Any]] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except ValueError as ex:
            raise BadResponse(f"{where}: not JSON: {ex}") from ex
        except RecursionError as ex:
            raise BadResponse(f"{where}: not a recording line: JSON nested too deep") from ex
        if not isinstance(obj, dict):
            raise BadResponse(f"{where}: expected a JSON object, got {type(obj).__name__}")
        kind = obj.get("kind")
        if kind is None:
            if recordings:
                raise BadResponse(f"{where}: plain event line inside a paged recording")
            plain.append(obj)
            continue
        if plain:
            raise BadResponse(f"{where}: {kind!r} line after plain event lines")
        if kind == "header":
            recordings.append(_header(obj, where))
        elif not recordings:
            raise BadResponse(f"{where}: {kind!r} line before any header")
        elif kind == "page":
            events = obj.get("events")
            if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
                raise BadResponse(f"{where}: page 'events' must be a list of objects")
            recordings[-1].pages.append(
                EventPage(events=events, next=obj.get("next"), done=bool(obj.get("done"))))
        elif kind == "row":
            recordings[-1].row = {k: v for k, v in obj.items() if k != "kind"}
        else:
            raise BadResponse(f"{where}: unknown line kind {kind!r}")
    if plain:
        recordings.append(Recording(
            header={"kind": "header", "schema": SCHEMA, "task": path.stem, "task_id": path.stem,
                    "eval_id": str(path), "model": "replay", "sample_id": "1", "epoch": 1,
                    "tier": "full"},
            pages=[EventPage(events=plain, next=None, done=True)], paged=False))
    return recordings


def _header(obj: dict[str, Any], where: str) -> Recording:
    if obj.get("schema") != SCHEMA:
        raise BadResponse(f"{where}: unsupported recording schema {obj.get('schema')!r}")
    missing = [k for k in ("eval_id", "sample_id") if obj.get(k) is None]
    if missing:
        raise BadResponse(f"{where}: header lacks {', '.join(missing)}")
    epoch = obj.get("epoch")
    if epoch is not None and not (
            (type(epoch) is int and epoch >= 1)
            or (isinstance(epoch, str) and epoch.isascii() and epoch.isdigit()
                and 1 <= int(epoch) < 1 << 31)):
        raise BadResponse(f"{where}: header epoch must be a whole number from 1, not "
                          f"{str(epoch)[:40]!r}")
    return Recording(header=obj)


def _cursor(index: int) -> str:
    return f"replay:{index}"


class ReplaySource(Source):
    """Recorded JSONL files as a :class:`Source` (all parsed up front: they are small)."""

    name = "replay"

    def __init__(self, paths: Iterable[str | Path] | str | Path) -> None:
        self.paths = [Path(paths)] if isinstance(paths, str | Path) else [Path(p) for p in paths]
        self._recordings: dict[tuple[str, str, int], Recording] = {}
        self._order: list[str] = []
        self._notices: list[SourceNotice] = []
        for path in self.paths:
            for rec in read_recordings(path):
                self._recordings[rec.key] = rec
                if rec.key[0] not in self._order:
                    self._order.append(rec.key[0])
                if not (rec.pages and rec.pages[-1].done):
                    _, sid, epoch = rec.key
                    self._notices.append(SourceNotice(
                        kind="partial", message=f"{path}: the recording of sample {sid} "
                        f"epoch {epoch} ends before the sample did (it was recorded while "
                        "running); replayed to the end of the file"))

    def pop_notices(self) -> list[SourceNotice]:
        """Each partial recording, said once."""
        notices, self._notices = self._notices, []
        return notices

    def _for_task(self, eval_id: str) -> list[Recording]:
        return [r for k, r in self._recordings.items() if k[0] == eval_id]

    def tasks(self) -> list[TaskInfo]:
        """One task per ``eval_id``, in first-seen order. Always finished: a recording
        holds all it ever will (``partial`` when a sample was recorded mid-way)."""
        out: list[TaskInfo] = []
        for eval_id in self._order:
            recs = self._for_task(eval_id)
            h = recs[0].header
            done = all(r.pages and r.pages[-1].done for r in recs)
            out.append(TaskInfo(
                eval_id=eval_id, task=str(h.get("task") or eval_id),
                task_id=str(h.get("task_id") or eval_id), model=str(h.get("model") or "replay"),
                status="success" if done else "partial", counts={"total": len(recs)},
                raw=dict(h)))
        return out

    def samples(self, task: TaskInfo, active_since: float | None = None,
                all_rows: bool = False) -> SampleListing:
        """Recorded rows, or synthesised ones for samples recorded without any."""
        rows = []
        for rec in self._for_task(task.eval_id):
            _, sample_id, epoch = rec.key
            row = rec.row or {
                "sample_id": sample_id, "epoch": epoch, "retries": 0,
                "status": "completed" if rec.pages and rec.pages[-1].done else "running",
            }
            rows.append(sample_row({**row, "sample_id": str(row.get("sample_id", sample_id))}))
        return SampleListing(as_of=time.time(), samples=rows)

    def events(self, task: TaskInfo, sample_id: str, epoch: int, *, since: str | None,
               types: frozenset[str] | None, tier: Tier, limit: int = 500) -> EventPage:
        """The next recorded page (events as recorded, at the recording's tier).

        ``since`` is this source's cursor, or a recorded server cursor (resumes
        after the page that returned it); anything else restarts from the top.
        """
        rec = self._recordings.get((task.eval_id, str(sample_id), int(epoch)))
        if rec is None:
            raise NotFound(f"no recording of {task.eval_id} sample {sample_id} epoch {epoch}")
        if not rec.paged:
            events = rec.pages[0].events if rec.pages else []
            start = self._index(rec, since)
            scanned = events[start:start + max(1, limit)]
            end = start + len(scanned)
            return EventPage(events=_filter(scanned, types), next=_cursor(end),
                             done=end >= len(events))
        index = self._index(rec, since)
        if index >= len(rec.pages):
            return EventPage(events=[], next=_cursor(len(rec.pages)), done=True)
        page = rec.pages[index]
        last = index + 1 >= len(rec.pages)
        return EventPage(events=_filter(page.events, types), next=_cursor(index + 1),
                         done=page.done or last)

    @staticmethod
    def _index(rec: Recording, since: str | None) -> int:
        if not since:
            return 0
        if since.startswith("replay:"):
            try:
                return max(0, int(since.split(":", 1)[1]))
            except ValueError:
                return 0
        if rec.paged:
            for i, page in enumerate(rec.pages):
                if page.next == since:
                    return i + 1
        return 0

    def close(self) -> None:
        """Nothing to release: recordings are read whole at construction."""


def _filter(events: list[dict[str, Any]], types: frozenset[str] | None) -> list[dict[str, Any]]:
    if types is None or types & {"all", "*"}:
        return list(events)
    return [e for e in events if (e.get("event") or e.get("type")) in types]
