"""Running evals on other machines, watched through their log directory (``--log-shared``).

``watch --log-dir URL --follow`` reads a log directory (local, or any fsspec URL:
``s3://``, ``gs://``, ``memory://`` …) as a live source: the finished logs, as
:class:`~watcher.sources.logfiles.LogSource` reads them, and for every eval still
running (its log says ``started``) the sample buffer Inspect syncs beside it when it runs
with ``inspect eval --log-shared N`` (:mod:`watcher.sources.filestore`). A fleet writing
its logs to one bucket is then watched from one machine, with no watcher on its hosts.

The stream semantics are the other sources': each event once, in order, in its completed
form, every source's events normalised alike:

- A running sample's page is cut from its buffered transcript: the events in the order
  of their first row, each at its latest version, so an event a segment holds pending is
  served pending (the stream holds it and what follows) until a later segment completes
  it. Attachments are resolved and a model event's prompt is taken from the message pool,
  as the log source does (the same helpers), so rules see what they would post hoc.
- A sample the log holds is read from the log: a finished eval's, and a running eval's
  once Inspect has flushed it. When the eval ends the log takes over the samples the
  buffer was serving, at the same place: the finished log pages a sample's events in the
  same order (checked; where it does not, the cursor is moved to the log's place of the
  last event read, and what was skipped is said as a ``gap``).
- Cursors name the attempt by its first event (a buffer does not say how many attempts
  came before: a retried sample comes back with new segments and a new first event), so
  a retry restarts the stream and the finished log continues the attempt it finished.
  Listing rows of buffered samples count the retries this source saw; a sample met in
  the middle of a retry learns its true attempt from the log (the row then names the
  attempt it continues, ``attempt_nonce``: :class:`~watcher.run.runner.TaskWatcher`
  relabels rather than re-reads).

What only the eval's own host has is not here: a shared buffer is a copy, seconds behind
(the ``--log-shared`` interval), and there is no control channel to act through or to ask
what is in flight. Watch on the host (one watcher per host) to act on findings.

Bad input never stops the watch: a manifest or segment that cannot be read or is not
what Inspect writes is an ``unreadable`` notice (scope ``buffer``), the sample's later
events then come from the log; reads are bounded (:mod:`watcher.limits`).
"""

from __future__ import annotations

import base64
import json
import threading
import time
from typing import Any

from watcher import limits
from watcher.attachments import Expansion
from watcher.events import Tier
from watcher.shard import Shard
from watcher.sources.base import (
    EventPage,
    NotFound,
    SampleListing,
    SampleRow,
    Source,
    SourceBusy,
    SourceError,
    SourceNotice,
    TaskInfo,
    decode_cursor,
    encode_cursor,
    sample_row,
)
from watcher.sources.filestore import (
    BufferedSample,
    BufferUnreadable,
    Entry,
    Manifest,
    SharedBuffer,
    expand_pools,
)
from watcher.sources.logfiles import LogSource
from watcher.sources.logfiles.header import summary_row
from watcher.sources.logfiles.samples import light, resolved

Key = tuple[str, str, int]  # (eval id, sample id, epoch)
NEW = -1  # a sample's first segment while a new attempt has none yet
# a fault must persist this many listings before it is said: a local file being rewritten
# (Inspect rewrites a manifest in place; a running log as it flushes) reads as damaged
FAULT_LISTINGS = 3
# Inspect completes a model event in two writes (``pending`` cleared, then its start and
# ``completed`` times); a sync between them copies the first. Such a version is served as
# still pending until a later segment has its final form, for at most this many segments
# more (an Inspect that never writes ``completed`` is then known, and its model events are
# served as they are)
UNTIMED_SEGMENTS = 2
NO_BUFFER_AFTER = 15.0  # seconds a running eval may show no shared buffer before it is said
LOOK_AGAIN = 5.0  # seconds between looks for the shared buffer of such an eval


