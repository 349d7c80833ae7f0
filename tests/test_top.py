"""``inspect-watch top`` in Textual's own harness (``App.run_test``, pilot key presses),
fed by the real watch over real scripted evals: their logs (``top --log-dir``) and a
live eval launched after the screen started. The real terminal: tests/test_top_tmux.py."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Static

from tests.evalproc import start_eval
from watcher import app
from watcher.reporters.examples import example_snapshots
from watcher.summary import SampleProgress, StatusSnapshot, TaskStatus
from watcher.top.app import (
    NO_ACTIONS,
    EventsScreen,
    FindingScreen,
    SamplesScreen,
    TopApp,
)
from watcher.top.model import Filters, TopSink, View, handoff_command, sample_rows
from watcher.top.run import top_options

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def hostile_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The loops eval (a repeated call, a submit loop, a clean sample) whose submit loop
    writes escapes, bidi and a fake "inspect-watch says" line; run once, its log kept."""
    tmp = tmp_path_factory.mktemp("loops")
    ev = start_eval(tmp, "loops", "-T", "hostile=true")
    try:
        assert ev.wait() == 0, ev.output.read_text()[-2000:]
    finally:
        ev.stop()
    return ev.log_dir


def screen_rows(top: TopApp) -> list[str]:
    """What the terminal would show, row by row (the compositor's text)."""
    return [strip.text for strip in top.screen._compositor.render_strips()]


def joined(rows: list[str]) -> str:
    """The rows with each wrapped continuation (``┊``) joined to the row before."""
    return re.sub(r" *\n *┊ ", " ", "\n".join(r.rstrip() for r in rows))


def screen_text(top: TopApp) -> str:
    return "\n".join(screen_rows(top))


async def until(pilot: Any, what: Callable[[], bool], limit: float = 120.0) -> None:
    """Let the app run until ``what`` holds; the limit only guards a hung watch."""
    deadline = time.monotonic() + limit
    while not what():
        if time.monotonic() > deadline:
            raise AssertionError("the screen never showed what the test waits for:\n"
                                 + screen_text(pilot.app))
        await pilot.pause(0.1)


def run_top(options: app.WatchOptions, scenario: Callable[[Any, TopApp], Awaitable[None]],
            size: tuple[int, int] = (80, 24), **kw: Any) -> TopApp:
    """The screen over a real watch (as ``inspect-watch top`` runs them), driven by
    ``scenario``; the watch is stopped after."""
    sink = TopSink()
    handle = app.start(top_options(options), sinks=[sink])
    top = TopApp(sink, mode="logs" if options.log_dir else "live",
                 read_events=handle.recent_events, **kw)

    async def main() -> None:
        async with top.run_test(size=size) as pilot:
            await scenario(pilot, top)

    try:
        asyncio.run(main())
    finally:
        handle.stop()
        handle.wait(60)
    return top


