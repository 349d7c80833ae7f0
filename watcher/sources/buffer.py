"""Running samples' events read from Inspect's sample buffer, in the watcher's process.

An eval process writes every transcript event, as it happens, to its *sample buffer*:
a SQLite database (``<inspect data dir>/samplebuffer/<hash>/<log file>.<pid>.db``)
that ``inspect view`` reads for its live view. The control channel serves running
samples' events from the same buffer, but through the eval's own event loop: when
hundreds of agents keep that loop busy, each page read waits its turn behind them
(seconds) and costs the eval CPU. Reading the database directly costs the eval
nothing.

This is an accelerator, never a second source of truth: :class:`BufferedSource`
wraps the control-channel source and reads from the buffer only what it can serve
exactly as the control channel would, and hands every other read to it:

- Offsets are the same. The control channel pages a running sample's transcript in
  the order its events were first written; a buffer row is one version of one event,
  so the events in order of their first row, each at its latest version, are the
  same sequence (checked against the control channel in the tests). Cursors are the
  control channel's own tokens (its attempt nonce plus an offset): the first page of
  each attempt is read over the control channel, which names the nonce, and any later
  read can go back to it with the same cursor.
- It reads only what is certain: a sample that is finished (its rows are moved to
  the log), not in the buffer, or whose rows were replaced (a retry deletes the
  failed attempt's rows; a second ``sample_init`` marks a new attempt) goes back to
  the control channel, which detects the new attempt or serves the log.
- Any database error (locked, schema changed, file gone) turns the buffer off for
  that task, with a notice; the watch goes on over the control channel.

The ``full`` tier is always read over the control channel (the buffer condenses
model inputs into pools this reader does not rebuild). Below it, a model event keeps
only the last message of its input (what the model was answering: a tool's result,
the harness's continue message, a user's reply), looked up in the sample's
``message_pool`` and attached as ``events.PROMPT_KEY``, and each event is projected
for the content tier as the log source projects it (``sources/logfiles/project.py``).
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from orjson import loads as _loads

from watcher import limits
from watcher.attachments import (
    ATTACHMENT_PROTOCOL,
    Expansion,
    find_refs,
    resolve_attachments,
    resolve_json,
    texts_by_hash,
)
from watcher.discovery import discovery_dir
from watcher.events import PROMPT_KEY, Tier
from watcher.sources.base import (
    EventPage,
    SampleListing,
    Source,
    SourceError,
    SourceNotice,
    TaskInfo,
    decode_cursor,
    encode_cursor,
)
from watcher.sources.logfiles.lean import parse_event_lean
from watcher.sources.logfiles.project import project

TAIL_INTERVAL = 0.2  # seconds: reads within this of the last tail reuse it
TAIL_BATCH = 5000  # rows per tail query
# pool rows a tracked sample keeps from the tail until a prompt needs them (a sample
# reading no model event must not keep its whole conversation)
POOL_KEEP = 256
STATUS_EVERY = 1.0  # seconds between looks at which tracked samples finished
INTACT_CHUNK = 300  # views checked per statement (3 parameters each)
MMAP_SIZE = 1 << 30  # bytes of the database file read through a memory map
LOOK_AGAIN = 5.0  # seconds before looking again for a buffer that was not there
# ... while a task is young: its buffer is created as its first samples start, and pages
# read before it is found come over the control channel at the content tier, cut
LOOK_AGAIN_YOUNG = 0.25
YOUNG = 60.0  # seconds since the task was first seen


# an event row still pending (Inspect writes compact JSON; tolerant of spaces)
_PENDING = re.compile(r'"pending":\s*true')


class BufferPage(NamedTuple):
    """What a buffer read served: the requested events, how many rows it covered (the
    cursor moves by that), and whether they are the sample's last."""

    events: list[dict[str, Any]]
    rows: int
    last: bool


class BufferMismatch(ValueError):
    """The buffer's events differ from what the control channel served at the same
    offsets (another Inspect version may write it differently): stop reading it."""


# fields of a full-tier event no rule reads: their references are not looked up (a model
# event's input is all references to its conversation, its API call references its own)
_NOT_READ = frozenset({"input", "call", "tools", "config", "input_refs", "call_refs"})

_EVENT_TYPE = re.compile(r'"event":\s*"([A-Za-z_]+)"')


def _event_type(blob: str) -> str | None:
    m = _EVENT_TYPE.search(blob, 0, 800)
    if m is not None:
        return m.group(1)
    value = _loads(blob).get("event")
    return str(value) if value is not None else None


@dataclass
class Vouch:
    """What the control channel last served of one sample: the attempt (``nonce``), the
    newest buffer row before that read (``mark``), and the page itself (offsets
    ``start``-``end``, the ``uuids`` it returned for ``types``), which the buffer's
    events at those offsets must match before the buffer serves this attempt."""

    nonce: str
    mark: int
    start: int
    end: int
    uuids: tuple[str, ...]
    types: frozenset[str] | None
    checked: bool = False


def buffer_dir() -> Path:
    """Where Inspect keeps sample buffers: beside the control discovery directory."""
    return discovery_dir().parent / "samplebuffer"


def find_buffer(task: TaskInfo, base: Path | None = None) -> Path | None:
    """The sample buffer database of a running task, or ``None``."""
    if not task.log_location or task.pid is None:
        return None
    name = task.log_location.rstrip("/").rsplit("/", 1)[-1]
    root = base if base is not None else buffer_dir()
    try:
        hits = sorted(root.glob(f"*/{name}.{task.pid}.db"))
    except OSError:
        return None
    return hits[0] if hits else None


