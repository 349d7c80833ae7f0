"""A logged sample's JSON decoded down to what the rules read, for the content tier.

A scan decoded each sample whole with orjson and then read a dozen fields of its model
and tool events. Most of the bytes are never read: the sample's ``messages`` (a second
copy of the conversation), a model event's tool definitions, configuration and raw API
call, ``state`` and ``store`` changes, spans. msgspec decodes the sample into a record
and its events into dicts that hold only what is read; everything else is skipped while
parsing, never built (``benchmarks/bench_decode.py``: about two thirds of orjson's CPU
on the 375 SWE-bench runs). A sample buffer's event rows are decoded the same way, one
event at a time (:func:`parse_event_lean`).

Exactness: a model or tool event is a dict of the read fields it holds (a field
absent stays absent, ``null`` stays ``None``), which is all
:func:`~watcher.sources.logfiles.project.project` reads of an event it makes in one
pass. An event it would make the general way instead (``light``, which copies every
field), and an event of another type a rule reads, is decoded whole from its own text,
with orjson as before: this module only ever answers with events equal to the whole
decode's for every field that is read. Events of types no rule reads keep their type
and uuid (paging counts them; a shared buffer's takeover matches uuids).

This module is interpreted on purpose (mypyc does not compile msgspec records).
"""

from __future__ import annotations

from typing import Any, TypedDict

import msgspec
from orjson import loads

from watcher.sources.logfiles.project import plain_event
from watcher.sources.logfiles.samples import ParsedSample, attempt_nonce

# the event types decoded down to their fields here; every other type a rule reads
# sends the sample to the whole decode
LEAN_TYPES = frozenset({"model", "tool"})


class _Event(TypedDict, total=False):
    """What the content tier reads of a model or tool event (project.py).

    A TypedDict, so msgspec builds each event's dict itself: only these keys, those the
    event holds, in the event's order (absent stays absent, ``null`` is ``None``), every
    other key skipped while parsing. Typed records rebuilt as dicts took a third more
    CPU (the 375 SWE-bench runs' samples: 0.34 s against 0.26 s)."""

    event: Any
    uuid: Any
    span_id: Any
    timestamp: Any
    completed: Any
    pending: Any
    error: Any
    # model
    model: Any
    output: Any
    input: Any
    input_refs: Any
    # tool
    id: Any
    function: Any
    arguments: Any
    result: Any
    # present only in events that project() does not make in one pass
    has_error: Any
    _watch_prompt: Any  # (PROMPT_KEY: tests/test_lean.py checks)


class _Sample(msgspec.Struct):
    """The sample fields a scan reads (``messages``, ``output``, ``scores``... skipped)."""

    events: list[_Event]
    uuid: Any = None
    id: Any = None
    error_retries: Any = None
    attachments: Any = None
    events_data: Any = None


_decode = msgspec.json.Decoder(_Sample).decode
_decode_event = msgspec.json.Decoder(_Event).decode


class _RawEvents(msgspec.Struct):
    """The sample's events as their JSON text, for those read whole."""

    events: list[msgspec.Raw]


_decode_raw = msgspec.json.Decoder(_RawEvents).decode


def parse_sample_lean(blob: bytes, epoch: int, types: frozenset[str]) -> ParsedSample | None:
    """The sample in ``blob`` (its stored JSON) for pages of event ``types`` at the
    content tier, or ``None`` where the records do not take its shape (an event that is
    not an object, ``events`` not a list, not JSON): the whole decode then answers.

    An event of another type ``types`` names, and a model or tool event ``project``
    makes the general way (it copies every field), is decoded whole from its own text:
    a second pass over the sample that skips every other event, taken only for samples
    holding such an event."""
    try:
        sample = _decode(blob)
    except Exception:  # noqa: BLE001 - any refusal (a shape, nesting): the whole decode says
        return None
    others = types - LEAN_TYPES
    events: list[dict[str, Any]] = []
    append = events.append
    whole: list[int] = []  # the positions of the events read whole
    for ev in sample.events:
        e: dict[str, Any] = ev  # type: ignore[assignment]  # (a TypedDict is a dict)
        etype = e.get("event")
        if etype in LEAN_TYPES:
            if not plain_event(e, etype):
                whole.append(len(events))
            append(e)
        elif etype in others:
            whole.append(len(events))
            append({})
        else:  # not read: what paging and uuid matching need
            stub: dict[str, Any] = {}
            if "event" in e:
                stub["event"] = etype
            if "uuid" in e:
                stub["uuid"] = e["uuid"]
            append(stub)
    if whole and not _read_whole(blob, events, whole):
        return None
    pools = sample.events_data
    pool = pools.get("messages") if isinstance(pools, dict) else None
    nonce = attempt_nonce(sample.uuid, sample.id, epoch, len(sample.error_retries or []))
    return ParsedSample(nonce=nonce, events=events,
                        attachments=dict(sample.attachments or {}),
                        pool=pool if isinstance(pool, list) else [])


def _read_whole(blob: bytes, events: list[dict[str, Any]], at: list[int]) -> bool:
    """Put the events at positions ``at`` in ``events`` decoded whole (orjson, as the
    whole decode does); ``False`` if the text does not give them so."""
    try:
        raws = _decode_raw(blob).events
        if len(raws) != len(events):
            return False
        for i in at:
            e = loads(memoryview(raws[i]))
            if not isinstance(e, dict):
                return False
            events[i] = e
    except Exception:  # noqa: BLE001 - as the first pass: the whole decode says
        return False
    return True


def parse_event_lean(text: str | bytes) -> dict[str, Any] | None:
    """One event's JSON (a sample buffer's row) decoded down to what the content tier
    reads, where :func:`~watcher.sources.logfiles.project.project` makes the event from
    those fields alone (a plain model or tool event); ``None`` for any other event or
    text, which is then decoded whole. (A model event's tool list and settings, a tool
    event's view and nested events are skipped: half the decode's CPU on the shared
    corpus's model and tool events.)"""
    try:
        e: dict[str, Any] = _decode_event(text)  # type: ignore[assignment]
    except Exception:  # noqa: BLE001 - any refusal (not an object, not JSON): decode whole
        return None
    etype = e.get("event")
    return e if etype in LEAN_TYPES and plain_event(e, etype) else None
