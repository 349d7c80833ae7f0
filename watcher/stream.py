"""The cursored pull loop for one sample: every event once, in order, completed.

The control channel's cursor moves past an event the moment it is served, even
when the event is still ``pending`` (a tool call or model generation in flight,
later updated *in place* at the same offset). So the stream remembers the
cursor of the page where the oldest still-pending event was served and
re-reads from there on the next poll, skipping what it already delivered, until
that event completes. Rules only ever see completed events, exactly once; what
is still in flight is exposed (``in_flight``) for stall detection.

A retried sample starts a new event sequence under a new cursor nonce: when the
listing's retry count rises (or the server's cursor nonce changes) the stream
starts over from the beginning and labels what follows with the new attempt.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from watcher.events import Event, Tier, normalise
from watcher.sources.base import EventPage, Source, SourceError, TaskInfo, decode_cursor

# Stop re-reading for a pending event once this many events follow it: an
# event that stays pending that long is reported as a gap, not re-walked forever.
MAX_PENDING_WINDOW = 5000
# Pages read per poll before yielding to other samples.
MAX_PAGES_PER_POLL = 20


@dataclass
class StreamItem:
    """What one poll produced: completed events and notices, in order."""

    events: list[Event] = field(default_factory=list)
    notices: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    new_attempt: int | None = None
    attempt_boundary: int = 0  # events before this index belong to the previous attempt
    done: bool = False


def cursor_nonce(cursor: str | None) -> str | None:
    """Best-effort peek at the attempt nonce inside a control-channel cursor.

    Cursors are opaque; this is only used to notice a new attempt early. If the
    format ever changes it returns ``None`` and the listing's retry count still
    catches the new attempt.
    """
    return decode_cursor(cursor)[0]


def _key(event: dict[str, Any]) -> str:
    uuid = event.get("uuid")
    if uuid:
        return str(uuid)
    kind = event.get("event") or event.get("type")
    return f"{kind}|{event.get('timestamp')}|{event.get('span_id')}"


class SampleStream:
    """Pull-loop state for one sample (all attempts)."""

    def __init__(self, task: TaskInfo, sample_id: str, epoch: int, *,
                 types: frozenset[str] | None, tier: Tier, page_limit: int = 500) -> None:
        self.task = task
        self.sample_id = sample_id
        self.epoch = epoch
        self.types = types
        self.tier = tier
        self.page_limit = page_limit
        self.attempt = 1
        self.cursor: str | None = None
        self.nonce: str | None = None
        # the nonces it saw replaced by a new one (not those a listing's retry count
        # moved it past: a stream that met a sample on its second attempt took that
        # attempt's nonce as the first's, and must read it again as the second)
        self._left: frozenset[str] = frozenset()
        self.done = False
        # where to re-read from while an event is pending: (cursor,), cursor may be None
        self._reread: tuple[str | None] | None = None
        self._seen: OrderedDict[str, bool] = OrderedDict()  # key -> delivered complete
        self.in_flight: dict[str, Event] = {}
        self.delivered = 0
        self.last_event_at: float | None = None
        self.last_change_at: float = time.time()
        self.polls_without_change = 0
        self.last_event: Event | None = None
        self._observed = 0
        # the last poll stopped at its page budget with more to read: poll again soon
        self.behind = False

    @property
    def resume_at(self) -> str | None:
        """The cursor the next poll reads from."""
        return self._reread[0] if self._reread is not None else self.cursor

    # -- attempts ------------------------------------------------------------

    def start_attempt(self, attempt: int) -> None:
        """A new attempt: its events are a new sequence from the beginning."""
        self.attempt = attempt
        self.cursor = None
        self.nonce = None
        self._reread = None
        self._seen.clear()
        self.in_flight.clear()
        self.done = False
        self.last_event = None

    # -- polling ---------------------------------------------------------------

    def poll(self, source: Source, now: float | None = None) -> StreamItem:
        """Read until caught up (bounded), returning newly completed events."""
        item = StreamItem()
        page_start = self._reread[0] if self._reread is not None else self.cursor
        reread: tuple[str | None] | None = None
        observed = held = 0
        self.behind = True  # until a page shows we caught up
        for pages in range(MAX_PAGES_PER_POLL):
            read_from = page_start
            try:
                page: EventPage = source.events(
                    self.task, self.sample_id, self.epoch, since=page_start, types=self.types,
                    tier=self.tier, limit=self.page_limit,
                )
            except SourceError:
                if not pages:
                    raise
                # keep what earlier pages delivered (already marked seen); the next
                # poll resumes from here and meets the failure again if it persists
                break
            nonce = cursor_nonce(page.next)
            if nonce is not None and nonce in self._left:
                # a page of an attempt this stream has left behind (attempts never go
                # back): not a new attempt, and its events are not this attempt's
                self.behind = False
                break
            if nonce is not None and self.nonce is not None and nonce != self.nonce:
                # a stale cursor: the server restarted us at offset 0 of a new attempt
                item.attempt_boundary = len(item.events)
                self._left = self._left | {self.nonce}
                self.start_attempt(self.attempt + 1)
                item.new_attempt = self.attempt
                reread = None
                observed = held = 0
                # the page was served from the new attempt's start: a pending event on
                # it is re-read from there, never with the old attempt's cursor (which
                # a finished sample's server answers under the old nonce)
                page_start = None
            if nonce is not None:
                self.nonce = nonce
            if page.missed:
                item.notices.append(("gap", f"the server reports {page.missed} events missed",
                                     {"missed": page.missed}))
            # Delivered events are remembered (``_seen``) only while a page may be read
            # again: once an event of it is pending. Until then (the common case: a log,
            # a caught-up live sample) each event costs no bookkeeping; the events this
            # page delivered before its first pending one are marked when it appears.
            tracking = self._reread is not None or bool(self._seen) or bool(self.in_flight)
            delivered: list[dict[str, Any]] = []
            for raw in page.events:
                if not tracking:
                    if not raw.get("pending"):
                        observed += 1
                        event = normalise(raw, self.tier)
                        event["attempt"] = self.attempt
                        item.events.append(event)
                        delivered.append(raw)
                        continue
                    tracking = True
                    for done_raw in delivered:
                        self._seen[_key(done_raw)] = True
                k = _key(raw)
                if self._seen.get(k):
                    continue
                observed += 1
                if raw.get("pending") or held:
                    # hold everything after the first pending event so rules see the
                    # transcript in order; it is re-read until that event completes
                    if reread is None:
                        reread = (page_start,)
                    if raw.get("pending"):
                        self.in_flight[k] = normalise(raw, self.tier)
                        self._seen.setdefault(k, False)
                    held += 1
                    continue
                event = normalise(raw, self.tier)
                event["attempt"] = self.attempt
                self.in_flight.pop(k, None)
                self._seen[k] = True
                item.events.append(event)
            advanced = page.next is not None and page.next != page_start
            if page.next is not None:
                page_start = page.next
            if page.done:
                item.done = True
                self.behind = False
                break
            if not advanced or self._short(read_from, page.next):
                self.behind = False
                break
        self.cursor = page_start
        self._reread = reread
        if held > MAX_PENDING_WINDOW:
            self._give_up_pending(item)
        changed = bool(item.events) or observed > self._observed
        self._observed = observed if self._reread is not None else 0
        if not self.in_flight and self._reread is None:
            self._seen.clear()
        now = now if now is not None else time.time()
        if item.done:
            self.done = True
            for k, ev in list(self.in_flight.items()):
                item.notices.append(("pending_at_end",
                                     f"{ev.get('type')} event still pending when the sample ended",
                                     {"uuid": k, "function": ev.get("function")}))
            self.in_flight.clear()
            self._reread = None
        if item.events:
            self.delivered += len(item.events)
            self.last_event = item.events[-1]
            ts = item.events[-1].get("timestamp")
            self.last_event_at = ts if isinstance(ts, float) else now
        if changed:
            self.last_change_at = now
            self.polls_without_change = 0
        else:
            self.polls_without_change += 1
        return item

    def _short(self, start: str | None, nxt: str | None) -> bool:
        """The page scanned fewer events than its limit: it reached the end of what the
        transcript held when it was read, so reading on would only find the events
        written since (the next poll's). Known only where the cursors can be peeked at
        (see :func:`cursor_nonce`); otherwise the stream reads on until a page is empty.
        Saves a request per sample per poll, half of a live watch's reads."""
        end_nonce, end = decode_cursor(nxt)
        if end_nonce is None:
            return False
        start_nonce, begin = decode_cursor(start) if start is not None else (end_nonce, 0)
        if start_nonce != end_nonce:  # a new attempt: the server restarted at offset 0
            begin = 0
        return end - begin < self.page_limit

    def _give_up_pending(self, item: StreamItem) -> None:
        """Too many events wait behind a pending one: report a gap and move on."""
        for k, ev in list(self.in_flight.items()):
            self._seen[k] = True
            item.notices.append(("gap", f"a {ev.get('type')} event stayed pending behind more "
                                 f"than {MAX_PENDING_WINDOW} later events; its completion "
                                 "will not be seen", {"uuid": k, "type": ev.get("type")}))
        self.in_flight.clear()