class _View:
    """One sample attempt's events from offset ``base`` on: the latest version of each.

    ``anchor`` is the event just before the retained ones (already served): while it
    is still in the database the attempt's rows have not been replaced.
    """

    __slots__ = ("nonce", "base", "last", "uuids", "data", "types", "anchor", "inits",
                 "broken", "pool", "pool_synced", "pool_rows", "final", "attached",
                 "tailed", "tailed_before")

    def __init__(self, nonce: str) -> None:
        self.nonce = nonce
        # row ids of the sample's message_pool in pool order (an index into it is a
        # position in this list); read as far as model events' input refs need
        self.pool: list[int] = []
        self.pool_synced = False  # ``pool`` holds every row id from the first on
        # pool rows (JSON) the tail brought, by row id, until a prompt needs them
        self.pool_rows: dict[int, str] = {}
        self.base = 0
        self.last = 0  # where the previous read started
        self.uuids: list[str] = []
        self.data: dict[str, str] = {}
        self.types: dict[str, str | None] = {}  # an event's type, read once per event
        self.anchor: str | None = None
        self.inits = 0
        self.broken = False
        # every row of the attempt is here: it was tailed after its summary said it
        # finished, so its end can be served after Inspect drops the rows
        self.final = False
        # the attachments the last read fetched, by hash (SampleBufferReader._attachments)
        self.attached: dict[str, str] = {}
        # those the tail brought since the last read, and those it brought before that
        # and no read has named yet (kept one read more, then asked for if named)
        self.tailed: dict[str, str] = {}
        self.tailed_before: dict[str, str] = {}

    def add(self, uuid: str, data: str) -> None:
        if uuid not in self.data:
            self.uuids.append(uuid)
            kind = self.types[uuid] = _event_type(data)
            if kind == "sample_init":
                self.inits += 1
                if self.inits > 1:  # a new attempt started under the same sample key
                    self.broken = True
        self.data[uuid] = data

    def a_row(self) -> str | None:
        """An event of the attempt the buffer held (the anchor, else the first kept):
        while its row is there, none of the attempt's rows were replaced."""
        return self.anchor or (self.uuids[0] if self.uuids else None)

    def rotate_tailed(self, named: dict[str, str] | None = None) -> None:
        """After a read: the tail's attachments it did not name are kept one read more
        (``tailed_before``); those the tail brings next start afresh."""
        self.tailed_before = ({h: c for h, c in self.tailed.items() if h not in named}
                              if named else self.tailed)
        self.tailed = {}

    def trim(self, offset: int) -> None:
        """Forget events before ``offset`` (the stream never reads before its cursor)."""
        drop = min(offset - self.base, len(self.uuids))
        if drop <= 0:
            return
        gone = self.uuids[:drop]
        self.anchor = gone[-1]
        for u in gone:
            self.data.pop(u, None)
            self.types.pop(u, None)
        del self.uuids[:drop]
        self.base += drop


