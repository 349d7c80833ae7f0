"""sources/logfiles/project.py makes, in one pass, the event ``normalise(light(e))`` makes in two.

Checked over every model and tool event of the shared corpus's logs (real agents' runs,
older formats and ``attachment://`` references included) and over shapes the corpus
lacks: same keys, same order, same values, same unknown references.
"""

from __future__ import annotations

import zipfile
from typing import Any

import orjson
import pytest
import zipfile_zstd  # noqa: F401  (the .eval zips are zstd-compressed)

from tests.corpus import CORPUS
from watcher.events import WHOLE, normalise
from watcher.sources.logfiles.project import project
from watcher.sources.logfiles.samples import light, light_prompt, parse_sample_json

LOGS = sorted(CORPUS.glob("*.eval"))


def _two_steps(e: dict[str, Any], tier: str, pool: list[Any], att: dict[str, str],
               prompt: dict[str, Any] | None = None) -> tuple[list[Any], set[str]]:
    unknown: set[str] = set()
    out = light(e, pool, att, unknown)
    if prompt is not None:
        out["_watch_prompt"] = light_prompt(prompt, att, unknown)
    return list(normalise(out, tier).items()), unknown  # type: ignore[arg-type]


def _one_pass(e: dict[str, Any], tier: str, pool: list[Any], att: dict[str, str],
              prompt: dict[str, Any] | None = None) -> tuple[list[Any], set[str]]:
    unknown: set[str] = set()
    out = project(e, tier, pool, att, unknown, None, prompt)  # type: ignore[arg-type]
    return list(normalise(out, tier).items()), unknown  # type: ignore[arg-type]


@pytest.mark.parametrize("log", LOGS, ids=[p.name for p in LOGS])
def test_same_events_as_light_then_normalise_over_the_corpus(log: Any) -> None:
    z = zipfile.ZipFile(log)
    checked = 0
    for name in z.namelist():
        if not name.startswith("samples/"):
            continue
        parsed = parse_sample_json(orjson.loads(z.read(name)), 1)
        for e in parsed.events:
            if e.get("event") not in ("model", "tool"):
                continue
            for tier in ("content", "metadata"):
                assert _one_pass(e, tier, parsed.pool, parsed.attachments) == _two_steps(
                    e, tier, parsed.pool, parsed.attachments), (name, e.get("uuid"), tier)
            checked += 1
    if checked == 0:
        pytest.skip(f"{log.name}: no zipped samples with model or tool events")


ATT = {"a1": "the whole answer", "a2": "", "a3": "tool said so"}
SHAPES: list[dict[str, Any]] = [
    # completion a reference; prompt in input; usage priced
    {"event": "model", "uuid": "m1", "timestamp": "2026-01-01T00:00:00+00:00",
     "completed": "2026-01-01T00:00:01+00:00", "model": "m", "input": [
         {"role": "user", "content": "attachment://a3"}],
     "output": {"completion": "attachment://a1", "usage": {"total_tokens": 7,
                                                           "total_cost": 0.5},
                "choices": [{"message": {"role": "assistant", "content": "x"},
                             "stop_reason": "stop"}]}},
    # a completion resolving to nothing falls back to the message's text parts
    {"event": "model", "uuid": "m2", "output": {"completion": "attachment://a2", "choices": [
        {"message": {"content": [{"type": "text", "text": "attachment://a1"},
                                 {"type": "image", "image": "attachment://zz"}]}}]},
     "error": "attachment://nope"},
    # odd shapes: output None, a choice that is not a dict, long text cut to the width
    {"event": "model", "uuid": "m3", "output": None},
    {"event": "model", "uuid": "m4", "output": {"choices": ["?"], "completion": "y" * 600}},
    # not raw to normalise, or not ours to make: the two steps
    {"event": "model", "uuid": "m5", "input": [{"role": "user", "content": "hi"}]},
    {"event": "model", "uuid": "m7", "output": {}, "has_error": False},
    # tool: arguments with references one level down and deeper; a result list; errors
    {"event": "tool", "uuid": "t1", "id": "c1", "function": "bash", "pending": True,
     "arguments": {"cmd": "attachment://a1", "deep": {"x": "attachment://a3"}, "n": 3},
     "result": [{"type": "text", "text": "attachment://a3"}],
     "error": {"message": "attachment://a1", "type": "unknown"}},
    {"event": "tool", "uuid": "t2", "function": "f", "arguments": "not json",
     "result": "attachment://missing"},
    {"event": "tool", "uuid": "t3", "function": "f", "result": "", "error": {}},
    {"event": "tool", "uuid": "t4", "arguments": {"cmd": "z" * 700}, "result": "q" * 900},
    {"event": "tool", "uuid": "t5", "type": "function"},  # not raw: the two steps
    # legacy whole-string references, references inside longer text, and "://" that is
    # no reference (a URL): resolved, or left, as light leaves them
    {"event": "tool", "uuid": "t6", "function": "tc://a3", "arguments": {
        "cmd": "tc://a1", "url": "curl https://x.org/a1", "say": "see attachment://a3 ok",
        "odd": "tc://nope"}, "result": "fetched http://h/attachment://a1 then tc://a3"},
    {"event": "model", "uuid": "m8", "model": "tc://a3",
     "output": {"completion": "read https://a1 and attachment://a1", "choices": []}},
    {"event": "error", "uuid": "e1", "error": {"message": "attachment://a1"}},
]


@pytest.mark.parametrize("event", SHAPES, ids=[str(e["uuid"]) for e in SHAPES])
@pytest.mark.parametrize("tier", ["content", "metadata"])
def test_same_events_for_shapes_the_corpus_lacks(event: dict[str, Any], tier: str) -> None:
    pool = [{"role": "user", "content": "attachment://a3"}]
    assert _one_pass(event, tier, pool, ATT) == _two_steps(event, tier, pool, ATT)


def test_a_pooled_prompt_stands_in_for_the_events_own() -> None:
    e = SHAPES[0]
    prompt = {"role": "tool", "content": "attachment://a1"}
    one, _ = _one_pass(e, "content", [], ATT, prompt)
    assert one == _two_steps(e, "content", [], ATT, prompt)[0]
    assert dict(one)["prompt"] == "the whole answer" and dict(one)["prompt_role"] == "tool"


def test_made_in_one_pass_and_passed_through_by_normalise() -> None:
    t1 = next(e for e in SHAPES if e["uuid"] == "t1")
    out = project(t1, "content", [], ATT, set())
    assert isinstance(out[WHOLE], dict) and out["args"]["cmd"] == "the whole answer"
    assert normalise(out) is out  # not normalised twice (a tool's args would be lost)
    assert WHOLE not in project(t1, "metadata", [], ATT, set())  # light's copy