def test_top_browses_logs_fleet_drill_in_finding_events_copy(hostile_logs: Path) -> None:
    seen: dict[str, Any] = {}

    async def scenario(pilot: Any, top: TopApp) -> None:
        await until(pilot, lambda: top.view.ended and "3/0/3" in screen_text(top))
        text = screen_text(top)
        assert "loops" in text and "3/0/3" in text  # done/running/total
        assert "Same tool call repeated" in text and "repeat/1 loops" in text
        assert screen_rows(top)[0].startswith("inspect-watch top · logs · findings ≥low: ")
        # drilled in: every sample, the worst finding first
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(top.screen, SamplesScreen)
                    and "clean/1" in screen_text(top))
        rows = sample_rows(top.view, top.filters)
        assert {r.sample_id for r in rows} == {"repeat", "submit-loop", "clean"}
        assert rows[0].worst is not None and rows[0].worst.confidence == "high"
        text = screen_text(top)
        assert "task loops · confidence ≥ low · sorted by worst" in text
        assert " done " in text and "tool submit" in text  # status, last event
        # filters: a floor, only samples with findings, another order
        await pilot.press("c", "c")  # low -> medium -> high
        await pilot.press("f")
        await pilot.pause(0.2)
        text = screen_text(top)
        assert "confidence ≥ high · only with findings" in text and "clean/1" not in text
        await pilot.press("s")
        await pilot.pause(0.2)
        assert "sorted by idle" in screen_text(top)
        # a sample's recent events, agent text marked
        await pilot.press("e")
        await until(pilot, lambda: isinstance(top.screen, EventsScreen)
                    and "agent text (untrusted): «" in screen_text(top))
        seen["events"] = screen_text(top)
        await pilot.press("escape")
        # the whole finding from the pane, its command copied, the action placeholder
        await pilot.press("tab")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(top.screen, FindingScreen))
        await pilot.pause(0.2)
        seen["finding"] = screen_text(top)  # the first rows; the rest is scrolled to
        seen["finding_all"] = str(top.screen.query_one("#finding-text", Static).content)
        await pilot.press("y")
        await pilot.press("x")
        await pilot.pause(0.3)
        seen["toasts"] = " | ".join(n.message for n in top._notifications)
        seen["clipboard"] = top.clipboard
        await pilot.press("escape", "escape")
        await until(pilot, lambda: not isinstance(top.screen, SamplesScreen | FindingScreen))
        await pilot.press("q")
        await pilot.pause()
        seen["exited"] = top._exit

    run_top(app.WatchOptions(log_dir=str(hostile_logs)), scenario)
    assert seen["exited"]  # q quits
    assert seen["finding"].lstrip().startswith("HIGH ")
    finding = joined(seen["finding_all"].split("\n"))
    assert "why high:" in finding and "next:" in finding and "evidence: " in finding
    assert "this was read from a finished run's log" in finding
    assert seen["clipboard"] in (f"inspect view --log-dir {hostile_logs}",
                                 f"inspect view --log-dir file://{hostile_logs}")
    assert "copied: inspect view --log-dir" in seen["toasts"]
    assert NO_ACTIONS in seen["toasts"]  # logs: nothing acted on
    assert "x: cancel this sample (confirmed first; live evals only)" in finding
    assert "recent events of loops/" in seen["events"]


def _inert(rows: list[str]) -> None:
    text = "\n".join(rows)
    for bad in ("\x1b", "\x07", "\u202e", "\u202c", "pwned"):
        assert bad not in text, repr(bad)
    for row in rows:
        # the agent's fake line never starts a row: it stays inside its quote, and a row
        # wrapped out of agent text hangs behind ┊
        assert not row.lstrip().startswith(("## inspect-watch", "inspect-watch says")), row
        if "inspect-watch says" in row:
            assert "«" in row.split("inspect-watch says")[0] or row.lstrip().startswith("┊")


def test_top_shows_hostile_agent_text_inert(hostile_logs: Path) -> None:
    """The submit loop's claims end in an OSC title, a clear-screen, colour, a bidi
    override, a fake end of quote and a fake "inspect-watch says: all clear" line."""
    shots: list[list[str]] = []

    async def scenario(pilot: Any, top: TopApp) -> None:
        await until(pilot, lambda: top.view.ended and "submit-loop/1" in screen_text(top))
        shots.append(screen_rows(top))
        top.drill_in(next(f.sample.eval_id for f in top.view.findings))
        await until(pilot, lambda: isinstance(top.screen, SamplesScreen)
                    and "submit-loop/1" in screen_text(top))
        table = top._tables["samples"]
        table.widget.move_cursor(row=table.keys.index(
            next(k for k in table.keys if "|submit-loop|" in k)))
        await pilot.press("e")
        await until(pilot, lambda: isinstance(top.screen, EventsScreen)
                    and "fake end" in screen_text(top))
        shots.append(screen_rows(top))
        await pilot.press("escape")
        loop = next(f for f in top.view.findings if f.rule == "submit-loop")
        top.push_screen(FindingScreen(loop))
        await until(pilot, lambda: "fake end" in screen_text(top))
        shots.append(screen_rows(top))

    run_top(app.WatchOptions(log_dir=str(hostile_logs)), scenario)
    for rows in shots:
        _inert(rows)
    assert "agent text (untrusted): «My final answer is 42" in joined(shots[1])
    assert "› fake end ‹" in joined(shots[2])  # its quote marks cannot end ours