class SampleBufferReader:
    """Tails one task's sample buffer (read-only) and serves pages of tracked samples.

    Every sample read so far is tracked; one query per :data:`TAIL_INTERVAL` reads
    the rows added since the last one, for all tracked samples at once. A sample's
    first read loads its rows so far with one indexed query.
    """

    def __init__(self, path: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1.0,
                                     check_same_thread=False, isolation_level=None)
        # pages of the database file through the page cache's mapping: a pread per page
        # per statement was 60,000 system calls for a 125-sample live replay
        with contextlib.suppress(sqlite3.Error):
            self._conn.execute(f"PRAGMA mmap_size={MMAP_SIZE}")
        self._lock = threading.RLock()
        self._held = False  # a batch() transaction is open (its thread holds the lock)
        self._clock = clock
        self._views: dict[tuple[str, int], _View] = {}
        self._last_id = self._newest()
        # the pool and attachment rows are tailed with the events, for the tracked
        # samples: a read then finds its prompts and attachments here, not in a query
        # of its own (two statements per read of 2,417 in a 125-run replay, 130 ms)
        tables = {str(r[0]) for r in self._conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        self._tail_pool = "message_pool" in tables
        self._tail_attachments = "attachments" in tables
        self._last_pool = self._newest_of("message_pool") if self._tail_pool else 0
        self._last_att = self._newest_of("attachments") if self._tail_attachments else 0
        self._tailed_at = clock()
        # samples with rows added since pop_moved() last asked (tracked or not)
        self._moved: set[tuple[str, int]] = set()
        self._status_at: dict[tuple[str, int], tuple[float, str | None]] = {}
        self._ends_at = clock()
        self._ended: set[tuple[str, int]] = set()  # tracked and seen finished (or gone)
        # in a batch: the views whose rows were found not replaced in its snapshot (one
        # statement for them all, on the batch's first read that asks)
        self._intact: dict[tuple[str, int], _View] | None = None

    @contextlib.contextmanager
    def _snapshot(self) -> Iterator[None]:
        """The lock, and one read transaction for the statements under it: a statement on
        its own is a transaction, and each new transaction on a database the eval keeps
        writing reads its pages again (SQLite drops its cache when the WAL has moved)."""
        with self._lock:
            if self._held:  # inside this thread's batch(): its transaction
                yield
                return
            self._conn.execute("BEGIN")
            try:
                yield
            finally:
                with contextlib.suppress(sqlite3.Error):
                    self._conn.execute("COMMIT")

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """One read transaction for a cycle's in-process reads of this task: a new
        transaction per read, on a database the eval keeps writing, validated the WAL
        and read its pages again each time. The (re-entrant) lock is held throughout:
        a statement of another thread (``whole`` for a page the control channel served
        just now) must not run in this older snapshot, where that page's newest events
        are missing; such a thread waits for the batch to end."""
        with self._lock:
            if self._held:
                yield
                return
            self._conn.execute("BEGIN")
            self._held = True
            try:
                yield
            finally:
                self._held = False
                self._intact = None
                with contextlib.suppress(sqlite3.Error):
                    self._conn.execute("COMMIT")

    def pop_moved(self, tracked: frozenset[tuple[str, int]] = frozenset(),
                  ) -> set[tuple[str, int]]:
        """Samples whose transcripts grew since the last call (reads the new rows), and
        tracked ones (with a view here, or in ``tracked``: read over the control channel
        so far) that finished or left the buffer since (see :meth:`_ends`)."""
        with self._lock:
            if self._clock() - self._tailed_at >= TAIL_INTERVAL / 2:
                self._tail()
            if (self._views or tracked) and self._clock() - self._ends_at >= STATUS_EVERY:
                self._ends(tracked)
            moved, self._moved = self._moved, set()
        return moved

    def _ends(self, tracked: frozenset[tuple[str, int]] = frozenset()) -> None:
        """Mark moved each tracked sample whose summary row now says it finished, or that
        has no row any more (it was logged): finishing adds no event row, so without this
        its end waited for the eval's samples listing, which a saturated eval did not
        answer for minutes (and a finished sample read as idle: 236 false stalls in a
        1,125-sample replay). One statement over the summary rows."""
        now = self._ends_at = self._clock()
        watched = self._views.keys() | tracked
        listed: set[tuple[str, int]] = set()
        finished: list[tuple[str, int]] = []
        for sid, epoch, completed in self._conn.execute(
                "SELECT id, epoch, json_extract(data, '$.completed') FROM samples"):
            key = (str(sid), int(epoch))
            listed.add(key)
            status = _status_of(completed)
            self._status_at[key] = (now, status)
            if status != "running" and key in watched and key not in self._ended:
                self._ended.add(key)
                self._moved.add(key)
                if status == "completed":
                    finished.append(key)
        if finished:
            # every row of these samples was committed before the summary said so: read
            # them now, and their views hold the whole attempt even once the rows are
            # gone (Inspect logs a finished sample and drops its rows, at times within
            # the second; its end then waited on a busy eval, which did not answer)
            self._tail()
            for key in finished:
                view = self._views.get(key)
                if view is not None:
                    view.final = True
        for key in watched - listed - self._ended:
            self._ended.add(key)
            self._moved.add(key)

    def close(self) -> None:
        """Close the connection; an error closing it changes nothing for the watch."""
        try:
            self._conn.close()
        except sqlite3.Error:
            pass

    def has_view(self, sample_id: str, epoch: int, nonce: str) -> bool:
        """Whether this attempt of the sample is tracked (its rows loaded) and still in
        the buffer (running, or finished and not yet logged), so that a read of it is
        served here."""
        key = (str(sample_id), int(epoch))
        view = self._views.get(key)
        if view is None or view.nonce != nonce or view.broken:
            return False
        with self._lock:
            status = "completed" if view.final else self._status(key)
            if status == "completed":
                if not view.final:
                    self._tail()  # all its rows: one never completed hands the end over
                return not any(_PENDING.search(view.data[u]) for u in view.uuids)
            return status is not None

    def forget(self, sample_id: str, epoch: int) -> None:
        """Drop a finished sample's view (the control channel served its end)."""
        with self._lock:
            self._views.pop((str(sample_id), int(epoch)), None)
            self._status_at.pop((str(sample_id), int(epoch)), None)
            self._ended.discard((str(sample_id), int(epoch)))

    def _rows_after(self, table: str, columns: str, after: int) -> Iterator[list[Any]]:
        """Batches of ``table``'s rows with ids above ``after`` in id order, each row's
        id first: the tail's one query per table (and per :data:`TAIL_BATCH` rows)."""
        while True:
            rows = self._conn.execute(
                f"SELECT id, {columns} FROM {table} WHERE id > ? ORDER BY id LIMIT ?",
                (after, TAIL_BATCH)).fetchall()
            if rows:
                yield rows
                after = int(rows[-1][0])
            if len(rows) < TAIL_BATCH:
                return

    def _tail(self) -> None:
        moved = self._moved
        views = self._views
        for rows in self._rows_after("events", "sample_id, sample_epoch, event_id, data",
                                     self._last_id):
            for _rid, sid, epoch, uuid, data in rows:
                key = (str(sid), int(epoch))
                moved.add(key)
                view = views.get(key)
                if view is not None:
                    view.add(uuid, data)
            self._last_id = int(rows[-1][0])
        if self._tail_pool:
            self._tail_pool_rows()
        if self._tail_attachments:
            self._tail_attachment_rows()
        self._tailed_at = self._clock()

    def _tail_pool_rows(self) -> None:
        """New message-pool rows of tracked samples whose pool list is complete: a
        sample's rows have increasing ids, so each extends the list in pool order."""
        views = self._views
        for rows in self._rows_after("message_pool", "sample_id, sample_epoch, data",
                                     self._last_pool):
            for rid, sid, epoch, data in rows:
                view = views.get((str(sid), int(epoch)))
                if view is not None and view.pool_synced and (
                        not view.pool or rid > view.pool[-1]):
                    view.pool.append(rid)
                    view.pool_rows[rid] = data
                    if len(view.pool_rows) > POOL_KEEP:
                        del view.pool_rows[next(iter(view.pool_rows))]
            self._last_pool = int(rows[-1][0])

    def _tail_attachment_rows(self) -> None:
        """New attachments of tracked samples, kept until the next reads name them."""
        views = self._views
        for rows in self._rows_after("attachments", "sample_id, sample_epoch, hash, content",
                                     self._last_att):
            for _rid, sid, epoch, digest, content in rows:
                view = views.get((str(sid), int(epoch)))
                if view is not None:
                    view.tailed[digest] = content
            self._last_att = int(rows[-1][0])

    def max_id(self) -> int:
        """The newest row id now (a read vouched for by the control channel records it)."""
        with self._lock:
            return self._newest()

    def _newest(self) -> int:
        return self._newest_of("events")

    def _newest_of(self, table: str) -> int:
        row = self._conn.execute(f"SELECT coalesce(max(id), 0) FROM {table}").fetchone()
        return int(row[0])

    def _load(self, key: tuple[str, int], nonce: str, mark: int) -> _View | None:
        """A sample's rows so far, if they are the attempt the control channel vouched
        for: its first row must be older than that read (a retry replaces the rows)."""
        row = self._conn.execute(
            "SELECT min(id) FROM events WHERE sample_id = ? AND sample_epoch = ?",
            key).fetchone()
        if row is None or row[0] is None or int(row[0]) > mark:
            return None
        view = _View(nonce)
        self._ended.discard(key)  # (a new attempt under a key whose last one ended)
        for uuid, data in self._conn.execute(
                "SELECT event_id, data FROM events WHERE sample_id = ? AND sample_epoch = ? "
                "AND id <= ? ORDER BY id", (key[0], key[1], self._last_id)):
            view.add(uuid, data)
        self._views[key] = view
        return view

    def _agrees(self, view: _View, vouch: Vouch) -> bool:
        """Whether the buffer holds the vouched page's events, in its order (``False``:
        not all written yet). A different order raises :class:`BufferMismatch`."""
        lo, hi = vouch.start - view.base, vouch.end - view.base
        if lo < 0 or hi > len(view.uuids):
            return False
        types = vouch.types
        seen = tuple(u for u in view.uuids[lo:hi]
                     if types is None or view.types.get(u) in types)
        if seen != vouch.uuids:
            raise BufferMismatch(
                f"its events at offsets {vouch.start}-{vouch.end} differ from the control "
                "channel's")
        vouch.checked = True
        return True

    def _status(self, key: tuple[str, int]) -> str | None:
        """``"running"``, ``"completed"`` (its events are final: Inspect marks a sample
        completed after its last event and keeps the rows until the sample is logged) or
        ``None`` (no summary row: gone, or not started). Read again after TAIL_INTERVAL
        (the pull loop asks before it reads and the read asks again); completed is
        final, so it is not read again."""
        now = self._clock()
        known = self._status_at.get(key)
        if known is not None and (known[1] == "completed" or now - known[0] < TAIL_INTERVAL):
            return known[1]
        row = self._conn.execute(
            "SELECT json_extract(data, '$.completed') FROM samples WHERE id = ? AND epoch = ?",
            key).fetchone()
        status = None if row is None else _status_of(row[0])
        self._status_at[key] = (now, status)
        return status

    def first_attempt_nonce(self, sample_id: str, epoch: int,
                            running: bool = True) -> str | None:
        """The control channel's cursor nonce for the first attempt of a sample, derived
        from its summary row as Inspect derives it (the sample's uuid and its retry
        count); ``None`` for a retried sample, one without a uuid, or (``running``) one
        not running. Used only once a page of the control channel confirmed it."""
        row = self._conn.execute(
            "SELECT json_extract(data, '$.uuid'), json_extract(data, '$.retries'), "
            "json_extract(data, '$.completed') FROM samples WHERE id = ? AND epoch = ?",
            (str(sample_id), int(epoch))).fetchone()
        if row is None or not isinstance(row[0], str) or not row[0] or row[1] not in (0, None):
            return None
        if running and row[2] != 0:
            return None
        return f"{row[0]}:0"

    def _still_there(self, key: tuple[str, int], uuid: str) -> bool:
        row = self._conn.execute(
            "SELECT 1 FROM events WHERE sample_id = ? AND sample_epoch = ? AND event_id = ? "
            "LIMIT 1", (key[0], key[1], uuid)).fetchone()
        return row is not None

    def _not_replaced(self, key: tuple[str, int], view: _View, uuid: str) -> bool:
        """Whether the attempt's rows are still in the buffer (``uuid`` is one of them).

        Inspect only adds event rows, and deletes a sample's rows all at once (logged,
        or retried): any row of the attempt still there proves them all. In a batch,
        every tracked view is checked by one statement on its first such question (a
        statement per read was 4,464 of them in a 125-run replay); a view not among
        them (loaded since, or its row not found) is asked about on its own."""
        if self._held:
            intact = self._intact
            if intact is None:
                intact = self._intact = self._views_intact()
            if intact.get(key) is view:
                return True
        return self._still_there(key, uuid)

    def _views_intact(self) -> dict[tuple[str, int], _View]:
        """The tracked views one of whose rows (the anchor, else the first) is still in
        the buffer, by an index search per view in one statement per chunk."""
        asks = [(key, view, uuid) for key, view in self._views.items()
                if not view.final and not view.broken
                and (uuid := view.a_row()) is not None]
        found: set[tuple[str, int]] = set()
        for i in range(0, len(asks), INTACT_CHUNK):
            chunk = asks[i:i + INTACT_CHUNK]
            values = ",".join("(?,?,?)" for _ in chunk)
            found.update((str(sid), int(epoch)) for sid, epoch in self._conn.execute(
                f"SELECT v.column1, v.column2 FROM (VALUES {values}) AS v WHERE EXISTS ("
                "SELECT 1 FROM events WHERE sample_id = v.column1 AND "
                "sample_epoch = v.column2 AND event_id = v.column3)",
                [p for key, _, uuid in chunk for p in (key[0], key[1], uuid)]))
        return {key: view for key, view, _ in asks if key in found}

    def read(self, sample_id: str, epoch: int, offset: int, limit: int, vouch: Vouch,
             types: frozenset[str] | None = None, tier: Tier = "content",
             ) -> BufferPage | None:
        """Events ``[offset, offset + limit)`` of a sample still in the buffer: those of
        ``types`` decoded (the others only counted: half a transcript's rows are spans,
        and decoding what no rule reads was a fifth of a read), and whether they are its
        last (the sample finished, so no more will come); ``None`` when the buffer cannot
        serve them exactly as the control channel would.

        A finished sample's end is served here too: asking the eval for it cost a
        request its busy loop answered late (a 1,125-sample replay waited minutes), and
        its text came cut, so a rule on its last events judged 256 characters.

        Raises :class:`BufferMismatch` when the buffer disagrees with the page the
        control channel last served (``vouch``).
        """
        nonce = vouch.nonce
        key = (str(sample_id), int(epoch))
        with self._snapshot():
            view = self._views.get(key)
            kept = view is not None and view.final and view.nonce == nonce
            status = "completed" if kept else self._status(key)
            if status is None:
                self._views.pop(key, None)
                return None
            final = status == "completed"
            fresh = view is None or view.nonce != nonce or offset < view.base
            if not kept and (fresh or final
                             or self._clock() - self._tailed_at >= TAIL_INTERVAL):
                # a new view starts from rows as of now; a finished sample's rows are all
                # in this snapshot (its summary was marked after its last event)
                self._tail()
            if fresh or view is None:
                view = self._load(key, nonce, vouch.mark)
                if view is None:
                    return None
            if not vouch.checked and not self._agrees(view, vouch):
                self._views.pop(key, None)
                return None  # the buffer lags the control channel's page: not yet
            # keep the events from the previous read's start: the stream re-reads from
            # the start of the page that held a pending event until it completes
            view.trim(min(offset, view.last))
            view.last = offset
            if final:
                view.final = True  # tailed in this snapshot, after it finished
            check = view.a_row()
            if view.broken or offset > view.base + len(view.uuids) or (
                    not kept and check is not None
                    and not self._not_replaced(key, view, check)):
                self._views.pop(key, None)
                return None
            start = offset - view.base
            uuids = view.uuids[start:start + limit]
            last = final and start + limit >= len(view.uuids)
            rows = len(uuids)
            if types is not None:
                uuids = [u for u in uuids if view.types.get(u) in types]
            blobs = [view.data[u] for u in uuids]
            # model events decoded here, for the pool rows of their prompts; the rest
            # after the lock is released. Each event is decoded once, as written (its
            # references are short), and projected as the log source projects it
            # (samples.light): only what the content tier reads is resolved, each
            # attachment's text taken as it is. Resolving references in the JSON text
            # escaped every attachment into it and decoded it all again, the model's
            # raw API call included (py-spy, 125-run replay: buffer reads 28 % of the
            # watcher's samples before, 25 % after). At the content tier a model or tool
            # event is decoded down to the fields project() reads (lean.parse_event_lean)
            lean = tier == "content"  # (another tier copies every field: decoded whole)
            models = {i: _event(blobs[i], lean) for i, u in enumerate(uuids)
                      if view.types.get(u) == "model"}
            prompts = self._prompts(key, view, models)
            # the events' and their prompts' references, in one query at most
            attach = self._attachments(key, blobs + list(prompts.values()), view)
            if kept and self._status(key) is None and not _whole(blobs, attach, models,
                                                                  prompts):
                return None  # its attachments or prompts left with its rows
        out: list[dict[str, Any]] = []
        att = attach or {}
        unknown: set[str] = set()  # (left as they are, as the control channel leaves them)
        for i, blob in enumerate(blobs):
            event = models.get(i)
            if event is None:
                event = _event(blob, lean and view.types.get(uuids[i]) == "tool")
            if not isinstance(event, dict):
                out.append(event)
                continue
            prompt = prompts.get(i)
            message = _loads(prompt) if prompt is not None else None
            # made as the log source makes it (sources/logfiles/project.py: the normalised event
            # where it can, in one pass), the pool row's prompt standing in for its own
            out.append(project(event, tier, None, att, unknown, None,
                               message if isinstance(message, dict) else None))
        if final and any(isinstance(e, dict) and e.get("pending") for e in out):
            return None  # a finished sample with an event never completed: Inspect's own
        return BufferPage(out, rows, last)

    def whole(self, sample_id: str, epoch: int,
              events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A page the control channel served at the content tier, with each completed
        event replaced by its raw form from the buffer where the buffer still holds it.

        The content tier cuts text to 256 characters; the buffer has the whole event
        (the same uuid, its latest version), so identity can be judged on whole values
        for the pages the control channel serves too: an attempt's first page, and the
        end of a sample that finished (its rows stay until Inspect has logged it).
        Events the buffer no longer holds, or holds only as still pending, are left as
        served.
        """
        key = (str(sample_id), int(epoch))
        uuids = [str(e["uuid"]) for e in events
                 if isinstance(e, dict) and e.get("uuid") and not e.get("pending")]
        if not uuids:
            return events
        with self._snapshot():
            marks = ",".join("?" * len(uuids))
            rows = self._conn.execute(
                f"SELECT event_id, data FROM events WHERE sample_id = ? AND sample_epoch = ? "
                f"AND event_id IN ({marks}) ORDER BY id", (key[0], key[1], *uuids)).fetchall()
            latest = dict(rows)  # ordered by id: the last version of each wins
            blobs = [b for b in latest.values()]
            found = {u: _loads(b) for u, b in latest.items()}
            found = {u: e for u, e in found.items() if isinstance(e, dict)
                     and not e.get("pending")}
            models = {i: e for i, e in enumerate(found.values()) if e.get("event") == "model"}
            view = self._views.get(key) or _View("")
            prompts = self._prompts(key, view, models)
            attach = self._attachments(key, blobs + list(prompts.values()))
        if attach is not None:  # decoded again from the resolved text (see read)
            for u in found:
                if ATTACHMENT_PROTOCOL in latest[u]:
                    found[u] = _loads(resolve_json(latest[u], attach))
        raws = list(found.values())
        for i, prompt in prompts.items():
            message = _loads(_resolved(prompt, attach))
            if isinstance(message, dict):
                raws[i][PROMPT_KEY] = message
        by_uuid = {str(e.get("uuid")): e for e in raws}
        return [by_uuid.get(str(e.get("uuid")), e) if isinstance(e, dict) else e
                for e in events]

    def _prompts(self, key: tuple[str, int], view: _View,
                 models: dict[int, Any]) -> dict[int, str]:
        """For each model event of a page whose input is pooled: the pool row (JSON) of its
        input's last message, by the event's position in the page."""
        ends: dict[int, int] = {}
        for i, e in models.items():
            if not isinstance(e, dict) or e.get("input"):
                continue
            refs = e.get("input_refs")
            if isinstance(refs, list) and refs and isinstance(refs[-1], list) and len(
                    refs[-1]) == 2 and isinstance(refs[-1][1], int) and refs[-1][1] > 0:
                ends[i] = refs[-1][1]
        if not ends:
            return {}
        if max(ends.values()) > len(view.pool):
            after = view.pool[-1] if view.pool else 0
            view.pool += [int(r[0]) for r in self._conn.execute(
                "SELECT id FROM message_pool WHERE sample_id = ? AND sample_epoch = ? "
                "AND id > ? ORDER BY id", (key[0], key[1], after))]
            # (a view's own list is complete from the first row; whole()'s is a throwaway)
            view.pool_synced = True
        ids = {i: view.pool[end - 1] for i, end in ends.items() if end <= len(view.pool)}
        if not ids:
            return {}
        kept = view.pool_rows
        rows = {rid: kept[rid] for rid in ids.values() if rid in kept}
        missing = sorted(set(ids.values()) - rows.keys())
        if missing:
            marks = ",".join("?" * len(missing))
            rows.update(self._conn.execute(
                f"SELECT id, data FROM message_pool WHERE id IN ({marks})", missing))
        if kept:  # a later prompt is a later row: the rows before this read's are done
            first = min(ids.values())
            for rid in [r for r in kept if r < first]:
                del kept[rid]
        return {i: rows[rid] for i, rid in ids.items() if rid in rows}

    def _attachments(self, key: tuple[str, int], blobs: list[str],
                     view: _View | None = None) -> dict[str, str] | None:
        """The attachments the texts refer to (those the buffer has).

        With a ``view``, those its previous read fetched and those the tail brought
        are not asked for: an attachment is named by its content's hash, and the next
        read of a sample mostly names the same ones (a tool's output, then the prompt
        that quotes it; a page read again while an event in it is pending) or the new
        ones the tail just brought. The last read's are kept, and the tail's until the
        read after the one they came before."""
        refs: set[str] = set()
        for blob in blobs:
            if ATTACHMENT_PROTOCOL in blob:
                refs |= find_refs(blob)
        if not refs:
            if view is not None:
                view.rotate_tailed()
            return None
        refs |= {r[:32] for r in refs if len(r) > 32}  # a hash run into following text
        got: dict[str, str] = {}
        if view is not None:
            for known in (view.attached, view.tailed, view.tailed_before):
                if known:
                    got.update((r, known[r]) for r in refs if r in known)
        missing = sorted(refs - got.keys())
        if missing:
            marks = ",".join("?" * len(missing))
            got.update(self._conn.execute(
                f"SELECT hash, content FROM attachments WHERE sample_id = ? AND "
                f"sample_epoch = ? AND hash IN ({marks})", (key[0], key[1], *missing)))
        if view is not None:
            view.attached = got
            view.rotate_tailed(got)
        return got


def _status_of(completed: object) -> str | None:
    """A summary row's ``completed`` (read with ``json_extract``: JSON false is 0, true
    is 1) as ``"running"``, ``"completed"`` or ``None`` (anything else)."""
    return "running" if completed == 0 else "completed" if completed == 1 else None


def _whole(blobs: list[str], attach: dict[str, str] | None, models: dict[int, Any],
           prompts: dict[int, str]) -> bool:
    """Whether a page kept in memory after its rows left the buffer is served whole:
    every attachment reference resolved and every pooled prompt found."""
    if any(ATTACHMENT_PROTOCOL in _resolved(b, attach) for b in blobs):
        return False
    return all(i in prompts for i, e in models.items()
               if isinstance(e, dict) and not e.get("input") and e.get("input_refs"))


def _event(blob: str, lean: bool) -> Any:
    """An event row decoded for :func:`project` at the content tier (``lean``: a model or
    tool event, decoded down to the fields it reads where that is all it reads), or
    whole."""
    if lean:
        e = parse_event_lean(blob)
        if e is not None:
            return e
    return _loads(blob)


def _resolved(blob: str, attach: dict[str, str] | None) -> str:
    """The JSON text with its attachment references resolved (references are resolved in
    the text, before the one decode it needs)."""
    return resolve_json(blob, attach) if attach and ATTACHMENT_PROTOCOL in blob else blob


# how often a page whose completed events came back cut is read again (one poll each)
MAX_HOLDS = 3


def _cut(events: list[Any], kinds: tuple[str, ...]) -> set[str]:
    """The uuids of completed events of ``kinds`` served at the content tier (cut)."""
    return {str(e.get("uuid")) for e in events
            if isinstance(e, dict) and "has_error" in e and not e.get("pending")
            and e.get("event") in kinds}


class BufferedSource(Source):
    """The control-channel source, with running samples' pages read from the buffer.

    ``tasks``/``samples`` and every read the buffer cannot serve go to ``inner``.
    ``notices`` collects what the watch should tell the user (a buffer turned off).
    """

    def __init__(self, inner: Any, base: Path | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.live = inner.live
        self.parallel_reads = inner.parallel_reads
        self._base = base
        self._readers: dict[str, SampleBufferReader | None] = {}
        # (eval, sample, epoch) -> the last page the control channel served of it:
        # the attempt the buffer may continue
        self._vouched: dict[tuple[str, str, int], Vouch] = {}
        self._missing: dict[str, float] = {}  # eval id -> when no buffer was found
        self._first_seen: dict[str, float] = {}  # eval id -> when its buffer was first sought
        self._lock = threading.Lock()
        self.notices: list[str] = []
        self._gaps: list[SourceNotice] = []  # references a finished page left unresolved
        self.buffer_reads = 0
        self.buffer_ends = 0  # finished samples whose last page the buffer served
        # eval id -> whether a sample's first page may come from the buffer under the
        # nonce its summary row gives: None until a control-channel page confirms the
        # derivation (True), False for good once one contradicts it
        self._derive: dict[str, bool | None] = {}
        # (eval, sample, epoch) -> pages held back because events on them stayed cut
        self._held: dict[tuple[str, str, int], int] = {}
        # characters references may add to one page's events (a log's own bound)
        self.max_expansion = limits.EXPANSION_SIZE.value()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def pop_notices(self) -> list[SourceNotice]:
        """What the watch should report (a buffer turned off)."""
        with self._lock:
            out = [SourceNotice(kind="transport", message=m) for m in self.notices]
            self.notices.clear()
            out += self._gaps
            self._gaps = []
        return out

    def tasks(self) -> list[TaskInfo]:
        return self.inner.tasks()  # type: ignore[no-any-return]

    def tasks_patiently(self) -> list[TaskInfo]:
        return self.inner.tasks_patiently()  # type: ignore[no-any-return]

    def samples(self, task: TaskInfo, active_since: float | None = None,
                all_rows: bool = False) -> SampleListing:
        return self.inner.samples(  # type: ignore[no-any-return]
            task, active_since=active_since, all_rows=all_rows)

    def _reader(self, task: TaskInfo) -> SampleBufferReader | None:
        with self._lock:
            if task.eval_id in self._readers:
                return self._readers[task.eval_id]
            missed = self._missing.get(task.eval_id)
            now = time.monotonic()
            first = self._first_seen.setdefault(task.eval_id, now)
            wait = LOOK_AGAIN_YOUNG if now - first < YOUNG else LOOK_AGAIN
            if missed is not None and now - missed < wait:
                return None
            path = find_buffer(task, self._base)
            reader = None
            if path is not None:
                try:
                    reader = SampleBufferReader(path)
                except sqlite3.Error as exc:
                    self.notices.append(f"sample buffer {path.name} unreadable ({exc}); "
                                        "reading events over the control channel")
            if reader is not None or task.finished:
                self._readers[task.eval_id] = reader
            else:  # not there (yet, or buffering is off): look again in a few seconds
                self._missing[task.eval_id] = time.monotonic()
            return reader

    def moved_samples(self, task: TaskInfo) -> set[tuple[str, int]] | None:
        """``(sample_id, epoch)`` of samples with new events since the last call, read
        from the buffer without asking the eval; ``None`` when there is no buffer."""
        reader = self._reader(task)
        if reader is None:
            return None
        tracked = frozenset((sid, epoch) for eid, sid, epoch in list(self._vouched)
                            if eid == task.eval_id)
        try:
            return reader.pop_moved(tracked)
        except sqlite3.Error as exc:
            self._drop(task, exc)
            return None

    def read_batch(self, task: TaskInfo) -> contextlib.AbstractContextManager[None]:
        reader = self._readers.get(task.eval_id)
        return reader.batch() if reader is not None else contextlib.nullcontext()

    def reads_in_process(self, task: TaskInfo, sample_id: str, epoch: int,
                         since: str | None) -> bool:
        """A tracked attempt the control channel vouched for is read from the buffer
        (it may still hand the read over, e.g. when the sample has just finished)."""
        reader = self._readers.get(task.eval_id)
        vouched = self._vouched.get((task.eval_id, str(sample_id), int(epoch)))
        if reader is None or vouched is None:
            return False
        nonce = decode_cursor(since)[0] if since is not None else vouched.nonce
        return nonce == vouched.nonce and reader.has_view(sample_id, epoch, nonce)

    def _drop(self, task: TaskInfo, exc: Exception) -> None:
        with self._lock:
            reader = self._readers.get(task.eval_id)
            self._readers[task.eval_id] = None
        if reader is not None:
            self.notices.append(f"sample buffer {reader.path.name}: {exc}; reading events "
                                "over the control channel from here on")
            reader.close()

    def events(self, task: TaskInfo, sample_id: str, epoch: int, *, since: str | None,
               types: frozenset[str] | None, tier: Tier, limit: int = 500) -> EventPage:
        nonce, offset = decode_cursor(since)
        key = (task.eval_id, str(sample_id), int(epoch))
        reader = self._reader(task) if tier != "full" else None
        vouched = self._vouched.get(key)
        if since is None and vouched is not None:
            # from the start of the attempt the control channel last vouched for (the
            # stream re-reads from its first page while an event there is pending); a
            # retry since then replaced the rows, which the reader detects
            nonce = vouched.nonce
        if reader is not None and nonce is not None:
            got = None
            if vouched is not None and vouched.nonce == nonce:
                try:
                    got = reader.read(sample_id, epoch, offset, limit, vouched, types,
                                      tier)
                except (sqlite3.Error, ValueError) as exc:
                    self._drop(task, exc)
            if got is not None:
                return self._served(task, reader, sample_id, epoch, nonce, offset, got, types)
        if since is None and vouched is None and reader is not None:
            first = self._first_page(task, reader, sample_id, epoch, limit, types, tier)
            if first is not None:
                return first
        mark = 0
        derived = None
        if reader is not None:
            try:
                mark = reader.max_id()  # before the read: rows it served are at most this
                if since is None and self._derive.get(task.eval_id) is None:
                    derived = reader.first_attempt_nonce(sample_id, epoch, running=False)
            except sqlite3.Error as exc:
                self._drop(task, exc)
                reader = None
        page: EventPage = self.inner.events(task, sample_id, epoch, since=since, types=types,
                                            tier=tier, limit=limit)
        if tier == "content" and page.events:
            if reader is not None:
                try:
                    page.events = reader.whole(sample_id, epoch, page.events)
                except (sqlite3.Error, ValueError) as exc:
                    self._drop(task, exc)
                    reader = None
            # model events too when there is no buffer (not found yet, or gone with a
            # finished eval kept inspectable): the content tier carries no prompt, so a
            # user's reply between two calls went unseen and a conversation's retries
            # read as a loop (a watch started after the samples ended: a false medium
            # finding, every time). A running sample's model event carries its whole
            # conversation at the full tier: an eval that buffers nothing (realtime
            # logging off) would send each turn's conversation again, so past its first
            # minute only a finished task's pages and a sample's last page pay that
            kinds = ("model", "tool") if reader is not None or self._model_whole(
                task, page) else ("tool",)
            page.events = self._whole_over_http(task, sample_id, epoch, since, types, limit,
                                                page, kinds=kinds)
            if _cut(page.events, kinds) and self._hold(key):
                # the sample ended between the two reads: the buffer let its rows go and
                # the full read found nothing yet (Inspect serves its logged copy a
                # moment later). Read the page again at the next poll rather than judge
                # cut values, which post hoc are whole
                return EventPage(events=[], next=since, done=False)
        served, end = decode_cursor(page.next)
        if derived is not None and served is not None:
            with self._lock:
                if self._derive.get(task.eval_id) is None or served != derived:
                    self._derive[task.eval_id] = served == derived
        if reader is not None and served is not None and not page.done:
            start = offset if served == nonce else 0  # a stale cursor restarts at 0
            self._vouched[key] = Vouch(served, mark, start, end,
                                       tuple(str(e.get("uuid")) for e in page.events), types)
        else:
            self._vouched.pop(key, None)
            if page.done:
                self._held.pop(key, None)
            if reader is not None and page.done:
                reader.forget(sample_id, epoch)
        return page

    def _first_page(self, task: TaskInfo, reader: SampleBufferReader, sample_id: str,
                    epoch: int, limit: int, types: frozenset[str] | None,
                    tier: Tier = "content") -> EventPage | None:
        """A sample's first page from the buffer, under the nonce its summary
        row gives, once the control channel confirmed that derivation for this task:
        asking the eval for each sample's first page made a fleet of 1,125 samples wait
        minutes behind an eval whose loop was busy. ``None``: ask the control channel."""
        if not self._derive.get(task.eval_id):
            return None
        key = (task.eval_id, str(sample_id), int(epoch))
        try:
            nonce = reader.first_attempt_nonce(sample_id, epoch, running=False)
            if nonce is None:
                return None
            vouch = Vouch(nonce, reader.max_id(), 0, 0, (), types, checked=True)
            got = reader.read(sample_id, epoch, 0, limit, vouch, types, tier)
        except (sqlite3.Error, ValueError) as exc:
            self._drop(task, exc)
            return None
        if got is None:
            return None
        self._vouched[key] = vouch
        return self._served(task, reader, sample_id, epoch, nonce, 0, got, types)

    def _served(self, task: TaskInfo, reader: SampleBufferReader, sample_id: str,
                epoch: int, nonce: str, offset: int,
                got: BufferPage, types: frozenset[str] | None) -> EventPage:
        """A page the buffer served; the last page of a finished sample ends the read
        (and its view) as the control channel's ``done`` page would."""
        self.buffer_reads += 1
        events = [e for e in got.events if types is None or e.get("event") in types]
        if got.last:
            self.buffer_ends += 1
            self._vouched.pop((task.eval_id, str(sample_id), int(epoch)), None)
            reader.forget(sample_id, epoch)
        return EventPage(events=events, next=encode_cursor(nonce, offset + got.rows),
                         done=got.last)

    def _whole_over_http(self, task: TaskInfo, sample_id: str, epoch: int,
                         since: str | None, types: frozenset[str] | None, limit: int,
                         page: EventPage,
                         kinds: tuple[str, ...] = ("model", "tool")) -> list[dict[str, Any]]:
        """The page's events still cut (the buffer no longer holds them: the sample
        finished and Inspect logged it), read again at the ``full`` tier.

        Only what rules compare needs whole values: completed tool and model events of
        the page. This costs a second request, and a finished model event's full form
        carries its whole input; it is paid once per page, and only for samples that
        ended between two reads (their last events) or before the watch started.
        """
        cut = _cut(page.events, kinds)
        if not cut:
            return page.events
        try:
            full: EventPage = self.inner.events(task, sample_id, epoch, since=since,
                                                types=types, tier="full", limit=limit)
        except SourceError:
            return page.events  # served cut: identity on those events is not claimed
        raw = {str(e.get("uuid")): e for e in full.events
               if isinstance(e, dict) and str(e.get("uuid")) in cut and not e.get("pending")}
        raw = self._from_messages(task, sample_id, epoch, raw)
        return [raw.get(str(e.get("uuid")), e) if isinstance(e, dict) else e
                for e in page.events]

    def _model_whole(self, task: TaskInfo, page: EventPage) -> bool:
        """Whether a page served without a buffer has its model events read again whole:
        a finished task's (they are condensed then), a sample's last, or any while the
        task is young (its buffer is expected within seconds)."""
        if task.finished or page.done:
            return True
        with self._lock:
            first = self._first_seen.get(task.eval_id)
        return first is None or time.monotonic() - first < YOUNG

    def _hold(self, key: tuple[str, str, int]) -> bool:
        """Whether a page of ``key`` whose events stayed cut is held back once more:
        at most :data:`MAX_HOLDS` times per sample, then it is served as it is."""
        with self._lock:
            held = self._held.get(key, 0)
            if held >= MAX_HOLDS:
                return False
            self._held[key] = held + 1
            return True

    def _from_messages(self, task: TaskInfo, sample_id: str, epoch: int,
                       raw: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Full-tier events of a finished sample as they were, from its messages (one
        request, and only when needed): a logged sample's events come condensed, each
        string over 100 characters an ``attachment://`` reference (a tool's code and
        output, a model's completion) and each model input only references. The
        messages come with their text: a reference is resolved by the string in them
        that hashes to its key, and a model event's prompt is the message before its
        own reply. Where a prompt cannot be found it is marked unknown (role ``None``);
        a reference not found stays as it is (as the log would leave a missing one).
        A late watch of a kept eval judged ``attachment://…`` where its log has the
        code (the shortcuts a scan found in such strings were missed)."""
        todo = [e for e in raw.values() if e.get("event") == "model" and PROMPT_KEY not in e
                and ATTACHMENT_PROTOCOL in str((e.get("input") or [{}])[-1])]
        refs = find_refs([{k: v for k, v in e.items() if k not in _NOT_READ}
                          for e in raw.values()])
        if not todo and not refs:
            return raw
        try:
            messages: list[dict[str, Any]] = self.inner.messages(task, sample_id, epoch)
        except (SourceError, AttributeError):
            messages = []
        if refs:
            known = texts_by_hash(messages, refs)
            if len(known) < len(refs):  # said, as a log's missing attachments are
                missing = sorted(refs - known.keys())
                with self._lock:
                    self._gaps.append(SourceNotice(
                        kind="gap", message=f"{task.task} sample {sample_id} epoch {epoch}: "
                        f"{len(missing)} attachment reference(s) of its finished events "
                        "not found in its messages (rules read those values as references): "
                        + ", ".join(missing[:5])))
            if known:
                budget = Expansion(self.max_expansion)
                raw = {u: resolve_attachments(e, known, None, budget)
                       for u, e in raw.items()}
                todo = [raw[str(e.get("uuid"))] for e in todo]
        before = {str(m.get("id")): messages[k - 1] for k, m in enumerate(messages)
                  if k and m.get("role") == "assistant" and m.get("id")}
        for e in todo:
            choices = (e.get("output") or {}).get("choices") or [{}]
            mid = str(((choices[0] or {}).get("message") or {}).get("id"))
            prompt = before.get(mid)
            e[PROMPT_KEY] = prompt if prompt is not None and ATTACHMENT_PROTOCOL not in str(
                prompt.get("content")) else {"role": None, "content": ""}
        return raw

    def close(self) -> None:
        with self._lock:
            readers = [r for r in self._readers.values() if r is not None]
            self._readers.clear()
        for r in readers:
            r.close()
        self.inner.close()
