"""sources/logfiles/lean.py: a sample decoded down to what the rules read pages exactly as
the whole decode, or refuses.

Over every sample of the shared corpus (real agents' runs, older formats,
``attachment://`` references): where it serves, each model and tool event projects to
the same content-tier event as the whole decode's, every other event keeps its type and
uuid, every event read whole is the whole decode's, and the sample's nonce, attachments
and message pool are the same. Then shapes the corpus lacks, and the log source's use of
it (pages the same as the whole decode's, one decode per sample, a log it keeps refusing
decoded whole).
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import orjson
import pytest
import zipfile_zstd  # noqa: F401  (the .eval zips are zstd-compressed)

from tests.corpus import CORPUS
from watcher.events import PROMPT_KEY
from watcher.sources.logfiles import lean as lean_module
from watcher.sources.logfiles import source as source_module
from watcher.sources.logfiles.lean import parse_sample_lean
from watcher.sources.logfiles.project import plain_event, project
from watcher.sources.logfiles.samples import ParsedSample, parse_sample_json
from watcher.sources.logfiles.source import LogSource

LOGS = sorted(CORPUS.glob("*.eval"))
# the types the built-in pack reads (Engine.event_types)
PACK = frozenset({"error", "sentinel", "sandbox", "model", "sample_limit", "tool"})


def _projected(parsed: ParsedSample, e: dict[str, Any]) -> tuple[Any, set[str]]:
    unknown: set[str] = set()
    return project(e, "content", parsed.pool, parsed.attachments, unknown), unknown


def _samples(log: Path) -> list[tuple[str, bytes]]:
    z = zipfile.ZipFile(log)
    return [(n, z.read(n)) for n in z.namelist() if n.startswith("samples/")]


@pytest.mark.parametrize("log", LOGS, ids=[p.name for p in LOGS])
def test_serves_what_the_whole_decode_does(log: Path) -> None:
    whole_read = 0
    for name, blob in _samples(log):
        whole = parse_sample_json(orjson.loads(blob), 1)
        lean = parse_sample_lean(blob, 1, PACK)
        assert lean is not None, name  # every real sample takes the records' shape
        assert (lean.nonce, lean.attachments, lean.pool) == (
            whole.nonce, whole.attachments, whole.pool), name
        assert len(lean.events) == len(whole.events), name
        for mine, theirs in zip(lean.events, whole.events, strict=True):
            etype = theirs.get("event")
            assert (mine.get("event"), mine.get("uuid")) == (etype, theirs.get("uuid")), name
            if etype in lean_module.LEAN_TYPES and plain_event(theirs, etype):
                assert _projected(lean, mine) == _projected(whole, theirs), (
                    name, theirs.get("uuid"))
            elif etype in PACK:  # read whole, as the whole decode reads it
                assert mine == theirs, (name, theirs.get("uuid"))
                whole_read += 1
    if log.name == "metr-oxdna-claude-opus.eval":
        assert whole_read > 0  # its sandbox events


def _blob(*events: Any, **fields: Any) -> bytes:
    return orjson.dumps({"id": "s1", "epoch": 1, "uuid": "u", "messages": [{"x": 1}],
                         "attachments": {"a" * 32: "text"}, "events": list(events),
                         **fields})


MODEL = {"event": "model", "uuid": "m1", "timestamp": "2026-01-01T00:00:00+00:00",
         "model": "m", "input": [], "tools": [{"name": "bash"}], "config": {},
         "output": {"choices": [{"message": {"role": "assistant",
                                             "content": "attachment://" + "a" * 32}}],
                    "completion": "", "usage": {"total_tokens": 5}}}
TOOL = {"event": "tool", "uuid": "t1", "id": "c1", "function": "bash",
        "arguments": {"cmd": "ls"}, "result": "ok", "events": [], "error": None}


def test_skips_what_is_not_read_and_keeps_absent_apart_from_null() -> None:
    span = {"event": "span_begin", "uuid": "s", "name": "x", "span_id": "q"}
    parsed = parse_sample_lean(_blob(span, MODEL, TOOL), 1, PACK)
    assert parsed is not None
    assert parsed.events[0] == {"event": "span_begin", "uuid": "s"}
    assert "tools" not in parsed.events[1] and "config" not in parsed.events[1]
    assert parsed.events[1]["input"] == [] and "pending" not in parsed.events[1]
    assert parsed.events[2]["error"] is None and "span_id" not in parsed.events[2]
    whole = parse_sample_json(orjson.loads(_blob(span, MODEL, TOOL)), 1)
    for i in (1, 2):
        assert _projected(parsed, parsed.events[i]) == _projected(whole, whole.events[i])


@pytest.mark.parametrize("event", [
    {**MODEL, "has_error": True},  # a compact event: project() reads it the general way
    {**TOOL, "_watch_prompt": {"role": "user"}},
    {k: v for k, v in MODEL.items() if k != "output"},  # no output: not plain
    {k: v for k, v in {**TOOL, "arguments": "ls"}.items() if k != "result"},
    {"event": "sample_limit", "uuid": "l", "type": "message", "limit": 5, "extra": [1]},
], ids=["has_error", "prompt-key", "no-output", "odd-arguments", "another-read-type"])
def test_reads_whole_what_only_the_whole_decode_answers(event: dict[str, Any]) -> None:
    parsed = parse_sample_lean(_blob(TOOL, event, MODEL), 1, PACK)
    assert parsed is not None
    assert parsed.events[1] == event  # every field, as written
    whole = parse_sample_json(orjson.loads(_blob(TOOL, event, MODEL)), 1)
    assert _projected(parsed, parsed.events[0]) == _projected(whole, whole.events[0])
    assert _projected(parsed, parsed.events[2]) == _projected(whole, whole.events[2])


@pytest.mark.parametrize("blob", [
    _blob(MODEL, 3),  # an event that is not an object
    _blob({**MODEL, "has_error": True}, 3),  # ... beside one read whole
    b'{"events": {}}',
    b'{"id": 1}',  # no events
    b'{"events": [' * 5000,  # not JSON
], ids=["non-object", "non-object-and-whole", "events-not-a-list", "no-events", "not-json"])
def test_refuses_a_shape_the_records_do_not_take(blob: bytes) -> None:
    assert parse_sample_lean(blob, 1, PACK) is None


def test_a_type_no_rule_reads_is_a_stub() -> None:
    limit = {"event": "sample_limit", "uuid": "l", "type": "message", "limit": 5}
    parsed = parse_sample_lean(_blob(TOOL, limit), 1, frozenset({"tool"}))
    assert parsed is not None and parsed.events[1] == {"event": "sample_limit", "uuid": "l"}


def test_the_log_source_decodes_a_sample_once_and_gives_up_on_a_log_it_refuses(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bool] = []
    real = parse_sample_lean

    def counted(blob: bytes, epoch: int, types: frozenset[str]) -> ParsedSample | None:
        got = real(blob, epoch, types)
        calls.append(got is not None)
        return got

    monkeypatch.setattr(source_module, "_parse_lean", counted)
    src = LogSource(str(CORPUS))
    tasks = {Path(str(t.log_location)).name: t for t in src.tasks()}
    ctf = tasks["intercode-4models-replay.eval"]
    row = src.samples(ctf).samples[0]
    parsed = src.parsed_sample(ctf, row.sample_id, row.epoch, types=PACK)
    page = src.events(ctf, row.sample_id, row.epoch, since=None, types=PACK, tier="content",
                      limit=10_000)
    assert calls == [True]  # the shared buffer's takeover and the page: one decode
    assert page.done and len(page.events) == sum(
        e.get("event") in PACK for e in parsed.events)
    # a log whose samples it refuses (none served) is decoded whole after LEAN_TRIES
    monkeypatch.setattr(lean_module, "_decode", lambda blob: 1 / 0)
    calls.clear()
    oxdna = tasks["metr-oxdna-claude-opus.eval"]
    rows = src.samples(oxdna).samples
    assert len(rows) > source_module.LEAN_TRIES
    for r in rows:
        got = src.events(oxdna, r.sample_id, r.epoch, since=None, types=PACK, tier="content",
                         limit=10_000)
        assert any(e["event"] == "sandbox" for e in got.events)
    assert calls == [False] * source_module.LEAN_TRIES


@pytest.mark.parametrize("log", LOGS, ids=[p.name for p in LOGS])
def test_the_log_source_pages_the_same_events_lean_or_whole(
        log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def pages(src: LogSource) -> list[Any]:
        task = next(t for t in src.tasks() if str(t.log_location).endswith(log.name))
        out = []
        for r in src.samples(task).samples[:30]:
            since = None
            while True:
                page = src.events(task, r.sample_id, r.epoch, since=since, types=PACK,
                                  tier="content", limit=7)
                out.append((page.events, page.next, page.done))
                since = page.next
                if page.done:
                    break
        return out

    lean = pages(LogSource(str(log)))
    monkeypatch.setattr(source_module, "_parse_lean", lambda *a: None)
    assert pages(LogSource(str(log))) == lean


def test_the_event_record_names_the_prompt_key() -> None:
    # the records' literal key is the one project() and light() look for
    assert PROMPT_KEY in lean_module._Event.__optional_keys__


@pytest.mark.parametrize("log", LOGS, ids=[p.name for p in LOGS])
def test_an_event_decoded_alone_projects_as_the_whole_decode(log: Path) -> None:
    """A sample buffer's event rows (one event's JSON each): where the lean decode of one
    event answers, it projects as the whole decode does; it answers for every plain model
    and tool event and for nothing else."""
    answered = 0
    for name, blob in _samples(log):
        whole = parse_sample_json(orjson.loads(blob), 1)
        for theirs in orjson.loads(blob)["events"]:
            mine = lean_module.parse_event_lean(orjson.dumps(theirs).decode())
            etype = theirs.get("event")
            plain = etype in lean_module.LEAN_TYPES and plain_event(theirs, etype)
            assert (mine is not None) == plain, (name, theirs.get("uuid"))
            if mine is not None:
                raw = parse_sample_json({"events": [theirs]}, 1).events[0]
                assert _projected(whole, mine) == _projected(whole, raw), (
                    name, theirs.get("uuid"))
                answered += 1
    assert answered > 0


@pytest.mark.parametrize("text", ["3", "[]", '{"event": "model"', "", '{"event": "span_begin"}',
                                  orjson.dumps({**MODEL, "has_error": True}).decode()])
def test_an_event_the_lean_decode_does_not_answer_for(text: str) -> None:
    assert lean_module.parse_event_lean(text) is None