def test_top_degrades_to_60_columns(hostile_logs: Path) -> None:
    seen: dict[str, list[str]] = {}

    async def scenario(pilot: Any, top: TopApp) -> None:
        await until(pilot, lambda: top.view.ended and "read to the end" in screen_text(top)
                    or top.view.ended and "findings" in screen_text(top))
        await pilot.pause(0.3)
        seen["fleet"] = screen_rows(top)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(top.screen, SamplesScreen)
                    and "repeat/1" in screen_text(top))
        seen["samples"] = screen_rows(top)

    run_top(app.WatchOptions(log_dir=str(hostile_logs)), scenario, size=(60, 24))
    fleet = seen["fleet"]
    assert all(len(r) <= 60 for r in fleet)
    # the findings count is whole; less important columns went
    assert fleet[0].startswith("inspect-watch top · findings ≥low: ")
    assert " low" in fleet[0].split("·")[1]
    assert "model" not in fleet[1] and "tokens" not in fleet[1] and "H/M/L" in fleet[1]
    header = next(r for r in seen["samples"] if " sample " in r and "status" in r)
    assert "worst" in header and "tokens" not in header and "try" not in header
    assert any(r.lstrip().startswith("repeat/1 ") for r in seen["samples"])


def test_top_follows_an_eval_launched_after_it_started(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Live: the screen starts with no eval, an eval starts later, its samples and
    findings appear, drilled in the running sample shows its last event in flight."""
    data = tmp_path / "data"
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    procs = []
    seen: dict[str, Any] = {}

    async def scenario(pilot: Any, top: TopApp) -> None:
        await until(pilot, lambda: "no running eval yet" in screen_text(top))
        procs.append(start_eval(tmp_path, "loops", tool_delay=1.0, data_home=data))
        await until(pilot, lambda: "Same tool call repeated" in screen_text(top), 180)
        seen["fleet"] = screen_text(top)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(top.screen, SamplesScreen)
                    and "repeat/1" in screen_text(top))
        seen["samples"] = screen_text(top)
        seen["rows"] = sample_rows(top.view, top.filters)
        await pilot.press("ctrl+c")
        await pilot.pause()
        seen["exited"] = top._exit

    try:
        run_top(app.WatchOptions(poll=0.3), scenario)
    finally:
        for p in procs:
            p.stop()
    assert seen["exited"]  # Ctrl+C quits
    assert "loops" in seen["fleet"] and "top · live · findings" in seen["fleet"]
    assert {r.sample_id for r in seen["rows"]} >= {"repeat"}
    assert any(r.sample_id == "repeat" and r.worst is not None for r in seen["rows"])


# -- the model, without a screen -----------------------------------------------------------


def _view(samples: list[SampleProgress], findings: Any) -> View:
    snap = StatusSnapshot(tasks=(TaskStatus("demo", "m", eval_id="eval1", running=2),),
                          samples=tuple(samples), now=100.0)
    return View(1, snap, tuple(findings), (), None, False)


def test_samples_filter_and_sort() -> None:
    loop, err, loop_hi, _idle, _end = example_snapshots()
    samples = [SampleProgress("demo", "eval1", "7", idle=5.0, tokens=10, status="running"),
               SampleProgress("demo", "eval1", "-rf; echo $(id)", epoch=2, idle=50.0,
                              tokens=900, status="running"),
               SampleProgress("demo", "eval1", "quiet", idle=None, tokens=None, done=True)]
    view = _view(samples, [loop_hi, err])
    worst = sample_rows(view, Filters())
    assert [r.sample_id for r in worst] == ["7", "-rf; echo $(id)", "quiet"]
    assert worst[0].worst == loop_hi and worst[1].findings == 1
    assert [r.sample_id for r in sample_rows(view, Filters(sort="idle"))][0] == "-rf; echo $(id)"
    assert [r.sample_id for r in sample_rows(view, Filters(sort="tokens"))][0] == "-rf; echo $(id)"
    only = sample_rows(view, Filters(only_findings=True, min_confidence="medium"))
    assert [r.sample_id for r in only] == ["7"]
    assert sample_rows(view, Filters(eval_id="other")) == []
    assert Filters().next_confidence().next_confidence().next_confidence() == Filters()


def test_the_copied_command_is_the_dry_run_or_the_log_never_a_kill() -> None:
    f = example_snapshots()[0]
    assert handoff_command(f) == ("inspect ctl sample cancel --model mockllm/model --dry-run "
                                  "-- demo 7 1")
    done = replace(f, handoff="inspect-watch only observes: … kill -INT 4242")
    assert handoff_command(done) == "inspect view --log-dir /logs"
    assert handoff_command(replace(done, sample=replace(done.sample, log_location=None))) is None


def test_back_from_the_samples_then_news_redraws_the_fleet() -> None:
    """Escape from the drilled-in samples, then a new finding: the redraw used to reach
    the popped screen's tables (NoScreen: a live top crashed on its next finding)."""
    loop, err, *_ = example_snapshots()
    sink = TopSink()
    sink.status(StatusSnapshot(
        tasks=(TaskStatus("demo", "m", eval_id="eval1", running=1),),
        samples=(SampleProgress("demo", "eval1", "7", status="running"),), now=time.time()))
    sink.finding(loop)
    top = TopApp(sink, mode="live")
    seen: dict[str, Any] = {}

    async def main() -> None:
        async with top.run_test(size=(80, 24)) as pilot:
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(top.screen, SamplesScreen)
                        and "7/1" in screen_text(top))
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(top.screen, SamplesScreen))
            sink.finding(err)  # news after the samples screen has gone
            await pilot.pause(0.6)  # two ticks of the screen's refresh
            await pilot.resize_terminal(60, 24)
            await pilot.pause(0.3)
            seen["text"] = screen_text(top)
            seen["eval_id"] = top.filters.eval_id
            await pilot.press("q")

    asyncio.run(main())
    assert top._exception is None, top._exception
    assert seen["eval_id"] is None  # back on the fleet: every task's findings again
    assert err.title.split()[0] in seen["text"]


