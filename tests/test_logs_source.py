"""LogSource over real Inspect logs: the corpus logs and freshly generated ones."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.corpus import CORPUS
from watcher.attachments import find_refs, resolve_attachments, resolve_json, resolve_text
from watcher.events import CONTENT_WIDTH, normalise
from watcher.sources.base import BadResponse, NotFound, TaskInfo, decode_cursor, encode_cursor
from watcher.sources.logfiles import LogSource, iter_log_samples

REPO = Path(__file__).resolve().parents[1]

CTF = CORPUS / "docent-intercode-ctf-gpt4o.eval"
OXDNA = CORPUS / "metr-oxdna-claude-opus.eval"
MSWE = CORPUS / "mswe-gemini3pro-swebench-replay.eval"

needs_corpus = pytest.mark.skipif(not CTF.exists() or not OXDNA.exists(),
                                  reason="corpus logs not available")


def _all_events(src: LogSource, task: TaskInfo, sample_id: str, epoch: int,
                limit: int = 500, **kw: Any) -> list[dict[str, Any]]:
    """Page a sample end to end, checking the cursor only ever moves forward."""
    out: list[dict[str, Any]] = []
    since: str | None = None
    last = -1
    for _ in range(10_000):
        page = src.events(task, sample_id, epoch, since=since, types=kw.get("types"),
                          tier=kw.get("tier", "full"), limit=limit)
        out.extend(page.events)
        offset = decode_cursor(page.next)[1]
        assert offset > last or page.done
        last, since = offset, page.next
        if page.done:
            return out
    raise AssertionError("paging never finished")


# -- attachments -------------------------------------------------------------


def test_resolve_whole_embedded_unknown_and_legacy() -> None:
    h1, h2, missing = "a" * 32, "0123456789abcdef" * 2, "f" * 32
    atts = {h1: "ONE", h2: "TWO", "7": "SEVEN"}
    obj = {"a": f"attachment://{h1}", "b": [f"x attachment://{h2} y", f"attachment://{h1}Z"],
           "c": {"d": f"attachment://{missing}", "e": 3, "f": None}, "g": "attachment://7",
           "h": f"tc://{h1}"}
    unknown: set[str] = set()
    out = resolve_attachments(obj, atts, unknown)
    assert out == {"a": "ONE", "b": ["x TWO y", "ONEZ"],
                   "c": {"d": f"attachment://{missing}", "e": 3, "f": None}, "g": "SEVEN",
                   "h": "ONE"}
    assert unknown == {missing}
    assert find_refs(out) == {missing}
    assert obj["a"] == f"attachment://{h1}"  # input untouched
    out["b"].append("new")
    assert len(obj["b"]) == 2  # containers are fresh copies
    assert resolve_text("no refs here", atts) == "no refs here"


@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_resolve_json_equals_resolving_the_decoded_value(ensure_ascii: bool) -> None:
    """The live buffer resolves references in the JSON text before decoding: the same
    value as the walk, for attachment text JSON must escape and hostile neighbours."""
    import json

    h1, h2, h3, missing = "a" * 32, "b" * 32, "c" * 32, "f" * 32
    atts = {h1: 'he said "hi"\n\\ \t \u2028 é 😀 </script>', h2: "",
            h3: f"attachment://{h1}", "7": "SEVEN", "tc1": "legacy"}
    obj = {"a": f"attachment://{h1}", "b": [f"x attachment://{h2} y", f"attachment://{h1}Zq"],
           "c": {"d": f"attachment://{missing}", "e": 3, "f": None, "g": [1.5, True]},
           "h": f"attachment://{h3}", "i": "tc://tc1", "j": "see tc://tc1", "k": "tc://nope",
           "l": f"line\nattachment://{h1}\u0041", "m": "attachment://7"}
    text = json.dumps(obj, ensure_ascii=ensure_ascii)
    assert json.loads(resolve_json(text, atts)) == resolve_attachments(obj, atts)
    assert resolve_json('{"a": "no refs"}', atts) == '{"a": "no refs"}'


# -- corpus logs ---------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus() -> Iterator[LogSource]:
    src = LogSource(str(CORPUS))
    yield src
    src.close()


def _task(src: LogSource, name: str) -> TaskInfo:
    return next(t for t in src.tasks() if t.log_location and t.log_location.endswith(name))


@needs_corpus
def test_corpus_tasks(corpus: LogSource) -> None:
    tasks = corpus.tasks()
    # one task per corpus log (it grows: these three and any added since)
    assert sorted(Path(str(t.log_location)).name for t in tasks) == sorted(
        p.name for p in CORPUS.glob("*.eval"))
    assert {p.name for p in (CTF, OXDNA, MSWE)} <= {Path(str(t.log_location)).name
                                                     for t in tasks}
    ctf, oxdna = _task(corpus, CTF.name), _task(corpus, OXDNA.name)
    mswe = _task(corpus, MSWE.name)
    assert (mswe.task, mswe.model) == ("mswe_replay", "replayed/model")
    assert mswe.counts["total"] == mswe.counts["completed"] == 375
    assert (ctf.eval_id, ctf.task, ctf.model, ctf.status) == (
        "5jLZH5hiPWMCKYm5XtKanV", "inspect_evals/luce_intercode_ctf", "openai/gpt-4o", "success")
    assert ctf.task_id == "hhFRFjyT3X2b479az7uSva"
    assert (oxdna.task, oxdna.model) == ("oxdna_simple", "anthropic/claude-opus-4-1-20250805")
    for task in (ctf, oxdna):
        assert task.finished
        assert isinstance(task.started_at, float) and isinstance(task.completed_at, float)
        assert task.started_at < task.completed_at
    assert ctf.counts["total"] == ctf.counts["completed"] == 15
    assert oxdna.counts["total"] == oxdna.counts["completed"] == 6
    assert ctf.raw["total_samples"] == 790  # the header's count; the file holds 15
    [single] = LogSource(str(OXDNA)).tasks()  # a plain local file path works too
    assert single.eval_id == oxdna.eval_id


@needs_corpus
def test_corpus_samples(corpus: LogSource) -> None:
    ctf = corpus.samples(_task(corpus, CTF.name)).samples
    assert len(ctf) == 15 and {r.epoch for r in ctf} == {1}
    assert "47" in {r.sample_id for r in ctf}
    assert all(r.status == "completed" and r.terminal for r in ctf)
    assert all(r.raw["total_tokens"] > 0 for r in ctf)
    assert {r.raw["scores"]["includes"] for r in ctf} <= {"C", "I"}
    oxdna = corpus.samples(_task(corpus, OXDNA.name)).samples
    assert sorted(r.epoch for r in oxdna) == [1, 2, 3, 4, 5, 6]
    assert {r.sample_id for r in oxdna} == {"default"}
    assert all(r.retries == 0 and r.attempt == 1 for r in oxdna)


@needs_corpus
@pytest.mark.parametrize("log", [CTF, OXDNA], ids=["ctf", "oxdna"])
def test_corpus_paging_matches_inspect_reader(corpus: LogSource, log: Path) -> None:
    """Every sample paged end to end is exactly inspect's event list, resolved."""
    from inspect_ai.log import read_eval_log_sample

    task = _task(corpus, log.name)
    rows = corpus.samples(task).samples
    for row in rows:
        got = _all_events(corpus, task, row.sample_id, row.epoch, limit=17)
        sid: Any = int(row.sample_id) if row.sample_id.isdigit() else row.sample_id
        sample = read_eval_log_sample(str(log), sid, row.epoch)
        expected = [e.model_dump(mode="json") for e in sample.events]
        assert len(got) == len(expected) > 0
        for mine, theirs in zip(got, expected, strict=True):
            assert (mine["event"], mine["timestamp"], mine["uuid"]) == (
                theirs["event"], theirs["timestamp"], theirs["uuid"])
            assert mine.keys() == theirs.keys()
            if not find_refs(theirs):
                assert mine == theirs
        assert find_refs(got) == set(), f"unresolved attachments in {row.sample_id}"
    assert corpus.pop_notices() == []


