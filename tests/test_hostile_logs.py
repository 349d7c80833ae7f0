"""Damaged and hostile logs (issue 23: items 1, 3, 6 and 7), built by hand in tmp dirs.

Each log holds a good sample beside the damage, and a second log is wholly good: a
scan must report the damage once (a notice naming the file and the reason), read
everything else, end, and exit 3 (some input could not be read).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.hostile_logs import log_name, repeat_events, sample, tool_event, write_eval
from watcher.attachments import resolve_attachments
from watcher.engine import Engine, load_rules
from watcher.findings import Finding, Notice
from watcher.run.watch import Watch, WatchConfig
from watcher.sources.logfiles import LogSource
from watcher.state import WatchState
from watcher.summary import StatusSnapshot


class Sink:
    def __init__(self) -> None:
        self.findings: list[Finding] = []
        self.notices: list[Notice] = []

    def finding(self, f: Finding) -> None:
        self.findings.append(f)

    def notice(self, n: Notice) -> None:
        self.notices.append(n)

    def status(self, snapshot: StatusSnapshot) -> None:
        return None

    def kinds(self, kind: str) -> list[Notice]:
        return [n for n in self.notices if n.kind == kind]


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(load_rules(builtin=True, user_dir=False))


@pytest.fixture
def thread_errors() -> Any:
    errors: list[BaseException] = []
    previous = threading.excepthook
    threading.excepthook = lambda args: errors.append(args.exc_value or RuntimeError())
    yield errors
    threading.excepthook = previous


def scan(engine: Engine, log_dir: Path, **kw: Any) -> tuple[Any, Sink]:
    """``watch --log-dir DIR --once`` on a thread, failing rather than hanging."""
    sink = Sink()
    watch = Watch(engine, WatchConfig(log_dir=str(log_dir), once=True, poll=0.05, **kw),
                  WatchState(), [sink])
    results: list[Any] = []
    thread = threading.Thread(target=lambda: results.append(watch.run()), daemon=True)
    thread.start()
    thread.join(120)
    if thread.is_alive():
        watch.request_stop()
        thread.join(10)
        pytest.fail("the --once scan did not end")
    return results[0], sink


def _samples_with_findings(sink: Sink) -> set[tuple[str, str]]:
    return {(f.sample.eval_id, f.sample.sample_id) for f in sink.findings}


def _good_and_bad(tmp_path: Path, bad: bytes | dict[str, Any]) -> Path:
    write_eval(tmp_path / log_name("a"), "evalA",
               {"good": sample("good", repeat_events()), "bad": bad})
    write_eval(tmp_path / log_name("b"), "evalB", {"good": sample("good", repeat_events())})
    return tmp_path


def _bad_json(kind: str) -> bytes:
    body = json.dumps(sample("bad", repeat_events())).encode()
    value = {"utf8": b'"same \xff\xfe output"', "bigint": b"1" * 5000,
             "deep": b"[" * 1023 + b"]" * 1023}[kind]
    return body.replace(b'"same output"', value)


# -- item 1: a sample that cannot be read ---------------------------------------------


@pytest.mark.parametrize("kind", ["utf8", "bigint", "deep"])
def test_once_ends_when_a_sample_cannot_be_read(
        tmp_path: Path, engine: Engine, kind: str, thread_errors: list[BaseException]) -> None:
    result, sink = scan(engine, _good_and_bad(tmp_path, _bad_json(kind)))
    [unreadable] = sink.kinds("unreadable")  # said once
    assert unreadable.sample is not None and unreadable.sample.sample_id == "bad"
    assert log_name("a") in unreadable.message
    [incomplete] = sink.kinds("incomplete")
    assert incomplete.details == {"sample": 1}
    assert _samples_with_findings(sink) == {("evalA", "good"), ("evalB", "good")}
    assert result.exit_code == 3
    assert not thread_errors


def test_a_parallel_scan_says_what_it_could_not_read_in_its_outputs(
        tmp_path: Path, engine: Engine) -> None:
    """With --jobs the closing count was routed after the last flush: the summary had it,
    the JSONL and the terminal did not."""
    result, sink = scan(engine, _good_and_bad(tmp_path, _bad_json("utf8")), jobs=2)
    assert [n.details for n in sink.kinds("incomplete")] == [{"sample": 1}]
    assert result.exit_code == 3


def test_fail_on_still_wins_over_an_unreadable_sample(tmp_path: Path, engine: Engine) -> None:
    result, sink = scan(engine, _good_and_bad(tmp_path, _bad_json("utf8")), fail_on="low")
    assert sink.kinds("unreadable") and result.exit_code == 1


# -- item 3: one damaged log must not lose the scan -----------------------------------


def test_arguments_nested_900_deep_do_not_lose_the_scan(
        tmp_path: Path, engine: Engine, thread_errors: list[BaseException]) -> None:
    deep = json.loads("[" * 900 + "]" * 900)
    hostile = sample("bad", repeat_events(3) + [tool_event(99, {"cmd": deep})],
                     attachments={"a" * 32: "x"})
    result, sink = scan(engine, _good_and_bad(tmp_path, hostile), fail_on="low")
    assert ("evalA", "good") in _samples_with_findings(sink)
    assert ("evalB", "good") in _samples_with_findings(sink)
    assert ("evalA", "bad") in _samples_with_findings(sink)  # read in full
    assert result.exit_code == 1
    assert not thread_errors


def test_resolution_has_no_depth_limit() -> None:
    depth = 20_000
    obj: Any = "attachment://" + "a" * 32
    for i in range(depth):
        obj = [obj] if i % 2 else {"k": obj}
    out = resolve_attachments(obj, {"a" * 32: "TEXT"})
    for i in reversed(range(depth)):
        out = out[0] if i % 2 else out["k"]
    assert out == "TEXT"


def test_summaries_of_the_wrong_shape_are_a_named_unreadable_log(
        tmp_path: Path, engine: Engine, thread_errors: list[BaseException]) -> None:
    _good_and_bad(tmp_path, sample("bad", repeat_events()))
    write_eval(tmp_path / log_name("c"), "evalC", {"x": sample("x", repeat_events())},
               summaries=[{"id": "x", "epoch": "one"}])
    result, sink = scan(engine, tmp_path)
    [unreadable] = sink.kinds("unreadable")
    assert log_name("c") in unreadable.message and unreadable.details["scope"] == "log"
    assert ("evalB", "good") in _samples_with_findings(sink)
    assert result.exit_code == 3
    assert not thread_errors


# -- item 7: unreadable logs are said, not skipped silently ----------------------------


def test_a_truncated_log_is_a_notice_and_exit_3(tmp_path: Path, engine: Engine) -> None:
    _good_and_bad(tmp_path, sample("bad", repeat_events()))
    whole = (tmp_path / log_name("a")).read_bytes()
    (tmp_path / log_name("t")).write_bytes(whole[: len(whole) // 2])
    result, sink = scan(engine, tmp_path)
    [unreadable] = sink.kinds("unreadable")
    assert log_name("t") in unreadable.message and "EOCD" in unreadable.message
    assert unreadable.details["scope"] == "log"
    assert ("evalB", "good") in _samples_with_findings(sink)
    assert result.exit_code == 3


def test_a_folder_holding_only_a_truncated_log_does_not_say_no_logs(
        tmp_path: Path, engine: Engine) -> None:
    whole = write_eval(tmp_path / "x.eval", "evalA", {"good": sample("good", repeat_events())})
    (tmp_path / log_name("t")).write_bytes(whole.read_bytes()[:300])
    whole.unlink()
    result, sink = scan(engine, tmp_path)
    assert not sink.kinds("no_logs")
    assert len(sink.kinds("unreadable")) == 1
    assert result.exit_code == 3


# -- item 6: small inputs must not take huge memory ------------------------------------


def test_attachment_references_expand_within_the_limit(
        tmp_path: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INSPECT_WATCH_MAX_EXPANSION_MB", "1")
    h = "b" * 32
    refs = [f"attachment://{h}"] * 100  # 100 x 100 KB: 10 MB from a few KB of log
    bomb = sample("bad", [tool_event(1, {"cmd": refs})], attachments={h: "y" * 100_000})
    _good_and_bad(tmp_path, bomb)
    result, sink = scan(engine, tmp_path)
    [limit] = sink.kinds("limit")
    assert "INSPECT_WATCH_MAX_EXPANSION_MB" in limit.message and "bad" in limit.message
    assert ("evalB", "good") in _samples_with_findings(sink)
    assert result.exit_code == 0  # the event was read, with references left unresolved


def test_expansion_budget_counts_every_reference() -> None:
    from watcher.attachments import Expansion

    h = "c" * 32
    budget = Expansion(250)
    out = resolve_attachments({"a": [f"attachment://{h}"] * 5, "b": f"x attachment://{h}"},
                              {h: "z" * 100}, budget=budget)
    values = [*out["a"], out["b"]]
    resolved = sum(v.count("z" * 100) for v in values)
    left = sum(v.count(f"attachment://{h}") for v in values)
    assert (resolved, left, budget.exceeded) == (2, 4, 4)  # 250 chars hold two of six


def test_a_zip_entry_that_inflates_past_the_limit_is_not_inflated(
        tmp_path: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INSPECT_WATCH_MAX_LOG_ENTRY_MB", "1")
    big = sample("bad", repeat_events())
    big["pad"] = "0" * 5_000_000  # 5 MB that deflate to a few KB
    _good_and_bad(tmp_path, big)
    result, sink = scan(engine, tmp_path)
    [unreadable] = sink.kinds("unreadable")
    assert "INSPECT_WATCH_MAX_LOG_ENTRY_MB" in unreadable.message
    assert "samples/bad_epoch_1.json" in unreadable.message
    assert _samples_with_findings(sink) == {("evalA", "good"), ("evalB", "good")}
    assert result.exit_code == 3


def test_the_entry_limit_also_guards_inspects_reader(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The full tier reads samples through Inspect's reader, which inflates the entry
    whole: the size is checked before it is called."""
    from watcher.sources.base import LimitExceeded

    monkeypatch.setenv("INSPECT_WATCH_MAX_LOG_ENTRY_MB", "1")
    big = sample("bad", repeat_events())
    big["pad"] = "0" * 5_000_000
    _good_and_bad(tmp_path, big)
    src = LogSource(str(tmp_path / log_name("a")))
    [task] = src.tasks()
    for tier in ("content", "full"):
        with pytest.raises(LimitExceeded, match="over the 1 MB limit"):
            src.events(task, "bad", 1, since=None, types=None, tier=tier)  # type: ignore[arg-type]