def test_a_terminal_narrowed_to_60_columns_drops_columns_keeps_the_count() -> None:
    """Resized from 80 to 60 columns while running: the tables used to keep their 80
    columns (the app's size is still the old one while a Resize is handled), so the
    status cut the findings count and the fleet scrolled sideways."""
    loop, err, *_ = example_snapshots()
    sink = TopSink()
    sink.status(StatusSnapshot(
        tasks=(TaskStatus("demo", "mockllm/model", eval_id="eval1", running=1),),
        samples=(SampleProgress("demo", "eval1", "7", status="running"),), now=time.time()))
    sink.finding(loop)
    sink.finding(err)
    top = TopApp(sink, mode="live")
    seen: dict[str, list[str]] = {}

    async def main() -> None:
        async with top.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: "demo" in screen_text(top))
            seen["80"] = screen_rows(top)
            await pilot.resize_terminal(60, 24)
            await pilot.pause(0.5)
            seen["60"] = screen_rows(top)
            top.push_screen(FindingScreen(loop))
            await pilot.pause(0.3)
            await pilot.resize_terminal(70, 24)
            await pilot.pause(0.5)
            seen["finding"] = screen_rows(top)
            await pilot.press("escape", "q")

    asyncio.run(main())
    assert "model" in seen["80"][1] and "tokens" in seen["80"][1]
    narrow = seen["60"]
    assert "model" not in narrow[1] and "tokens" not in narrow[1] and "H/M/L" in narrow[1]
    assert narrow[0].startswith("inspect-watch top · findings ≥low: ")
    assert narrow[0].split("·")[1].rstrip().endswith("low")  # the count whole
    # the finding rewrapped to the new width: no row runs into the scroll bar
    assert all(len(r.rstrip()) <= 70 for r in seen["finding"])
    assert any(r.lstrip().startswith("┊") for r in seen["finding"])


def test_top_off_a_terminal_says_so_and_points_at_watch(tmp_path: Path) -> None:
    """Its screen into a pipe would be escape codes: exit 2 with a clear word instead."""
    from click.testing import CliRunner

    from watcher.cli import main
    from watcher.exit_codes import ExitCode

    result = CliRunner().invoke(main, ["top", "--log-dir", str(tmp_path)])
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    assert "top needs a terminal" in result.output and "inspect-watch watch" in result.output