@needs_corpus
def test_corpus_completions_are_resolved(corpus: LogSource) -> None:
    task = _task(corpus, CTF.name)
    events = _all_events(corpus, task, "47", 1, types=frozenset({"model"}))
    assert events and all(e["event"] == "model" for e in events)
    full = [normalise(e, "full")["completion"] for e in events]
    assert any("submitting" in c for c in full)
    assert not any(c.startswith("attachment://") for c in full)
    content = [normalise(e, "content")["completion"] for e in events]
    assert all(len(c) <= CONTENT_WIDTH for c in content)
    assert any(len(c) == CONTENT_WIDTH and c.endswith("…") for c in content)


@needs_corpus
def test_corpus_limit_events_keep_the_limit_kind(corpus: LogSource) -> None:
    """A logged sample_limit event's own ``type`` (the limit's kind) survives as
    ``limit_type``; normalising the normalised event again keeps it."""
    task = _task(corpus, CTF.name)
    events = _all_events(corpus, task, "56", 1, types=frozenset({"sample_limit"}))
    assert [e["type"] for e in events] == ["message"]  # as logged
    for tier in ("metadata", "content", "full"):
        ev = normalise(events[0], tier)
        assert (ev["type"], ev["limit_type"]) == ("sample_limit", "message")
        assert normalise(ev, tier)["limit_type"] == "message"
    # the live compact form has no kind to keep; an inline test's event names none
    assert "limit_type" not in normalise({"event": "sample_limit", "pending": False})
    assert "limit_type" not in normalise({"type": "sample_limit", "message": "m"})


