"""A retried sample's stream: each attempt counted once, whatever order pages come in.

CI caught a live watch labelling a once-retried sample attempt 4 (about one run in
seven on a loaded machine, tests/test_watch_e2e.py). The server restarted a stale
cursor at the new attempt's start on a page holding a pending event; the stream
re-read that page with the old attempt's cursor, which a finished sample's server
answered under the old nonce (a third attempt), and the log then under the new one
(a fourth). The order is a race of the real eval; the source here plays it exactly.
"""

from __future__ import annotations

from typing import Any

from tests.fakeserver import model_event, tool_event
from watcher.sources.base import EventPage, TaskInfo, decode_cursor, encode_cursor
from watcher.stream import SampleStream

OLD, NEW = "uuid:0", "uuid:1"


class ScriptedPages:
    """Answers each read from ``pages`` by the cursor's nonce (``None``: a first read)."""

    def __init__(self) -> None:
        self.pages: dict[str | None, EventPage] = {}
        self.reads: list[str | None] = []

    def events(self, task: TaskInfo, sample_id: str, epoch: int, *, since: str | None,
               **_: Any) -> EventPage:
        nonce = decode_cursor(since)[0]
        self.reads.append(nonce)
        return self.pages[nonce]


def _stream() -> SampleStream:
    task = TaskInfo(eval_id="e", task="t", task_id="t", model="m")
    return SampleStream(task, "s1", 1, types=None, tier="content", page_limit=50)


def test_a_pending_event_on_a_new_attempts_first_page_is_reread_from_its_start() -> None:
    src = ScriptedPages()
    stream = _stream()
    first = [model_event(1), tool_event(2, "ls")]
    src.pages[None] = EventPage(first, encode_cursor(OLD, 2), False)
    assert [e["uuid"] for e in stream.poll(src).events] == ["ev-1", "ev-2"]
    # the retry: the old cursor is restarted at the new attempt's start, its last
    # event still pending
    retried = [model_event(11), tool_event(12, "ls", pending=True)]
    src.pages[OLD] = EventPage(retried, encode_cursor(NEW, 2), False)
    item = stream.poll(src)
    assert item.new_attempt == 2 and stream.attempt == 2
    assert [e["uuid"] for e in item.events] == ["ev-11"] and "ev-12" in stream.in_flight
    # the sample finishes; the server answers the old cursor under the old nonce
    src.pages[OLD] = EventPage([], encode_cursor(OLD, 2), False)
    src.pages[None] = EventPage([model_event(11), tool_event(12, "ls")],
                                encode_cursor(NEW, 2), True)
    item = stream.poll(src)
    assert src.reads[-1] is None  # re-read from the new attempt's start
    assert item.new_attempt is None and stream.attempt == 2
    assert [e["uuid"] for e in item.events] == ["ev-12"] and stream.done


def test_a_page_of_an_attempt_left_behind_is_not_a_new_attempt() -> None:
    src = ScriptedPages()
    stream = _stream()
    src.pages[None] = EventPage([model_event(1)], encode_cursor(OLD, 1), False)
    stream.poll(src)
    src.pages[OLD] = EventPage([model_event(11)], encode_cursor(NEW, 1), False)
    assert stream.poll(src).new_attempt == 2
    # a late answer under the first attempt's nonce: neither an attempt nor its events
    src.pages[NEW] = EventPage([model_event(1)], encode_cursor(OLD, 1), False)
    item = stream.poll(src)
    assert item.new_attempt is None and item.events == [] and stream.attempt == 2
    # the listing's retry count moves a stream on without a nonce it left: one that met
    # a sample on its second attempt took that attempt's nonce for the first's, and the
    # second is read again from its start under it
    stream.start_attempt(3)
    src.pages[None] = EventPage([model_event(11)], encode_cursor(NEW, 1), False)
    item = stream.poll(src)
    assert [e["uuid"] for e in item.events] == ["ev-11"] and stream.attempt == 3