class RecordingActions:
    """Actions that record what the screen asked of them (the screen's side of ``x``)."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, str]] = []

    def available(self, finding: Any) -> tuple[str, ...]:
        return ("score", "cancel")

    def target(self, finding: Any, action: str) -> str:
        return f"cancel sample {finding.sample.sample_id} [red]x[/red] ({action})"

    def run(self, finding: Any, action: str) -> str:
        self.runs.append((finding.sample.sample_id, action))
        return "cancel (score) requested; the server accepted it."


def test_x_names_the_target_and_acts_only_on_yes(hostile_logs: Path) -> None:
    from watcher.top.app import ConfirmScreen

    acts = RecordingActions()
    seen: dict[str, Any] = {}

    async def scenario(pilot: Any, top: TopApp) -> None:
        await until(pilot, lambda: top.view.ended and "3/0/3" in screen_text(top))
        await pilot.press("tab", "enter")
        await until(pilot, lambda: isinstance(top.screen, FindingScreen))
        await pilot.press("x")
        await until(pilot, lambda: isinstance(top.screen, ConfirmScreen))
        seen["confirm"] = screen_text(top)
        await pilot.press("n")  # no: nothing done
        await until(pilot, lambda: not isinstance(top.screen, ConfirmScreen))
        seen["after_no"] = list(acts.runs)
        await pilot.press("x")
        await until(pilot, lambda: isinstance(top.screen, ConfirmScreen))
        await pilot.press("y")
        await until(pilot, lambda: bool(acts.runs))
        await pilot.pause(0.2)
        seen["toasts"] = " | ".join(n.message for n in top._notifications)
        await pilot.press("escape", "escape", "q")

    run_top(app.WatchOptions(log_dir=str(hostile_logs)), scenario, actions=acts)
    assert "Act on this sample?" in seen["confirm"] and "(score)" in seen["confirm"]
    assert "[red]x[/red]" in seen["confirm"]  # the target is text, never markup
    assert seen["after_no"] == []
    assert len(acts.runs) == 1 and acts.runs[0][1] == "score"
    assert "nothing was done" in seen["toasts"] and "requested" in seen["toasts"]


def test_control_actions_cancel_a_real_sample_with_score(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``x`` runs, against a real eval: the target named, the server's dry run shown,
    then the request; the eval's log says the sample ended by the operator and was scored,
    and its siblings were left alone. Over a sample no server serves: nothing offered."""
    from inspect_ai.log import read_eval_log

    from watcher.findings import Evidence, Finding, SampleRef
    from watcher.top.actions import ControlActions

    data = tmp_path / "data"
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    proc = start_eval(tmp_path, "watchdog", "--max-samples", "4", tool_delay=0.2, data_home=data)
    try:
        server = proc.discovery()
        from watcher.discovery import list_servers

        deadline = time.monotonic() + 120
        task = None
        while task is None and time.monotonic() < deadline:
            from watcher.sources.http import HttpSource

            http = HttpSource(next(s for s in list_servers() if s.pid == proc.proc.pid))
            tasks = http.tasks()
            running = tasks and {r.sample_id for r in http.samples(tasks[0]).samples
                                 if r.status == "running"}
            if running and "repeat" in running:
                task = tasks[0]
            http.close()
            time.sleep(0.2)
        assert task is not None, "the repeat sample never ran"
        ref = SampleRef(task=task.task, task_id=task.task_id, eval_id=task.eval_id,
                        model=task.model, sample_id="repeat", epoch=1, attempt=1,
                        pid=proc.proc.pid)
        f = Finding(id="f", rule="repeated-tool-call", title="t", category="repeated_tool_call",
                    severity="warning", confidence="high", score=0.9, confidence_reason="",
                    sample=ref, summary="", evidence=Evidence(), first_seen=0.0,
                    last_seen=0.0, count=3, status="open", handoff="")
        acts = ControlActions()
        assert acts.available(f) == ("score", "cancel")
        target = acts.target(f, "score")
        assert "sample repeat epoch 1" in target and f"pid {proc.proc.pid}" in target
        assert "The server's dry run: it would be accepted" in target
        said = acts.run(f, "score")
        assert said.startswith("cancel (score) requested; the server accepted it")
        assert proc.wait() == 0
        gone = replace(f, sample=replace(ref, pid=999_999_999))
        assert acts.available(gone) == ()
    finally:
        proc.stop()
    [log] = proc.logs()
    samples = {s.id: s for s in read_eval_log(str(log)).samples or []}
    assert samples["repeat"].limit is not None and samples["repeat"].limit.type == "operator"
    assert samples["repeat"].scores
    assert all(s.limit is None for sid, s in samples.items() if str(sid).startswith("clean"))
    assert server is not None
