"""sources/logfiles/lean.py: a sample decoded down to what the rules read pages exactly as
the whole decode, or refuses.

Over every sample of the shared corpus (real agents' runs, older formats,
``attachment://`` references): where it serves, each model and tool event projects to
the same content-tier event as the whole decode's, every other event keeps its type and
uuid, and the sample's nonce, attachments and message pool are the same; where it
refuses, the sample holds what only the whole decode answers. Then shapes the corpus
lacks, and the log source's use of it (one decode per sample, a log it keeps refusing
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
def test_serves_what_the_whole_decode_does_or_refuses(log: Path) -> None:
    served = refused = 0
    for name, blob in _samples(log):
        whole = parse_sample_json(orjson.loads(blob), 1)
        lean = parse_sample_lean(blob, 1, PACK)
        if lean is None:
            refused += 1
            # only where the whole decode is needed: another type the pack reads, or an
            # event project() makes the general way
            assert any(e.get("event") in PACK - lean_module.LEAN_TYPES
                       or (e.get("event") in lean_module.LEAN_TYPES
                           and not plain_event(e, e.get("event")))
                       for e in whole.events), name
            continue
        served += 1
        assert (lean.nonce, lean.attachments, lean.pool) == (
            whole.nonce, whole.attachments, whole.pool), name
        assert len(lean.events) == len(whole.events), name
        for mine, theirs in zip(lean.events, whole.events, strict=True):
            assert (mine.get("event"), mine.get("uuid")) == (
                theirs.get("event"), theirs.get("uuid")), name
            if theirs.get("event") in lean_module.LEAN_TYPES:
                assert _projected(lean, mine) == _projected(whole, theirs), (
                    name, theirs.get("uuid"))
    if log.name in ("mswe-gemini3pro-swebench-replay.eval", "intercode-4models-replay.eval"):
        assert refused == 0 and served > 0  # neither holds a type only the whole decode reads


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


@pytest.mark.parametrize("events", [
    [{**MODEL, "has_error": True}],  # a compact event: project() reads it the general way
    [{**TOOL, "_watch_prompt": {"role": "user"}}],
    [{k: v for k, v in MODEL.items() if k != "output"}],  # no output: not plain
    [{k: v for k, v in {**TOOL, "arguments": "ls"}.items() if k != "result"}],
    [MODEL, 3],  # not an object
    [TOOL, {"event": "sample_limit", "uuid": "l", "type": "message", "limit": 5}],
], ids=["has_error", "prompt-key", "no-output", "odd-arguments", "non-object",
        "another-read-type"])
def test_refuses_what_only_the_whole_decode_answers(events: list[Any]) -> None:
    assert parse_sample_lean(_blob(*events), 1, PACK) is None


def test_a_type_no_rule_reads_is_a_stub_and_a_broken_sample_is_refused() -> None:
    limit = {"event": "sample_limit", "uuid": "l", "type": "message", "limit": 5}
    parsed = parse_sample_lean(_blob(TOOL, limit), 1, frozenset({"tool"}))
    assert parsed is not None and parsed.events[1] == {"event": "sample_limit", "uuid": "l"}
    assert parse_sample_lean(b'{"events": {}}', 1, PACK) is None
    assert parse_sample_lean(b'{"id": 1}', 1, PACK) is None  # no events
    assert parse_sample_lean(b'{"events": [' * 5000, 1, PACK) is None  # not JSON


def test_the_log_source_decodes_a_sample_once_and_gives_up_on_a_log_it_refuses(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bool] = []
    real = source_module.parse_sample_lean

    def counted(blob: bytes, epoch: int, types: frozenset[str]) -> ParsedSample | None:
        got = real(blob, epoch, types)
        calls.append(got is not None)
        return got

    monkeypatch.setattr(source_module, "parse_sample_lean", counted)
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
    # every sample of the METR log holds sandbox events (a type the pack reads)
    calls.clear()
    oxdna = tasks["metr-oxdna-claude-opus.eval"]
    rows = src.samples(oxdna).samples
    assert len(rows) > source_module.LEAN_TRIES
    for r in rows:
        got = src.events(oxdna, r.sample_id, r.epoch, since=None, types=PACK, tier="content",
                         limit=10_000)
        assert any(e["event"] == "sandbox" for e in got.events)
    assert calls == [False] * source_module.LEAN_TRIES


def test_the_log_source_pages_the_same_events_lean_or_whole(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def pages(src: LogSource) -> list[Any]:
        task = next(t for t in src.tasks()
                    if str(t.log_location).endswith("intercode-4models-replay.eval"))
        out = []
        for r in src.samples(task).samples[:40]:
            since = None
            while True:
                page = src.events(task, r.sample_id, r.epoch, since=since, types=PACK,
                                  tier="content", limit=7)
                out.append((page.events, page.next, page.done))
                since = page.next
                if page.done:
                    break
        return out

    lean = pages(LogSource(str(CORPUS)))
    monkeypatch.setattr(source_module, "parse_sample_lean", lambda *a: None)
    assert pages(LogSource(str(CORPUS))) == lean