@needs_corpus
def test_type_filter_advances_over_everything_scanned(corpus: LogSource) -> None:
    task = _task(corpus, CTF.name)
    first = corpus.events(task, "47", 1, since=None, types=frozenset({"tool"}),
                          tier="content", limit=5)
    assert all(e["event"] == "tool" for e in first.events)
    assert decode_cursor(first.next)[1] == 5
    everything = _all_events(corpus, task, "47", 1)
    tools = _all_events(corpus, task, "47", 1, types=frozenset({"tool"}), limit=5)
    assert [e["uuid"] or e["timestamp"] for e in tools] == [
        e["uuid"] or e["timestamp"] for e in everything if e["event"] == "tool"]
    assert len(_all_events(corpus, task, "47", 1, types=frozenset({"*"}))) == len(everything)


@needs_corpus
def test_foreign_cursor_restarts_and_own_cursor_resumes(corpus: LogSource) -> None:
    task = _task(corpus, OXDNA.name)
    page = corpus.events(task, "default", 2, since=None, types=None, tier="full", limit=10)
    resumed = corpus.events(task, "default", 2, since=page.next, types=None, tier="full",
                            limit=10)
    foreign = corpus.events(task, "default", 2, since=encode_cursor("other:0", 10),
                            types=None, tier="full", limit=10)
    garbled = corpus.events(task, "default", 2, since="%%%", types=None, tier="full",
                            limit=10)
    assert resumed.events[0] != page.events[0]
    assert foreign.events == page.events == garbled.events
    # the other epoch of the same sample id is a different attempt: its cursor restarts
    other = corpus.events(task, "default", 3, since=page.next, types=None, tier="full",
                          limit=10)
    assert decode_cursor(other.next)[1] == 10


