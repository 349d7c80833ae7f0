"""Reporters: golden output per format, hostile text, JSONL folding/merging, hand-off text.

Golden files live in tests/golden/; regenerate with
``UPDATE_GOLDEN=1 pytest tests/test_reporters.py`` and review the diff.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import threading
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import fsspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from watcher import handoff as handoff_mod
from watcher.findings import Finding, Notice
from watcher.handoff import detect_sample_cancel, handoff_text, sample_cancel_command
from watcher.reporters import (
    REPORTERS,
    HtmlReporter,
    JsonlReporter,
    MarkdownReporter,
    ReportContext,
    SampleSummary,
    StatusSnapshot,
    TaskStatus,
    TextReporter,
    find_outliers,
    merge_findings,
    read_jsonl,
    render_html,
    render_markdown,
    summary_from_jsonl,
)
from watcher.reporters.examples import (
    T0,
    example_notices,
    example_snapshots,
    example_summary,
)
from watcher.reporters.jsonl import finding_record

GOLDEN = Path(__file__).parent / "golden"


def check_golden(name: str, actual: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(actual, encoding="utf-8", newline="")
    assert path.exists(), f"missing golden {path}; run with UPDATE_GOLDEN=1"
    assert actual == path.read_bytes().decode("utf-8"), f"{name} differs from golden"


def run_reporter(r: object, *, statuses: bool = True) -> None:
    """Drive a reporter through the example run."""
    r.start(ReportContext(started_at=T0, sources=("http://127.0.0.1:7575",), log_dirs=("/logs",),
                       version="0.1.0"))
    snaps = example_snapshots()
    notices = example_notices()
    for i, f in enumerate(snaps):
        if statuses:
            r.status(StatusSnapshot(
                tasks=(TaskStatus("demo", "mockllm/model", running=3 - min(i, 3), done=i,
                                  total=7),
                       TaskStatus("other_task", "openai/gpt-4o", running=1)),
                findings_by_confidence={"high": i // 2, "low": 1},
                now=T0 + 100 * i, last_poll_at=T0 + 100 * i - 2, polls=10 * i))
        r.finding(f)
        if i == 2:
            r.notice(notices[0])
    r.notice(notices[1])
    r.stop(example_summary())


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


# --- registry ----------------------------------------------------------------------


def test_registry_names() -> None:
    assert set(REPORTERS) == {"text", "jsonl", "markdown", "html"}
    assert REPORTERS["text"] is TextReporter and REPORTERS["html"] is HtmlReporter


def test_registry_commands_agree_with_the_classes() -> None:
    """The registry spells each built-in reporter's commands so that choosing a format
    imports no other reporter; the class stays what decides."""
    from watcher.reporters.registry import builtin_commands

    for name in REPORTERS:
        assert builtin_commands(name) == REPORTERS[name].commands, name
    assert builtin_commands("nosuch") == frozenset()


def test_a_watch_imports_only_the_reporter_it_writes_with(tmp_path: Path) -> None:
    """``watch --format jsonl`` paid ~60 ms importing the HTML and Markdown renderers."""
    code = ("import sys, watcher.app; from watcher.reporters import get_reporter; "
            "get_reporter('jsonl', 'watch'); "
            "mods = [m for m in ('html', 'markdown', 'text', 'jsonl') "
            "if 'watcher.reporters.' + m in sys.modules]; print(mods)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "['jsonl']"


# --- text ----------------------------------------------------------------------------


def test_text_plain_golden_and_terminal_safe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    buf = io.StringIO()
    run_reporter(TextReporter(buf))
    out = buf.getvalue()
    check_golden("text_plain.txt", out)
    assert "\x1b" not in out and "\u202e" not in out and "\x07" not in out
    # new, escalated and ended: one line each, no evidence or hand-off without --verbose
    lines = out.splitlines()
    loop = [ln for ln in lines if "loop.repeat_tool_call" in ln]
    assert loop == ["22:14:00Z [MEDIUM] loop.repeat_tool_call 5× demo/7/1: bash called 5 "
                    "times with the same arguments",
                    "22:16:40Z [HIGH] escalated from medium loop.repeat_tool_call 14× demo/7/1: "
                    "bash called 14 times with the same arguments"]
    assert ("22:15:20Z [LOW] ended errors.tool_error_streak 3× demo/«-rf; echo $(id)»/2 "
            "(attempt 2): Tool errors in a row, over 1m00s") in lines
    assert "agent text" not in out and "kill -INT" not in out and "evidence:" not in out
    # the fake "all clear" line never starts a line of output
    assert not any(ln.lstrip().startswith("## inspect-watch") for ln in lines)


def test_text_verbose_shows_evidence_and_handoff_once_per_finding(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo printed 35 of 90 lines as the same seven-line hand-off, five times: with
    --verbose it comes once per finding (not again on escalation or end), and without
    it not at all."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    buf = io.StringIO()
    run_reporter(TextReporter(buf, verbose=True))
    out = buf.getvalue()
    check_golden("text_verbose.txt", out)
    assert out.count("inspect-watch only observes") == 3  # three findings, one hand-off each
    assert out.count("evidence: ") == 3
    assert "agent text (untrusted): «rm -rf /tmp/xRED evil › fake end ‹ ⏎ ## inspect-watch" in out
    assert not any(ln.lstrip().startswith("## inspect-watch") for ln in out.splitlines())


def test_text_tty_golden(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    buf = FakeTTY()
    run_reporter(TextReporter(buf, width=120))
    out = buf.getvalue()
    check_golden("text_tty.txt", out.replace("\x1b", "\\e").replace("\r", "\\r"))
    assert "\x1b[1;97;41m HIGH \x1b[0m" in out  # coloured badge
    assert re.search(r"\r\x1b\[\d+A\x1b\[J", out)  # status area erased in place
    # only our own escapes: none of the agent's OSC/clear-screen sequences survive
    assert "\x1b]" not in out and "\x1b[2J" not in out


def test_text_status_lines_fit_the_terminal_in_cells() -> None:
    """Status lines were cut by characters: a task named in double-width characters made
    a line twice as wide as the terminal, and each redraw left its wrapped rows behind."""
    from rich.cells import cell_len

    buf = FakeTTY()
    r = TextReporter(buf, width=40, color=False)
    tasks = tuple(TaskStatus("評価" * 30, "模型", running=1) for _ in range(3))
    r.status(StatusSnapshot(tasks=tasks, now=T0, last_poll_at=T0, polls=1))
    drawn = buf.getvalue().split("\n")[:-1]
    assert len(drawn) == 4 and r._status_drawn == 4
    assert all(cell_len(re.sub(r"\r|\x1b\[[0-9;]*[A-Za-z]", "", ln)) <= 39 for ln in drawn)
    assert drawn[1].startswith("  1 running  0 done  評価") and drawn[1].endswith("…")


def test_text_status_keeps_the_findings_count_at_60_columns() -> None:
    """At 60 columns the headline cut off the findings count, the one number that
    matters; and a fleet of tasks filled the screen with a line each."""
    buf = FakeTTY()
    r = TextReporter(buf, width=60, color=False)
    tasks = tuple(TaskStatus(f"task-with-a-long-name-{i}", "openai/gpt-4o-2024-08-06",
                             running=3, done=i, total=10,
                             findings_by_confidence={"high": 1} if i == 7 else {})
                  for i in range(12))
    r.status(StatusSnapshot(tasks=tasks, findings_by_confidence={"high": 2, "low": 1},
                            now=T0, last_poll_at=T0 - 1, polls=40))
    lines = r.status_lines(r._last_status, 59)  # type: ignore[arg-type]
    assert lines[0] == "inspect-watch · findings: 2 high, 0 medium, 1 low"
    assert len(lines) == 6  # the headline, 4 tasks, and one line for the other 8
    assert lines[1].startswith("  3 running  7 done of 10  1 high  task-with-a-long-name-7")
    assert lines[-1] == "  … 8 more tasks: 24 running, 56 done, 0 finished"
    wide = r.status_lines(r._last_status, 160)  # type: ignore[arg-type]
    assert wide[0] == ("inspect-watch · findings: 2 high, 0 medium, 1 low · 36 running, 66 "
                       "done of 120 · 40 polls, last 1.0s ago")


def test_text_ids_full_of_escapes_are_shown_not_stripped() -> None:
    """A sample id made of escape codes was cleaned like prose and shown as a bare plain
    id (``\\e[31mid\\e[0m`` read ``id``): it is shown, visibly, and quoted."""
    f = example_snapshots()[0]
    odd = replace(f, sample=replace(f.sample, sample_id="\x1b[31mid\x1b[0m",
                                    task="\x1b]0;t\x07demo"))
    buf = io.StringIO()
    r = TextReporter(buf, color=False)
    r.finding(odd)
    r.finding(replace(odd, status="ended"))
    r.notice(replace(example_notices()[0], sample=odd.sample))
    out = buf.getvalue()
    assert "\x1b" not in out and "\x07" not in out
    assert "/id/" not in out and "«␛]0;t␇demo»/«␛[31mid␛[0m»/1:" in out  # the new line
    assert "ended loop.repeat_tool_call 5× «␛]0;t␇demo»/«␛[31mid␛[0m»/1" in out
    assert out.count("«␛]0;t␇demo»") == 3  # two lines and the notice
    buf = io.StringIO()
    TextReporter(buf, color=False, verbose=True).finding(odd)
    assert "sample id " not in buf.getvalue() and "sample «␛[31mid␛[0m»" in buf.getvalue()


def test_text_no_color_env_and_explicit_color(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    buf = FakeTTY()
    r = TextReporter(buf)
    r.finding(example_snapshots()[0])
    assert "[MEDIUM]" in buf.getvalue() and "\x1b[1;30;43m" not in buf.getvalue()
    buf2 = io.StringIO()
    TextReporter(buf2, color=True).finding(example_snapshots()[0])
    assert "\x1b[1;30;43m MEDIUM \x1b[0m" in buf2.getvalue()


def test_text_quiet_and_min_confidence() -> None:
    buf = io.StringIO()
    run_reporter(TextReporter(buf, quiet=True, min_confidence="medium"))
    out = buf.getvalue()
    assert "status:" not in out and "watching http" not in out
    assert "inspect-watch: stopped" not in out
    assert "errors.tool_error_streak" not in out  # low confidence hidden
    assert "[HIGH] stall.no_events 1× other_task/12/1: sample silent for 15m00s" in out
    assert "notice [gap]" in out  # notices are never hidden


def test_text_repeated_snapshot_not_reprinted() -> None:
    buf = io.StringIO()
    r = TextReporter(buf, quiet=True)
    f = example_snapshots()[0]
    r.finding(f)
    r.finding(replace(f, count=f.count + 1, last_seen=f.last_seen + 5))
    assert buf.getvalue().count("loop.repeat_tool_call") == 1


def test_human_reports_leave_out_facts_shown_on_their_own_lines() -> None:
    """first_seen/last_seen are raw epochs (1.8e+09 in a facts line); the "seen" line
    shows them as times. JSONL keeps every fact."""
    f = example_snapshots()[0]
    facts = {"count": 5, "first_seen": T0, "last_seen": T0 + 30.0, "span": 30.0,
             "excerpt": "cat /tmp/status", "window": "12 events"}
    f = replace(f, evidence=replace(f.evidence, facts=facts))
    block = TextReporter(io.StringIO(), quiet=True).finding_block(f, "new")
    evidence = [line for line in block.splitlines() if "evidence:" in line]
    assert evidence == ["  evidence: window of 12 events"]
    assert "seen: " in block and "5 times" in block
    md = render_markdown(replace(example_summary(), findings=(f,)))
    assert "window of 12 events" in md and "first\\_seen" not in md
    assert finding_record(f)["evidence"]["facts"] == facts  # JSONL keeps them


def test_text_status_lines_throttled_when_not_tty() -> None:
    buf = io.StringIO()
    r = TextReporter(buf, status_every=60)
    t = (TaskStatus("demo", "m", running=1),)
    r.status(StatusSnapshot(tasks=t, now=T0, last_poll_at=T0, polls=1))
    r.status(StatusSnapshot(tasks=(TaskStatus("demo", "m", done=1),), now=T0 + 10, polls=2))
    r.status(StatusSnapshot(tasks=t, now=T0 + 100, polls=3))  # unchanged since first print
    r.status(StatusSnapshot(tasks=(TaskStatus("demo", "m", done=1),), now=T0 + 200, polls=4))
    lines = [ln for ln in buf.getvalue().splitlines() if ln.startswith("status:")]
    assert len(lines) == 2 and "0 running, 1 done" in lines[1]


def test_text_appends_generated_handoff_to_rule_advice() -> None:
    buf = io.StringIO()
    f = replace(example_snapshots()[0], handoff="Check whether the task allows retries.")
    TextReporter(buf, verbose=True).finding(f)
    out = buf.getvalue()
    advice = out.index("next: Check whether the task allows retries.")
    assert advice < out.index("inspect-watch only observes") < out.index("kill -INT 4242")


def test_text_fills_missing_handoff() -> None:
    buf = io.StringIO()
    f = replace(example_snapshots()[0], handoff="")
    TextReporter(buf, verbose=True).finding(f)
    assert "inspect-watch only observes" in buf.getvalue()
    assert "kill -INT 4242" in buf.getvalue()


# --- jsonl ------------------------------------------------------------------------------


class CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, s: str) -> int:
        self.writes.append(s)
        return super().write(s)


def test_jsonl_golden_one_write_per_line() -> None:
    stream = CountingStream()
    run_reporter(JsonlReporter(stream=stream))
    out = stream.getvalue()
    check_golden("findings.jsonl", out)
    assert all(w.endswith("\n") and w.count("\n") == 1 for w in stream.writes)
    assert out.isascii() and "\x1b" not in out
    recs = [json.loads(ln) for ln in out.splitlines()]
    kinds = [r["kind"] for r in recs]
    assert kinds.count("finding") == 5 and kinds.count("notice") == 2
    ids = [r["id"] for r in recs if r["kind"] == "finding"]
    assert ids[0] == ids[2]  # the escalation is a new line with the same id
    assert recs[0]["schema"] == 1


def test_jsonl_roundtrip_keeps_agent_text_exactly() -> None:
    stream = io.StringIO()
    r = JsonlReporter(stream=stream)
    f = example_snapshots()[0]
    r.finding(f)
    back = Finding.from_dict(json.loads(stream.getvalue()))
    assert back.evidence.excerpts == f.evidence.excerpts
    assert back.to_dict() == f.to_dict()


def test_jsonl_excerpts_capped_unless_full() -> None:
    f = example_snapshots()[0]
    long = replace(f, evidence=replace(f.evidence, excerpts=("x" * 5000,) * 8))
    short, full = io.StringIO(), io.StringIO()
    JsonlReporter(stream=short).finding(long)
    JsonlReporter(stream=full, full_evidence=True).finding(long)
    s, u = json.loads(short.getvalue()), json.loads(full.getvalue())
    assert len(s["evidence"]["agent_text"]) == 5 and len(s["evidence"]["agent_text"][0]) < 600
    assert s["evidence"]["agent_text_truncated"] is True
    assert u["evidence"]["agent_text"] == ["x" * 5000] * 8
    assert "agent_text_truncated" not in u["evidence"]


def test_jsonl_non_finite_facts_are_strict_json() -> None:
    f = example_snapshots()[0]
    odd = replace(f, evidence=replace(f.evidence, facts={"ratio": float("nan"), "obj": object()}))
    stream = io.StringIO()
    JsonlReporter(stream=stream).finding(odd)
    rec = json.loads(stream.getvalue(), parse_constant=lambda c: pytest.fail(c))
    assert rec["evidence"]["facts"]["ratio"] is None
    assert rec["evidence"]["facts"]["obj"].startswith("<object")


def test_json_safe_fast_path_matches_the_general_walk() -> None:
    """The exact-type fast path gives what the general ``isinstance`` walk gives, nested
    NaN, tuples, sets, subclasses of str and int, and non-text keys included."""
    from enum import IntEnum, StrEnum

    from watcher.reporters.jsonl import _json_safe, _json_safe_any

    class Colour(StrEnum):
        RED = "red"

    class Level(IntEnum):
        HIGH = 4

    value = {"a": [1, 2.5, float("nan"), (True, None, "x")], 3: {"inf": float("-inf")},
             "set": {7}, "enum": Colour.RED, Level.HIGH: Level.HIGH, "obj": [object]}
    got = _json_safe(value)
    assert got == _json_safe_any(value)
    assert got["a"][2] is None and got["3"]["inf"] is None and got["a"][3] == [True, None, "x"]
    assert got["set"] == [7] and got["enum"] is Colour.RED and got[str(Level.HIGH)] is Level.HIGH
    assert got["obj"] == [str(object)]


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(min_value=2**63 - 3)
    | st.floats() | st.floats(min_value=-1e-3, max_value=1e-3) | st.floats(min_value=1e15)
    | st.text() | st.sampled_from(["\ud800", "a\udfffb", "\x7f", "\U0001f600\u2028", "1e-05"]),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=5) | st.integers(), inner, max_size=4),
    max_leaves=20)


@settings(max_examples=400, deadline=None)
@given(_JSONISH)
def test_jsonl_lines_are_pythons_json_exactly(value: object) -> None:
    """A line is byte for byte what Python's ``json.dumps(ensure_ascii=True)`` writes,
    though orjson writes it: floats of any size (1e-05, not 1e-5), text outside ASCII,
    DEL, lone surrogates and integers past 64 bits (those two through ``json``)."""
    from watcher.reporters import jsonl
    from watcher.reporters.jsonl import _json_safe, dumps_line

    assert jsonl._FAST, "the installed orjson writes these lines (its probe agreed)"
    safe = _json_safe({"v": value})
    expected = json.dumps(safe, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    line = dumps_line({"v": value})
    assert line == expected + "\n"
    assert line.isascii() and "\x7f" not in line


def test_jsonl_file_appends_from_two_writers(tmp_path: Path) -> None:
    path = tmp_path / "findings.jsonl"
    a, b = JsonlReporter(path), JsonlReporter(path)
    snaps = example_snapshots()
    for r in (a, b):
        r.start(ReportContext())
    a.finding(snaps[0])
    b.finding(snaps[1])
    a.finding(snaps[2])
    b.notice(example_notices()[0])
    a.stop()
    b.stop()
    lines = path.read_text().splitlines()
    assert len(lines) == 4 and all(json.loads(ln) for ln in lines)


def test_merge_folds_by_id_and_skips_truncated_last_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    snaps = example_snapshots()
    one, two = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    ra, rb = JsonlReporter(one), JsonlReporter(two)
    for f in snaps[:3]:
        ra.finding(f)
    ra.stop()
    for f in snaps[1:]:  # a second watcher saw the same episodes plus later ones
        rb.finding(f)
    rb.notice(example_notices()[0])
    rb.stop()
    with open(two, "a") as fh:
        fh.write('{"schema":1,"kind":"finding","id":"trunc')  # writer killed mid-line
    with caplog.at_level(logging.WARNING):
        merged = merge_findings([one, two])
    assert "truncated last line" in caplog.text
    assert len(merged) == 3 and len({f.id for f in merged}) == 3
    by_rule = {f.rule: f for f in merged}
    assert by_rule["loop.repeat_tool_call"].confidence == "high"  # later snapshot won
    assert by_rule["errors.tool_error_streak"].status == "ended"
    assert [f.first_seen for f in merged] == sorted(f.first_seen for f in merged)


def test_merge_fold_prefers_fuller_snapshot_regardless_of_file_order(tmp_path: Path) -> None:
    early, late = example_snapshots()[0], example_snapshots()[2]
    p1, p2 = tmp_path / "1.jsonl", tmp_path / "2.jsonl"
    JsonlReporter(p1).finding(late)
    JsonlReporter(p2).finding(early)
    (merged,) = merge_findings([p1, p2])
    assert merged.confidence == "high" and merged.count == late.count


def test_merge_through_fsspec_memory_and_file_urls(tmp_path: Path) -> None:
    stream = io.StringIO()
    r = JsonlReporter(stream=stream)
    for f in example_snapshots():
        r.finding(f)
    with fsspec.open("memory://watch/a.jsonl", "w") as fh:
        fh.write(stream.getvalue())
    local = tmp_path / "b.jsonl"
    local.write_text(stream.getvalue())
    merged = merge_findings(["memory://watch/a.jsonl", f"file://{local}"])
    assert {f.rule for f in merged} == {"loop.repeat_tool_call", "errors.tool_error_streak",
                                       "stall.no_events"}


def test_read_jsonl_skips_garbage_in_the_middle(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stream = io.StringIO()
    r = JsonlReporter(stream=stream)
    r.finding(example_snapshots()[0])
    r.notice(example_notices()[1])
    lines = stream.getvalue().splitlines()
    path = tmp_path / "x.jsonl"
    path.write_text(lines[0] + "\nnot json\n[1,2]\n" + lines[1] + "\n" + lines[1] + "\n")
    with caplog.at_level(logging.WARNING):
        findings, notices = read_jsonl([path])
    assert len(findings) == 1 and len(notices) == 1  # duplicate notice folded
    assert notices[0] == example_notices()[1]
    assert caplog.text.count("unparseable line") == 2


# hostile values for each field a report reads: wrong types, times out of range
_HOSTILE = [[1, 2], {"a": 1}, "noon", 1e300, -1e300, float("nan"), None, True, 10**30, ""]


def _hostile_records() -> list[tuple[str, dict[str, object]]]:
    """A good finding and notice record, each with one field made hostile at a time."""
    stream = io.StringIO()
    r = JsonlReporter(stream=stream)
    r.finding(example_snapshots()[2])
    r.notice(example_notices()[0])
    finding, notice = (json.loads(ln) for ln in stream.getvalue().splitlines())
    out: list[tuple[str, dict[str, object]]] = []
    for base, top in ((finding, finding), (notice, notice)):
        fields = [(k, None) for k in top if k not in ("kind", "schema")]
        nested = base.get("evidence") or base.get("sample") or {}
        holder = "evidence" if "evidence" in base else "sample"
        fields += [(k, holder) for k in nested]
        for key, parent in fields:
            for value in _HOSTILE:
                rec = json.loads(json.dumps(base))
                if parent is None:
                    rec[key] = value
                else:
                    rec[parent][key] = value
                if key == "timestamps":  # one bad time among good ones
                    rec[parent][key] = [T0, value]
                if key != "id" and "id" in rec:  # not folded into the good finding
                    rec["id"] = "hostile"
                out.append((f"{parent or ''}.{key}={value!r:.20}", rec))
    return out


@pytest.mark.parametrize("fmt", ["markdown", "html"])
def test_report_skips_and_counts_malformed_records(tmp_path: Path, fmt: str) -> None:
    """One malformed record (evidence as a list, string timestamps, first_seen: 1e300, ...)
    is skipped and counted; the report of the rest is written (no exit 3, no traceback)."""
    from click.testing import CliRunner

    from watcher.cli import main

    good = io.StringIO()
    JsonlReporter(stream=good).finding(example_snapshots()[0])
    failures = []
    skipped_seen = 0
    for label, rec in _hostile_records():
        path = tmp_path / "x.jsonl"
        path.write_text(good.getvalue() + json.dumps(rec) + "\n")
        result = CliRunner().invoke(main, ["report", str(path), "--format", fmt])
        if result.exit_code != 0 or result.exception is not None:
            failures.append(f"{label}: exit {result.exit_code} {result.exception!r}")
            continue
        if example_snapshots()[0].title not in result.stdout:
            failures.append(f"{label}: the good finding is missing")
        if "skipped_records" in result.stdout or "skipped" in result.stdout:
            skipped_seen += 1
            assert "1 malformed record(s)" in result.stderr.replace("\\", "")
    assert not failures, failures[:10]
    assert skipped_seen > 50  # most hostile values are refused, and said


def test_summary_from_jsonl_counts_what_it_skipped(tmp_path: Path) -> None:
    good = io.StringIO()
    JsonlReporter(stream=good).finding(example_snapshots()[0])
    rec = json.loads(good.getvalue())
    path = tmp_path / "x.jsonl"
    bad = [dict(rec, evidence=[1]), dict(rec, first_seen=1e300),
           dict(rec, evidence=dict(rec["evidence"], timestamps=["noon"]))]
    path.write_text(good.getvalue() + "".join(json.dumps(b) + "\n" for b in bad) + "junk\n")
    skipped: list[str] = []
    summary = summary_from_jsonl([path], skipped)
    assert len(summary.findings) == 1
    assert [s.split(":")[1] for s in skipped] == ["2", "3", "4", "5"]
    [note] = [n for n in summary.notices if n.kind == "skipped_records"]
    assert note.details["skipped"] == 4 and "4 malformed record(s)" in note.message


# --- markdown -------------------------------------------------------------------------


def md_tokens(text: str) -> list:
    return MarkdownIt("commonmark", {"html": True}).enable("table").parse(text)


def test_markdown_golden() -> None:
    check_golden("report.md", render_markdown(example_summary()))


def test_markdown_structure_is_only_ours() -> None:
    text = render_markdown(example_summary())
    tokens = md_tokens(text)
    headings = []
    for i, t in enumerate(tokens):
        if t.type == "heading_open":
            headings.append((t.tag, tokens[i + 1].content))
    h2 = [c for tag, c in headings if tag == "h2"]
    assert h2 == ["Tasks", "Outliers", "Errored samples", "Findings (3)", "Notices (2)",
                  "Logs"]
    h3 = [c for tag, c in headings if tag == "h3"]
    assert h3 == ["High confidence (2)", "Medium confidence (0)", "Low confidence (1)"]
    assert not any("all clear" in c for _, c in headings)
    assert not any(t.type in ("html_block", "html_inline") for t in tokens)
    inline_children = [c for t in tokens for c in (t.children or [])]
    assert not any(c.type in ("html_inline", "link_open", "image") for c in inline_children)
    rendered = MarkdownIt("commonmark", {"html": True}).enable("table").render(text)
    assert "<script" not in rendered and "javascript:" not in rendered.split("<pre>")[0]


def test_markdown_contents() -> None:
    text = render_markdown(example_summary())
    assert "| demo | mockllm/model | 7 | 7 | 0 | 1 | accuracy 0.857, stderr 0.143 |" in text
    assert "sample `7` epoch 1: time 6m40s" in text
    assert "sample `7` epoch 1: tokens 90,000" in text
    assert "retried 1× then succeeded" in text  # errored sample that succeeded on retry
    assert "`inspect view --log-dir /logs`" in text
    high = text.index("### High confidence")
    assert high < text.index("### Medium confidence") < text.index("### Low confidence")
    assert text.count("#### HIGH: Repeated identical tool call") == 1  # folded by id


def test_markdown_from_jsonl_only(tmp_path: Path) -> None:
    path = tmp_path / "f.jsonl"
    r = JsonlReporter(path)
    for f in example_snapshots():
        r.finding(f)
    for n in example_notices():
        r.notice(n)
    r.stop()
    text = render_markdown(summary_from_jsonl([path]))
    assert "## Findings (3)" in text and "## Notices (2)" in text
    # a task known only from findings: nothing about its samples is claimed, and why is said
    assert "| demo | mockllm/model | ? | ? | ? | ? | ? |" in text
    assert "known only from findings, which hold no sample counts or scores" in text
    assert text.count("Not known: no sample data was read (see Tasks).") == 2


def test_markdown_reporter_writes_file_with_live_findings(tmp_path: Path) -> None:
    out = tmp_path / "report.md"
    r = MarkdownReporter(out)
    run_reporter(r, statuses=False)
    assert out.read_text() == render_markdown(example_summary())
    r2 = MarkdownReporter(tmp_path / "live.md")
    r2.start(ReportContext(log_dirs=("/logs",)))
    for f in example_snapshots():
        r2.finding(f)
    r2.stop(None)
    assert "## Findings (3)" in (tmp_path / "live.md").read_text()


def _read_fifo(path: Path, into: list[str]) -> threading.Thread:
    def read() -> None:
        with open(path, encoding="utf-8") as fh:
            into.append(fh.read())
    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("cls", [MarkdownReporter, HtmlReporter])
def test_report_is_written_through_symlinks_and_fifos_never_replacing_them(
        tmp_path: Path, cls: type[MarkdownReporter]) -> None:
    """A report path is written as ``> PATH`` would: through a symlink (the link stays),
    into a FIFO (which stays a FIFO), and atomically for a regular file with a temporary
    name nobody could plant: a ``PATH.tmp`` symlink left beforehand is not followed."""
    summary = example_summary()
    expected = cls.render(summary)
    real = tmp_path / "real.md"
    real.write_text("old")
    link = tmp_path / "link.md"
    link.symlink_to(real)
    cls(link).stop(summary)
    assert link.is_symlink() and real.read_text() == expected

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = _read_fifo(fifo, got)
    cls(fifo).stop(summary)
    reader.join(30)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and got == [expected]

    victim = tmp_path / "victim"
    victim.write_text("precious")
    out = tmp_path / "report.md"
    (tmp_path / "report.md.tmp").symlink_to(victim)
    cls(out).stop(summary)
    assert victim.read_text() == "precious" and out.read_text() == expected
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".report.md.")]


def test_report_over_an_existing_file_keeps_its_mode(tmp_path: Path) -> None:
    out = tmp_path / "r.md"
    out.write_text("old")
    os.chmod(out, 0o640)
    MarkdownReporter(out).stop(example_summary())
    assert stat.S_IMODE(out.stat().st_mode) == 0o640 and out.read_text() != "old"


def test_state_is_saved_through_a_symlink_owner_only(tmp_path: Path) -> None:
    from watcher.state import WatchState

    real = tmp_path / "real.state"
    link = tmp_path / "s.state"
    link.symlink_to(real)
    state = WatchState(path=link)
    state.finished.add("e|1|1")
    state.save()
    assert link.is_symlink() and WatchState.load(link).finished == {"e|1|1"}
    assert stat.S_IMODE(real.stat().st_mode) == 0o600


def test_outliers_need_factor_and_floor() -> None:
    def s(i: int, t: float, tok: int) -> SampleSummary:
        return SampleSummary(task="t", model="m", sample_id=str(i), total_time=t,
                             total_tokens=tok)

    quick = [s(1, 0.5, 10), s(2, 0.5, 10), s(3, 3.0, 100)]  # 6x median but under floors
    assert find_outliers(quick) == []
    slow = [s(1, 100, 1000), s(2, 110, 1000), s(3, 400, 1000), s(4, 120, 1000)]
    out = find_outliers(slow)
    assert [(o.sample.sample_id, o.metric) for o in out] == [("3", "total_time")]


# --- html -----------------------------------------------------------------------------


class TagCollector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_html_golden() -> None:
    check_golden("report.html", render_html(example_summary()))


def test_html_is_self_contained_and_inert() -> None:
    page = render_html(example_summary())
    p = TagCollector()
    p.feed(page)
    tags = {t for t, _ in p.tags}
    assert tags <= {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "h4",
                    "p", "i", "b", "table", "tr", "th", "td", "ul", "li", "code", "pre", "div",
                    "span"}
    for _, attrs in p.tags:
        assert not any(k.startswith("on") or k in ("href", "src") for k in attrs)
    csp = [a for t, a in p.tags if t == "meta" and a.get("http-equiv")]
    assert csp and "default-src 'none'" in (csp[0]["content"] or "")
    text = "".join(p.text)
    assert "<script>alert(1)</script>" in text  # shown as text, not markup
    assert "\x1b" not in page and "\u202e" not in page


def test_html_timeline_bars_positioned() -> None:
    page = render_html(example_summary())
    bars = re.findall(r'class="bar (\w+)" style="left:([\d.]+)%;width:([\d.]+)%"', page)
    assert len(bars) == 3
    for _, left, width in bars:
        assert 0 <= float(left) <= 100 and float(left) + float(width) <= 100.01
    # the stall finding runs 900 s of a 1300 s window
    assert ("high", "7.69", "69.23") in bars


def test_html_reporter_writes_file(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    run_reporter(HtmlReporter(out), statuses=False)
    assert out.read_text() == render_html(example_summary())


# --- hand-off ---------------------------------------------------------------------------


def hostile_finding() -> Finding:
    f = example_snapshots()[1]
    return replace(f, sample=replace(f.sample, task="my task; rm -rf ~",
                                     sample_id="--action=error $(reboot)"))


def test_handoff_is_truthful_and_quotes_ids() -> None:
    f = hostile_finding()
    text = handoff_text(f, 4242, True)
    assert "only observes" in text and "has not cancelled" in text
    assert "kill -INT 4242" in text
    assert not re.search(r"(?<!never plain )kill -(9|TERM|KILL)\b", text)
    cmd = sample_cancel_command(f, dry_run=True)
    assert cmd in text
    argv = shlex.split(cmd)
    assert argv[:4] == ["inspect", "ctl", "sample", "cancel"]
    assert "--dry-run" in argv
    sep = argv.index("--")
    assert argv[sep + 1:] == ["my task; rm -rf ~", "--action=error $(reboot)", "2"]
    assert "--action=error $(reboot)" not in argv[:sep]


def test_handoff_without_ctl_or_pid() -> None:
    f = example_snapshots()[0]
    text = handoff_text(f, None, False)
    assert "inspect ctl" not in text and "kill" not in text
    assert "terminal UI" in text and "only observes" in text


def test_handoff_of_a_remote_eval_says_where_to_act() -> None:
    """Read through a shared sample buffer there is no control channel: the text says
    so, and puts every way to stop the sample on the machine running the eval."""
    f = hostile_finding()
    text = handoff_text(f, None, True, remote=True)
    assert "no control channel" in text and "only observes" in text
    where = text.index("on the machine running the eval")
    assert where < text.index("terminal UI") < text.index("inspect ctl sample cancel")
    assert "both there, where the eval's control channel is" in text
    local = handoff_text(f, None, True)
    assert "machine" not in local and "control channel" not in local


def test_detect_sample_cancel(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert detect_sample_cancel() is True  # the pinned inspect_ai has it
    fake = tmp_path / "inspect_ai"
    (fake / "_cli" / "ctl").mkdir(parents=True)
    (fake / "_cli" / "ctl" / "_sample.py").write_text("# no cancel here\n")

    class Spec:
        submodule_search_locations = [str(fake)]

    detect_sample_cancel.cache_clear()
    monkeypatch.setattr(handoff_mod.importlib.util, "find_spec", lambda name: Spec())
    try:
        assert detect_sample_cancel() is False
    finally:
        detect_sample_cancel.cache_clear()


def test_notice_roundtrip_via_jsonl() -> None:
    stream = io.StringIO()
    r = JsonlReporter(stream=stream)
    for n in example_notices():
        r.notice(n)
    recs = [json.loads(ln) for ln in stream.getvalue().splitlines()]
    assert [r["kind"] for r in recs] == ["notice", "notice"]
    assert recs[0]["notice"] == "gap" and recs[0]["sample"]["sample_id"] == "7"
    assert isinstance(Notice(kind="x", message="y"), Notice)


# -- reporters other packages register (entry point group inspect_watch.reporters) -----

TSV_REPORTER = '''
from watcher.reporters import Reporter


class TsvReporter(Reporter):
    """One line per finding snapshot: rule, sample, confidence; for a report, per
    finding of the summary."""

    name = "tsv"
    commands = frozenset({"watch", "report"})

    def __init__(self, path=None, *, stream=None):
        self.out = open(path, "a") if path else stream

    def finding(self, f):
        self.out.write(f"{f.rule}\\t{f.sample.sample_id}\\t{f.confidence}\\n")

    def stop(self, summary=None):
        if summary is not None:
            self.out.write(f"# {len(summary.findings)} findings\\n")
        self.out.flush()


class NotAReporter:
    pass
'''


def _reporter_package(site: Path) -> None:
    """An installed package registering reporters, as a third party would."""
    site.mkdir()
    (site / "tsv_reporter.py").write_text(TSV_REPORTER)
    info = site / "tsv_reporter-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tsv-reporter\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[inspect_watch.reporters]\n"
        "tsv = tsv_reporter:TsvReporter\n"
        "jsonl = tsv_reporter:TsvReporter\n"  # cannot replace a built-in
        "broken = tsv_reporter:NotAReporter\n")


def _watcher(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run([sys.executable, "-m", "watcher", *args], capture_output=True,
                          text=True, env=env, timeout=300)


@pytest.mark.slow  # installs a package
def test_a_registered_reporter_serves_watch_and_report(tmp_path: Path) -> None:
    from tests.corpus import CORPUS

    site = tmp_path / "site"
    _reporter_package(site)
    logs = tmp_path / "logs"
    logs.mkdir()
    shutil.copy(CORPUS / "docent-intercode-ctf-gpt4o.eval", logs)
    tsv, jsonl = tmp_path / "f.tsv", tmp_path / "f.jsonl"
    res = _watcher(site, "watch", "--log-dir", str(logs), "--once", "--format", "tsv",
                   "-o", str(tsv))
    assert res.returncode == 0, res.stderr
    res = _watcher(site, "watch", "--log-dir", str(logs), "--once", "--format", "jsonl",
                   "-o", str(jsonl))
    assert res.returncode == 0, res.stderr
    records = [json.loads(line) for line in jsonl.read_text().splitlines()]
    # the registered name "jsonl" did not replace the built-in one
    assert records and all("kind" in d for d in records)
    lines = tsv.read_text().splitlines()
    assert lines[:-1] == [f"{d['rule']}\t{d['sample_id']}\t{d['confidence']}" for d in records
                          if d["kind"] == "finding"]
    assert lines[-1].startswith("# ")  # stop() had the summary
    res = _watcher(site, "report", str(jsonl), "--format", "tsv", "--no-logs")
    assert res.returncode == 0, res.stderr
    assert res.stdout.endswith(" findings\n")
    # a name that is neither built in nor a reporter is refused, naming what there is
    for name, why in (("nosuch", "registered one (broken, tsv)"),
                      ("broken", "not a subclass of watcher.reporters.Reporter")):
        res = _watcher(site, "watch", "--log-dir", str(logs), "--once", "--format", name)
        assert res.returncode == 2 and why in res.stderr, res.stderr


def test_built_in_reporters_are_found_for_their_commands() -> None:
    from watcher.reporters import ReporterError, get_reporter

    assert get_reporter("text", "watch") is TextReporter
    assert get_reporter("html", "report") is HtmlReporter
    assert REPORTERS["jsonl"] is JsonlReporter
    with pytest.raises(ReporterError, match="not for `report`"):
        get_reporter("text", "report")
    with pytest.raises(ReporterError, match="takes text, jsonl"):
        get_reporter("nosuch", "watch")


# --- facts in words ---------------------------------------------------------------------


def test_facts_read_as_words_in_every_human_report() -> None:
    """Evidence read like internals (``near_identical=2, window_count=2, window=«12
    events»``): one table turns each fact into words for text, Markdown and HTML."""
    from watcher.reporters.facts import fact_phrases

    facts = {"event_type": "model", "compared_on": "whole values", "compared": "",
             "unknown_prompts": 0, "near_identical": 2, "window_count": 2,
             "window": "12 events", "count": 2, "span": 3.0, "episode": 1}
    assert fact_phrases(facts).text() == "2 near-identical, 2 in a window of 12 events"
    f = replace(example_snapshots()[0], evidence=replace(example_snapshots()[0].evidence,
                                                         facts=facts))
    block = TextReporter(io.StringIO(), quiet=True).finding_block(f, "new")
    assert "  evidence: 2 near-identical, 2 in a window of 12 events" in block.splitlines()
    md = render_markdown(replace(example_summary(), findings=(f,)))
    assert "evidence: 2 near\\-identical, 2 in a window of 12 events" in md
    assert "evidence: 2 near-identical, 2 in a window of 12 events" in render_html(
        replace(example_summary(), findings=(f,)))
    # a prefix comparison is said; agent-written values are quoted, cleaned and marked
    said = fact_phrases({"compared_on": "first 256 characters", "value": "4\x1b[2J2 » ok «",
                         "tool": "bash; rm", "searched": 6}).text()
    assert said == ("compared on the first 256 characters only, answer «42 › ok ‹», "
                    "tool «bash; rm», not in the 6 earlier outputs searched "
                    "(«…»: agent text, untrusted)")
    # a fact no detector declares is still shown, plainly (its text taken as the agent's)
    assert fact_phrases({"silent_seconds": 900.0, "note": "x"}).text() == (
        "silent seconds: 900, note: «x» («…»: agent text, untrusted)")


def test_every_fact_a_detector_declares_has_words() -> None:
    from watcher.engine.detectors import FACTS_OF
    from watcher.reporters.facts import PHRASES, SHOWN_ELSEWHERE

    declared = set().union(*FACTS_OF.values()) - SHOWN_ELSEWHERE
    assert declared - set(PHRASES) == set()