def test_the_expansion_limit_holds_for_the_whole_sample_not_each_event(
        tmp_path: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """40 events, each naming one 100 KB attachment 1,000 times (issue 34, item 6): with a
    budget per event each event took all of it (40 budgets, 2.86 GB at the peak with the
    default); one budget for the sample holds the whole read to it, over every page."""
    monkeypatch.setenv("INSPECT_WATCH_MAX_EXPANSION_MB", "1")
    h = "d" * 32
    events = [tool_event(i, {"cmd": [f"attachment://{h}"] * 1000}) for i in range(40)]
    bomb = sample("bad", events, attachments={h: "y" * 100_000})
    _good_and_bad(tmp_path, bomb)
    src = LogSource(str(tmp_path))
    [task] = [t for t in src.tasks() if any(r.sample_id == "bad"
                                            for r in src.samples(t).samples)]
    added, since, done = 0, None, False
    while not done:  # page by page, as a watch reads it
        page = src.events(task, "bad", 1, since=since, types=None, tier="content", limit=7)
        # what was resolved: each tool event's arguments (its ``whole`` text is a copy)
        added += sum(json.dumps(e["args"]).count("y" * 100_000)
                     for e in page.events) * 100_000
        since, done = page.next, page.done
    assert 0 < added <= 1024 * 1024
    result, sink = scan(engine, tmp_path)
    assert [n for n in sink.kinds("limit") if "for the sample" in n.message]
    assert ("evalB", "good") in _samples_with_findings(sink)