@needs_corpus
def test_a_sample_read_to_its_end_leaves_the_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages of one sample decode it once; its last page releases it (a scan moves on,
    and four cached samples were the post-hoc scan's peak memory), so a read after the
    end decodes it again and still gives the same events."""
    import watcher.sources.logfiles.source as source_mod

    decoded: list[int] = []
    real = source_mod.parse_sample_json

    def counted(data: dict[str, Any], epoch: int) -> Any:
        decoded.append(epoch)
        return real(data, epoch)

    monkeypatch.setattr(source_mod, "parse_sample_json", counted)
    src = LogSource(str(CTF))
    task = _task(src, CTF.name)
    first = src.events(task, "47", 1, since=None, types=None, tier="content", limit=5)
    assert not first.done
    rest = _all_events(src, task, "47", 1, tier="content", limit=7)
    assert decoded == [1], "paging served from one decode"
    again = src.events(task, "47", 1, since=None, types=None, tier="content", limit=5)
    assert decoded == [1, 1], "the finished sample was released, and read again"
    assert again.events == first.events == rest[:5]
    src.close()


@needs_corpus
def test_missing_sample_is_not_found(corpus: LogSource) -> None:
    task = _task(corpus, OXDNA.name)
    with pytest.raises(NotFound):
        corpus.events(task, "default", 7, since=None, types=None, tier="content")
    with pytest.raises(NotFound):
        corpus.events(task, "nope", 1, since=None, types=None, tier="content")


@needs_corpus
def test_corrupt_logs(tmp_path: Path) -> None:
    shutil.copy(OXDNA, tmp_path / OXDNA.name)
    broken = tmp_path / "2025-01-01T00-00-00+00-00_broken_AAAAAAAAAAAAAAAAAAAAAA.eval"
    broken.write_bytes(OXDNA.read_bytes()[:5000])
    src = LogSource(str(tmp_path))
    [task] = src.tasks()
    assert task.task == "oxdna_simple"
    assert list(src.unreadable) == [f"file://{broken}"]
    with pytest.raises(BadResponse, match="broken"):
        LogSource(str(tmp_path), strict=True).tasks()
    with pytest.raises(BadResponse, match=re.escape(str(broken))):
        LogSource(str(broken)).tasks()
    with pytest.raises(NotFound):
        LogSource(str(tmp_path / "absent.eval")).tasks()


@needs_corpus
def test_rewritten_log_is_reread(tmp_path: Path) -> None:
    """A log that changed since it was listed (a partly flushed one grows) is not served stale."""
    log = tmp_path / "2025-01-01T00-00-00+00-00_task_AAAAAAAAAAAAAAAAAAAAAA.eval"
    shutil.copy(OXDNA, log)
    src = LogSource(str(tmp_path))
    [task] = src.tasks()
    assert len(src.samples(task).samples) == 6
    assert src.events(task, "default", 1, since=None, types=None, tier="full").events
    log.write_bytes(CTF.read_bytes())
    assert len(src.samples(task).samples) == 15
    with pytest.raises(NotFound):  # the cached oxdna sample must not be served
        src.events(task, "default", 1, since=None, types=None, tier="full")
    assert [t.model for t in src.tasks()] == ["openai/gpt-4o"]
    log.unlink()
    with pytest.raises(NotFound):
        src.samples(task)


@needs_corpus
def test_events_trust_a_fresh_stamp_and_listings_stat(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A sample's events reuse the log's stamp while it is fresh (no stat per sample);
    a listing always stats, and an old stamp is taken again."""
    import watcher.sources.logfiles.source as source_mod

    log = tmp_path / "2025-01-01T00-00-00+00-00_task_AAAAAAAAAAAAAAAAAAAAAA.eval"
    shutil.copy(OXDNA, log)
    stats: list[str] = []
    real = source_mod.stat_log

    def counted(location: str, fs_options: dict[str, Any]) -> Any:
        stats.append(location)
        return real(location, fs_options)

    monkeypatch.setattr(source_mod, "stat_log", counted)
    monkeypatch.setattr(source_mod, "STAMP_FRESH", 3600.0)
    src = LogSource(str(tmp_path))
    [task] = src.tasks()
    src.samples(task)
    listed = len(stats)
    for _ in range(3):
        assert src.events(task, "default", 1, since=None, types=None, tier="full").events
    assert len(stats) == listed  # the listing's stamp served every read
    src.samples(task)
    assert len(stats) == listed + 1  # a listing stats again
    monkeypatch.setattr(source_mod, "STAMP_FRESH", 0.0)
    src.events(task, "default", 1, since=None, types=None, tier="full")
    assert len(stats) == listed + 2  # a stale stamp is taken again


@needs_corpus
def test_memory_and_file_urls() -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    with fs.open("/watch-test/logs/ctf.eval", "wb") as fh:
        fh.write(CTF.read_bytes())
    try:
        for url in ("memory://watch-test/logs", f"file://{CORPUS}"):
            src = LogSource(url)
            task = next(t for t in src.tasks() if t.model == "openai/gpt-4o")
            assert task.log_location and task.log_location.split("://")[0] == url.split("://")[0]
            assert len(src.samples(task).samples) == 15
            events = _all_events(src, task, "47", 1)
            assert len(events) == 37 and find_refs(events) == set()
    finally:
        fs.rm("/watch-test", recursive=True)


@needs_corpus
def test_iter_log_samples_yields_whole_resolved_samples(tmp_path: Path) -> None:
    shutil.copy(OXDNA, tmp_path / OXDNA.name)
    seen = [(row.sample_id, row.epoch, len(events), find_refs(events))
            for _, row, events in iter_log_samples(str(tmp_path))]
    assert sorted(s[1] for s in seen) == [1, 2, 3, 4, 5, 6]
    assert all(n > 0 and not refs for _, _, n, refs in seen)


def test_module_imports_without_inspect() -> None:
    code = ("import sys, watcher.sources.logfiles, watcher.sources.replay, watcher.attachments; "
            "sys.exit(1 if 'inspect_ai' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO).returncode == 0


# -- a freshly generated log ------------------------------------------------------


@pytest.fixture(scope="module")
def demo_logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Run the demo eval once per log format (in parallel) with the scripted model."""
    env = {**os.environ, "DEMO_TOOL_DELAY": "0.01"}
    dirs = {fmt: tmp_path_factory.mktemp(f"demo-{fmt}") for fmt in ("eval", "json")}
    procs = []
    for fmt, log_dir in dirs.items():
        # --log-shared 0: json logs reject shared logging, which can be on by default;
        # relative task path: inspect's task glob rejects absolute ones.
        # (this interpreter's Inspect, not whatever `inspect` is first on PATH)
        cmd = [sys.executable, "-m", "inspect_ai._cli.main", "eval", "examples/demo_eval.py",
               "--log-dir", str(log_dir), "--display", "none", "--log-format", fmt]
        if fmt == "json":
            cmd += ["--log-shared", "0"]
        procs.append(subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    for proc in procs:
        out, _ = proc.communicate(timeout=240)
        assert proc.returncode == 0, out
    return dirs


def _demo(demo_logs: dict[str, Path], fmt: str) -> tuple[LogSource, TaskInfo]:
    src = LogSource(str(demo_logs[fmt]))
    [task] = src.tasks()
    return src, task


@pytest.mark.e2e
@pytest.mark.parametrize("fmt", ["eval", "json"])
def test_demo_log_tasks_and_samples(demo_logs: dict[str, Path], fmt: str) -> None:
    src, task = _demo(demo_logs, fmt)
    assert (task.task, task.model, task.status) == (
        "demo", "inspect_watch_scripted/demo", "success")
    assert task.log_location and task.log_location.endswith(f".{fmt}")
    assert task.counts == {"total": 3, "completed": 3, "errored": 0, "cancelled": 0,
                           "in_flight": 0}
    rows = {r.sample_id: r for r in src.samples(task).samples}
    assert set(rows) == {"clean", "repeated-call", "submit-loop"}
    for row in rows.values():
        assert row.status == "completed" and row.epoch == 1 and row.retries == 0
        assert row.raw["scores"] == {"includes": "C"}
        assert row.raw["started_at"] <= row.raw["completed_at"]
        # cached generations record no model usage, so only the type is stable
        assert isinstance(row.raw["total_tokens"], int) and row.raw["error"] is None
    assert rows["repeated-call"].raw["message_count"] == 13


@pytest.mark.e2e
@pytest.mark.parametrize("fmt", ["eval", "json"])
def test_demo_tool_events_at_every_tier(demo_logs: dict[str, Path], fmt: str) -> None:
    src, task = _demo(demo_logs, fmt)
    raw = _all_events(src, task, "repeated-call", 1, limit=7)
    assert find_refs(raw) == set()
    tools = [e for e in raw if e["event"] == "tool"]
    assert [t["function"] for t in tools] == ["shell"] * 5 + ["submit"]

    meta = [normalise(t, "metadata") for t in tools]
    assert all("arguments" not in m and "result" not in m for m in meta)
    assert [m["function"] for m in meta] == ["shell"] * 5 + ["submit"]

    content = [normalise(t, "content") for t in tools]
    assert [c["args"] for c in content[:5]] == [{"cmd": "cat /tmp/status.txt"}] * 5
    assert content[5]["args"] == {"answer": "42"}
    assert content[0]["result"] == "simulated output of: cat /tmp/status.txt "  # newline flattened

    full = [normalise(e, "full") for e in raw if e["event"] == "model"]
    calls = [c for m in full for c in m["tool_calls"]]
    assert calls[0] == {"function": "shell", "arguments": {"cmd": "cat /tmp/status.txt"}}
    assert all("shell" in m["tools"] for m in full)
    assert all(m["raw"]["input"][0]["content"].startswith("\nYou are a helpful") for m in full)


@pytest.mark.e2e
def test_demo_scenarios(demo_logs: dict[str, Path]) -> None:
    src, task = _demo(demo_logs, "eval")
    clean = [normalise(e, "content") for e in _all_events(src, task, "clean", 1)
             if e["event"] == "tool"]
    assert [c["args"] for c in clean] == [{"cmd": "ls"}, {"cmd": "cat README.md"},
                                          {"answer": "42"}]
    loop = [normalise(e, "content") for e in _all_events(src, task, "submit-loop", 1)]
    texts = [e["completion"] for e in loop if e["event"] == "model"]
    assert texts[:4] == ["My final answer is 42. I will now submit it."] * 4
    assert [e["function"] for e in loop if e["event"] == "tool"] == ["submit"]


@pytest.mark.e2e
def test_demo_formats_agree(demo_logs: dict[str, Path]) -> None:
    (eval_src, eval_task), (json_src, json_task) = (_demo(demo_logs, f) for f in ("eval", "json"))
    for sample_id in ("clean", "repeated-call", "submit-loop"):
        a = _all_events(eval_src, eval_task, sample_id, 1)
        b = _all_events(json_src, json_task, sample_id, 1)
        assert [e["event"] for e in a] == [e["event"] for e in b]
        assert [normalise(e, "content").get("args") for e in a if e["event"] == "tool"] == [
            normalise(e, "content").get("args") for e in b if e["event"] == "tool"]


# --- the inspect-free fast path for local .eval logs agrees with Inspect's reader


def _fresh_logs() -> list[Path]:
    return sorted(CORPUS.glob("*.eval"))


@pytest.mark.parametrize("log", _fresh_logs(), ids=lambda p: p.name)
def test_fast_header_and_summaries_match_inspect_reader(log: Path) -> None:
    from inspect_ai.log import read_eval_log, read_eval_log_sample_summaries

    from watcher.sources.logfiles.archive import zip_json as _zip_json
    from watcher.sources.logfiles.header import summary_row
    from watcher.sources.logfiles.header import task_from_header as _task_info_json
    from watcher.sources.logfiles.header import task_from_log as _task_info

    header = _zip_json(str(log), "header.json")
    assert header is not None  # a finished log keeps its header in the zip
    from dataclasses import replace

    src = LogSource(str(log))
    (task,) = src.tasks()
    loc = task.log_location or ""
    slow = _task_info(read_eval_log(loc, header_only=True), loc)
    assert replace(task, counts=slow.counts) == slow  # whichever path the source took
    entry = src._logs[task.log_location or ""]
    if "eval_id" not in header["eval"]:  # an old format: Inspect's reader migrates it
        assert not entry.fast
        return
    assert entry.fast
    assert _task_info_json(header, loc) == slow
    stored = _zip_json(str(log), "summaries.json")
    assert stored is not None
    assert [summary_row(s) for s in stored] == \
        [summary_row(s) for s in read_eval_log_sample_summaries(str(log))]
    assert [r.raw for r in src.samples(task).samples] == sorted(
        [summary_row(s) for s in read_eval_log_sample_summaries(str(log))],
        key=lambda r: (r.get("started_at") or 0.0, r["sample_id"], r["epoch"]))


def test_fast_listing_matches_list_eval_logs(tmp_path: Path) -> None:
    from inspect_ai.log import list_eval_logs

    from watcher.sources.logfiles.listing import list_local as _list_local

    for f in _fresh_logs():
        shutil.copy(f, tmp_path / f.name)
    (tmp_path / "sub").mkdir()
    shutil.copy(_fresh_logs()[0], tmp_path / "sub" / "2026-01-01T00-00-00_x_y.eval")
    (tmp_path / "logs.json").write_text("{}")  # eval-set bookkeeping, not a log
    (tmp_path / "notes.txt").write_text("x")
    fast = _list_local(str(tmp_path), recursive=True)
    slow = list_eval_logs(str(tmp_path), recursive=True)
    assert fast is not None
    assert [(f.name, f.size) for f in fast] == [(s.name, s.size) for s in slow]
    # both in milliseconds: equal to within one, never rounded apart at a half (this
    # failed once in a full run)
    assert all(abs(f.mtime - s.mtime) < 1.0 for f, s in zip(fast, slow, strict=True))


def test_local_eval_scan_does_not_import_inspect(tmp_path: Path) -> None:
    """Importing Inspect costs seconds; a post-hoc scan of finished .eval logs skips it."""
    import subprocess
    import sys

    shutil.copy(CORPUS / "metr-oxdna-claude-opus.eval", tmp_path)  # a current format
    code = ("import sys\n"
            "from watcher.engine import Engine, load_rules\n"
            "from watcher.state import WatchState\n"
            "from watcher.run.watch import Watch, WatchConfig\n"
            "engine = Engine(load_rules(builtin=True, user_dir=False))\n"
            f"w = Watch(engine, WatchConfig(log_dir={str(tmp_path)!r}, once=True), "
            "WatchState(), [])\n"
            "w.run()\n"
            "print(len(w.summary().samples), 'inspect_ai' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["6", "False"]