def buffer_cursor(nonce: str, offset: int) -> str:
    """A cursor into a buffered transcript: the control channel's format, marked as the
    buffer's (its offsets are checked against the finished log's when the log takes over)."""
    raw = json.dumps({"n": nonce, "i": offset, "b": 1}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode("ascii")


def from_buffer(token: str | None) -> bool:
    """Whether a cursor was issued for a buffered transcript."""
    if not token:
        return False
    try:
        return json.loads(base64.urlsafe_b64decode(token.encode("ascii"))).get("b") == 1
    except (ValueError, TypeError, AttributeError, UnicodeError):
        return False


def attempt_nonce(base: str, first_event: str | None) -> str:
    """One attempt of a sample: its uuid and its first event's."""
    return f"{base}@{first_event or '-'}"


class SharedLogSource(Source):
    """A log directory's finished logs and its running evals' shared sample buffers."""

    name = "shared"
    live = True  # new evals may start, and what a running one's buffer holds grows

    def __init__(self, log_dir: str, *, shard: Shard | None = None,
                 fs_options: dict[str, Any] | None = None) -> None:
        self.log_dir = log_dir
        self.fs_options = fs_options or {}
        self.logs = LogSource(log_dir, shard=shard, fs_options=fs_options)
        self.parallel_reads = self.logs.parallel_reads
        self.max_expansion = limits.EXPANSION_SIZE.value()
        self._lock = threading.Lock()
        self._buffers: dict[str, SharedBuffer] = {}  # eval id -> its buffer, while it runs
        self._running: set[str] = set()  # eval ids whose log says started
        self._views: dict[Key, BufferedSample] = {}
        self._attempts: dict[Key, int] = {}  # new attempts seen after the first
        self._first: dict[Key, int] = {}  # the first segment of the attempt in the buffer
        self._served: dict[Key, str] = {}  # the attempt last served from a buffer
        self._listed: dict[Key, tuple[Any, ...]] = {}  # what the last listing said
        self._faults: dict[str, list[Any]] = {}  # where -> [fault, listings it lasted]
        self._said: set[str] = set()
        self._no_buffer: dict[str, list[float]] = {}  # eval id -> [first seen, last look]
        self._held: dict[str, list[Any]] = {}  # a running log's unreadable notice, held
        self._running_logs: set[str] = set()
        self._in_log: dict[str, set[tuple[str, int]]] = {}  # eval id -> samples its log has
        self._notices: list[SourceNotice] = []
        self._listings = 0  # calls of tasks(): what faults are counted in
        # (eval, uuid) -> how many segments the sample had when it was first seen untimed
        self._untimed: dict[tuple[str, str], int] = {}
        self._no_completed: set[str] = set()  # evals whose model events never say it

    def running(self, eval_id: str) -> bool:
        """Whether the eval was running when its log was last listed."""
        return eval_id in self._running

    # -- tasks ----------------------------------------------------------------------

    def tasks(self) -> list[TaskInfo]:
        infos = self.logs.tasks()
        self._listings += 1
        with self._lock:
            for t in infos:
                if t.finished and t.eval_id in self._buffers:
                    self._buffers.pop(t.eval_id).forget()
            listed = {t.eval_id for t in infos}
            self._running = {t.eval_id for t in infos if not t.finished} | (
                self._running - listed)  # a running log unreadable for now is still running
            was = self._running_logs
            self._running_logs = {str(t.log_location) for t in infos if not t.finished} | {
                log for log in was if log in self.logs.unreadable}
        self._take_log_notices(was | self._running_logs)
        for log, held in list(self._held.items()):
            if log not in self.logs.unreadable:
                del self._held[log]  # it was being written: read now
                continue
            held[1] += 1
            if held[1] >= FAULT_LISTINGS:
                self._notices.append(held[0])
                del self._held[log]
        return infos

    def _take_log_notices(self, running_logs: set[str]) -> None:
        """The log source's notices; a running log that cannot be read is often being
        written, so its ``unreadable`` notice is said only if it lasts
        :data:`FAULT_LISTINGS` listings."""
        for n in self.logs.pop_notices():
            log = n.details.get("log")
            if n.kind == "unreadable" and log in running_logs:
                self._held.setdefault(str(log), [n, 0])
            else:
                self._notices.append(n)

    # -- the buffer of a running eval ----------------------------------------------------

    def _buffer(self, task: TaskInfo) -> SharedBuffer | None:
        if task.finished or not task.log_location:
            return None
        with self._lock:
            buf = self._buffers.get(task.eval_id)
            if buf is None:
                buf = self._buffers[task.eval_id] = SharedBuffer(task.log_location,
                                                                 self.fs_options)
            return buf

    def _manifest(self, task: TaskInfo, buf: SharedBuffer) -> Manifest | None:
        """The buffer's manifest now, or the last one read while a fault lasts (said once
        it has lasted :data:`FAULT_LISTINGS` listings)."""
        where = f"{buf.dir}/manifest.json"
        try:
            manifest = buf.manifest()
        except BufferUnreadable as ex:
            self._fault(where, str(ex), task)
            return buf.cached()
        except SourceError:
            return buf.cached()
        self._faults.pop(where, None)
        if manifest is not None:
            for bad in manifest.bad:
                self._say(f"{where}: {bad}", f"{where}: {bad}; that sample is read from the log "
                          "once Inspect writes it there", task)
        return manifest

    def _fault(self, where: str, reason: str, task: TaskInfo) -> None:
        fault = self._faults.setdefault(where, [reason, 0])
        fault[0] = reason
        fault[1] += 1
        if fault[1] >= FAULT_LISTINGS:
            self._say(where, f"{reason}; running samples are read from the log as Inspect "
                      "flushes them, until the buffer can be read", task)

    def _say(self, key: str, message: str, task: TaskInfo, kind: str = "unreadable") -> None:
        """A notice about the buffer, once per fault."""
        with self._lock:
            if key in self._said:
                return
            self._said.add(key)
            details: dict[str, Any] = {"log": task.log_location}
            if kind == "unreadable":
                details.update(scope="buffer", reason=message)
            self._notices.append(SourceNotice(kind=kind, message=message, details=details))

    def _look_for_buffer(self, task: TaskInfo, buf: SharedBuffer) -> None:
        """Say once when a running eval shares no buffer (started without --log-shared)."""
        if task.eval_id in self._said:
            return
        now = time.monotonic()
        seen = self._no_buffer.setdefault(task.eval_id, [now, 0.0])
        if now - seen[1] < LOOK_AGAIN:
            return
        seen[1] = now
        if buf.exists():
            self._no_buffer.pop(task.eval_id, None)
        elif now - seen[0] >= NO_BUFFER_AFTER:
            self._say(task.eval_id, f"{task.log_location}: the eval is running without a shared "
                      "sample buffer (started without `inspect eval --log-shared`): its samples "
                      "are read as Inspect flushes them to the log", task, kind="transport")

    def _track(self, key: Key, entry: Entry) -> None:
        """Count a new attempt when a sample's first segment changes (a retried sample is
        dropped from the buffer and comes back with new segments)."""
        first = entry.segments[0] if entry.segments else NEW
        with self._lock:
            held = self._first.get(key)
            if held is None or (held == NEW and first != NEW):
                self._first[key] = first
            elif first != held:
                self._attempts[key] = self._attempts.get(key, 0) + 1
                self._first[key] = first
                self._views.pop(key, None)

    # -- samples ----------------------------------------------------------------------

    def samples(self, task: TaskInfo, active_since: float | None = None,
                all_rows: bool = False) -> SampleListing:
        """The log's rows, and for a running eval the buffered samples the log does not
        hold yet. A listing with ``active_since`` has only the rows that changed."""
        listing = self.logs.samples(task)
        rows: dict[tuple[str, int], SampleRow] = {(r.sample_id, r.epoch): r
                                                  for r in listing.samples}
        marks: dict[tuple[str, int], tuple[Any, ...]] = {
            k: ("log", r.status, r.retries) for k, r in rows.items()}
        self._in_log[task.eval_id] = set(rows)
        buf = self._buffer(task)
        if buf is not None:
            manifest = self._manifest(task, buf)
            if manifest is None:
                self._look_for_buffer(task, buf)
            for key, entry in (manifest.samples.items() if manifest else ()):
                k3 = (task.eval_id, *key)
                self._track(k3, entry)
                if key in rows:
                    continue
                row = self._row(task, k3, entry)
                if row is not None:
                    rows[key] = row
                    marks[key] = ("buffer", row.status, row.retries, entry.segments[-1:])
        for key, row in rows.items():
            k3 = (task.eval_id, *key)
            if marks[key][0] == "log" and k3 in self._served and (
                    row.retries > self._attempts.get(k3, 0)):
                nonce = self._log_nonce(task, key)
                if nonce is not None:
                    row.raw["attempt_nonce"] = nonce
        out = sorted(rows.values(), key=lambda r: (r.raw.get("started_at") or 0.0,
                                                  r.sample_id, r.epoch))
        if active_since is not None:
            out = [r for r in out if self._listed.get((task.eval_id, r.sample_id, r.epoch))
                   != marks[(r.sample_id, r.epoch)]]
        for key, mark in marks.items():
            self._listed[(task.eval_id, *key)] = mark
        return SampleListing(as_of=time.time(), samples=out)

    def _summary(self, task: TaskInfo, key: Key, entry: Entry) -> dict[str, Any] | None:
        """The entry's summary as a listing row; ``None`` (said once) if its fields are
        not of the types Inspect writes."""
        try:
            return summary_row(entry.summary)
        except Exception as ex:  # noqa: BLE001 - a summary of the wrong shape
            self._say(f"{key}:summary", f"{task.log_location} shared buffer: sample "
                      f"{entry.sample_id} epoch {entry.epoch}: summary not readable "
                      f"({type(ex).__name__}: {ex}); the sample is read from the log once "
                      "Inspect writes it there", task)
            return None

    def _row(self, task: TaskInfo, key: Key, entry: Entry) -> SampleRow | None:
        raw = self._summary(task, key, entry)
        if raw is None:
            return None
        told = raw.get("retries")
        raw["retries"] = max(self._attempts.get(key, 0),
                             told if type(told) is int and told > 0 else 0)
        return sample_row(raw)

    def _log_nonce(self, task: TaskInfo, key: tuple[str, int]) -> str | None:
        try:
            parsed = self.logs.parsed_sample(task, key[0], key[1])
        except SourceError:
            return None
        return attempt_nonce(parsed.nonce.rsplit(":", 1)[0],
                             str(parsed.events[0].get("uuid")) if parsed.events else None)

    # -- events -----------------------------------------------------------------------

    def events(self, task: TaskInfo, sample_id: str, epoch: int, *, since: str | None,
               types: frozenset[str] | None, tier: Tier, limit: int = 500) -> EventPage:
        """A page of raw events after ``since``: from the log if it holds the sample, else
        from the running eval's shared buffer."""
        key: Key = (task.eval_id, str(sample_id), int(epoch))
        listed = self._in_log.get(task.eval_id)
        if (key[1:] in listed if listed is not None and not task.finished
                else self.logs.has_sample(task, sample_id, epoch)):
            return self._from_log(task, key, since, types, tier, limit)
        if task.finished:
            with self._lock:
                view = self._views.pop(key, None)
            if view is None:
                raise NotFound(f"{task.log_location}: no sample {sample_id} epoch {epoch}")
            self._notices.append(SourceNotice(
                kind="sample_abandoned", message=f"{task.log_location}: sample {sample_id} "
                f"epoch {epoch} was read from the shared buffer, and the finished log does "
                "not hold it: what the buffer held is all the rules saw"))
            return EventPage(events=[], next=since, done=True)
        buf = self._buffer(task)
        manifest = buf.cached() if buf is not None else None
        if buf is not None and manifest is None:
            manifest = self._manifest(task, buf)
        entry = manifest.samples.get(key[1:]) if manifest is not None else None
        if buf is None or entry is None:
            # not synced yet, or between the buffer and the log (flushed, not yet listed)
            return EventPage(events=[], next=since, done=False)
        self._track(key, entry)
        view = self._view(task, buf, key, entry)
        if view is None or not view.order:
            return EventPage(events=[], next=since, done=False)
        base = entry.summary.get("uuid") or f"{sample_id}:{epoch}"
        mine = attempt_nonce(str(base), view.first_uuid)
        nonce, offset = decode_cursor(since)
        if nonce != mine:
            offset = 0  # another attempt (or the first read): from the start
        if offset < view.base:  # read again from before what was kept: from the segments
            with self._lock:
                self._views.pop(key, None)
            view = self._view(task, buf, key, entry)
            if view is None:
                return EventPage(events=[], next=since, done=False)
        raws = view.events(offset, max(1, limit))
        offset = max(offset, view.base)
        end = offset + len(raws)
        wanted = None if types is None or types & {"all", "*"} else types
        out = self._resolve([e for e in raws if wanted is None or e.get("event") in wanted],
                            view, tier, task, key)
        summary = self._summary(task, key, entry)
        status = summary["status"] if summary is not None else "unknown"  # the log ends it
        # done when the buffer says the sample ended and every segment it names was read
        # (one missing for now may hold the last events)
        done = status in ("completed", "error", "cancelled") and end >= len(view.order) and (
            not view.broken) and set(entry.segments) <= set(view.segments)
        if not done:
            out = self._untimed_pending(task, out, len(view.segments))
        with self._lock:
            self._served[key] = mine
            if done:
                self._views.pop(key, None)
        return EventPage(events=out, next=buffer_cursor(mine, end), done=done)

    def _untimed_pending(self, task: TaskInfo, events: list[dict[str, Any]],
                         segments: int) -> list[dict[str, Any]]:
        """``events`` with a completed model event that lacks its ``completed`` time marked
        pending: the buffer was copied between Inspect's two writes of its completion, and
        a later segment has its final form (the log's: its start time, ``completed``).
        ``segments``: how many segments of the sample have been read."""
        if task.eval_id in self._no_completed:
            return events
        out = events
        for i, e in enumerate(events):
            if e.get("event") != "model" or e.get("pending") or e.get("completed"):
                continue
            k = (task.eval_id, str(e.get("uuid")))
            first = self._untimed.setdefault(k, segments)
            if segments - first >= UNTIMED_SEGMENTS:
                self._no_completed.add(task.eval_id)
                return out
            if out is events:
                out = list(events)
            out[i] = {**e, "pending": True}
        return out

    def _view(self, task: TaskInfo, buf: SharedBuffer, key: Key,
              entry: Entry) -> BufferedSample | None:
        """The attempt's transcript so far, with the segments added since the last read."""
        if not entry.segments:
            return None
        with self._lock:
            view = self._views.get(key)
            if view is None or view.first_segment != entry.segments[0]:
                view = self._views[key] = BufferedSample(entry.segments[0])
        if view.broken:
            return view
        done = set(view.segments)
        for segment in entry.segments:
            if segment in done:
                continue
            try:
                rows = buf.rows(segment, key[1], key[2])
            except BufferUnreadable as ex:
                view.broken = True
                self._say(f"{buf.dir}/segment.{segment}.zip", f"{ex}; sample {key[1]} epoch "
                          f"{key[2]} is read on from the log once Inspect writes it there", task)
                break
            except SourceBusy:
                break  # read again next time
            if rows is None:
                # the eval ended and took its buffer (the log takes over), or the segment
                # vanished from a buffer that still names it
                if self._segment_gone(task, buf, key, segment):
                    view.broken = True
                break
            self._faults.pop(f"{buf.dir}/segment.{segment}.zip", None)
            view.add(segment, rows)
        return view

    def _segment_gone(self, task: TaskInfo, buf: SharedBuffer, key: Key, segment: int) -> bool:
        """Whether a segment the manifest names is missing from a buffer that is still
        there (damage, not the eval's end), for :data:`FAULT_LISTINGS` reads in a row (a
        copy may write the manifest before the segment): said once, and the sample's later
        events then come from the log."""
        try:
            manifest = buf.manifest()
        except SourceError:
            return False
        entry = manifest.samples.get(key[1:]) if manifest is not None else None
        where = f"{buf.dir}/segment.{segment}.zip"
        if entry is None or segment not in entry.segments:
            self._faults.pop(where, None)
            return False  # the eval ended, or the sample left the buffer: the log has it
        fault = self._faults.setdefault(where, ["gone", 0, None])
        if fault[2] != self._listings:  # counted once per listing (a poll reads pages)
            fault[1] += 1
            fault[2] = self._listings
        if fault[1] < FAULT_LISTINGS:
            return False
        self._say(where, f"{where}: named by the manifest but not there (removed or never "
                  f"written); sample {key[1]} epoch {key[2]} is read on from the log once "
                  "Inspect writes it there", task)
        return True

    def _resolve(self, raws: list[dict[str, Any]], view: BufferedSample, tier: Tier,
                 task: TaskInfo, key: Key) -> list[dict[str, Any]]:
        """Attachments resolved (each event's expansion bounded) and, below the ``full``
        tier, a model event's prompt from the pool, as the log source pages them."""
        unknown: set[str] = set()
        cut = 0
        out = []
        budget = view.budget  # one for the sample attempt, over all its pages
        if budget is None:
            budget = view.budget = Expansion(self.max_expansion)
        for e in raws:
            before = budget.exceeded
            if tier == "full":
                out.append(resolved(expand_pools(e, view.pool, view.calls), view.attachments,
                                    unknown, budget))
            else:
                out.append(light(e, view.pool, view.attachments, unknown, budget))
            cut += budget.exceeded > before
        where = f"{task.log_location} shared buffer: sample {key[1]} epoch {key[2]}"
        if cut:
            mb = self.max_expansion / limits.MB
            self._notices.append(SourceNotice(
                kind="limit", message=f"{where}: attachment references expand past "
                f"{mb:g} MB for the sample; those of {cut} event(s) are left unresolved "
                f"({limits.EXPANSION_SIZE.env} raises the limit)",
                details={"limit": limits.EXPANSION_SIZE.env, "events": cut}))
        if unknown:
            self._notices.append(SourceNotice(
                kind="gap", message=f"{where}: {len(unknown)} attachment reference(s) not in "
                "the buffer: " + ", ".join(sorted(unknown)[:5])))
        return out

    def _from_log(self, task: TaskInfo, key: Key, since: str | None,
                  types: frozenset[str] | None, tier: Tier, limit: int) -> EventPage:
        """A page from the log; a cursor the buffer issued for the same attempt continues
        at the log's place of the last event it read."""
        parsed = self.logs.parsed_sample(task, key[1], key[2], full=tier == "full",
                                         types=types if tier == "content" else None)
        mine = attempt_nonce(parsed.nonce.rsplit(":", 1)[0],
                             str(parsed.events[0].get("uuid")) if parsed.events else None)
        nonce, offset = decode_cursor(since)
        if nonce != mine:
            offset = 0
        elif from_buffer(since):
            offset = self._takeover(task, key, parsed.events, offset)
        page = self.logs.events(task, key[1], key[2], since=encode_cursor(parsed.nonce, offset),
                                types=types, tier=tier, limit=limit)
        _, end = decode_cursor(page.next)
        if page.done:
            with self._lock:
                self._views.pop(key, None)
        return EventPage(events=page.events, next=encode_cursor(mine, end), done=page.done,
                         missed=page.missed)

    def _takeover(self, task: TaskInfo, key: Key, events: list[dict[str, Any]],
                  offset: int) -> int:
        """The log's offset for a buffer cursor at ``offset`` (the same, where the log
        orders the sample's events as the buffer did)."""
        view = self._views.get(key)
        if view is None or offset == 0:
            return offset
        logged = [str(e.get("uuid")) for e in events]
        read = view.order[:offset]
        if logged[:offset] == read:
            return offset
        at = {u: i for i, u in enumerate(logged)}
        hits = [at[u] for u in read if u in at]
        to = max(hits) + 1 if hits else 0
        seen = set(read)
        skipped = sum(u not in seen for u in logged[:to])
        self._notices.append(SourceNotice(
            kind="gap", message=f"{task.log_location}: sample {key[1]} epoch {key[2]}: the "
            "finished log orders its events differently from the shared buffer; read on from "
            f"the log's place of the last event read ({skipped} event(s) before it not seen)",
            details={"missed": skipped}))
        return to

    # -- the rest -----------------------------------------------------------------------

    def pop_notices(self) -> list[SourceNotice]:
        """What was noticed since the last call: unreadable logs, manifests and segments,
        evals without a shared buffer, unresolvable or over-limit attachments."""
        self._take_log_notices(self._running_logs)
        with self._lock:
            notices, self._notices = self._notices, []
        return notices

    def close(self) -> None:
        with self._lock:
            for buf in self._buffers.values():
                buf.forget()
            self._buffers.clear()
            self._views.clear()
        self.logs.close()
