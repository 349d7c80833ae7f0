"""Dataset-controlled ids in ``top``'s toasts, clipboard and confirmation (issue 34,
items 1, 2 and 14): never raw on the terminal, never markup, always told apart."""

from __future__ import annotations

import asyncio
import shlex
import subprocess
import time
from dataclasses import replace
from typing import Any

from watcher.findings import Finding
from watcher.reporters.examples import example_snapshots
from watcher.sanitize import printable_command
from watcher.summary import SampleProgress, StatusSnapshot, TaskStatus
from watcher.top.actions import target_words
from watcher.top.app import ConfirmScreen, TopApp
from watcher.top.model import TopSink, handoff_command

CLIPBOARD = "\x1b]52;c;ZWNobyBwd25lZA==\x07"  # OSC 52: set the clipboard to "echo pwned"
TITLE = "\x1b]0;owned\x07"  # OSC 0: the window title


def with_id(f: Finding, sample_id: str) -> Finding:
    return replace(f, id=f.id + str(abs(hash(sample_id))),
                   sample=replace(f.sample, sample_id=sample_id))


class Actions:
    def __init__(self) -> None:
        self.runs: list[str] = []

    def available(self, finding: Any) -> tuple[str, ...]:
        return ("score",)

    def target(self, finding: Finding, action: str) -> str:
        return target_words(finding, action, "it would be accepted [b]bold[/b]")

    def run(self, finding: Finding, action: str) -> str:
        self.runs.append(finding.sample.sample_id)
        return "refused (HTTP 409: [@click=app.quit]quit[/] \x1b]0;x\x07 [link=http://x]y[/])"


def drive(sample_id: str, keys: list[str], actions: Any = None) -> dict[str, Any]:
    """The fleet with one live finding on ``sample_id``; ``keys`` pressed on the
    findings pane; what the toasts, the clipboard and the screen said."""
    f = with_id(example_snapshots()[0], sample_id)
    sink = TopSink()
    sink.status(StatusSnapshot(
        tasks=(TaskStatus("demo", "m", eval_id=f.sample.eval_id, running=1),),
        samples=(SampleProgress("demo", f.sample.eval_id, sample_id, status="running"),),
        now=time.time()))
    sink.finding(f)
    top = TopApp(sink, mode="live", actions=actions)
    seen: dict[str, Any] = {}

    async def main() -> None:
        async with top.run_test(size=(100, 30)) as pilot:
            await pilot.press("tab")
            for key in keys:
                await pilot.press(key)
                await pilot.pause(0.1)
            await pilot.pause(0.3)  # the toasts drawn
            seen["toasts"] = [(n.message, n.markup) for n in top._notifications]
            seen["screen"] = "\n".join(s.text for s in top.screen._compositor.render_strips())
            seen["running"] = top.is_running
            await pilot.press("q")

    asyncio.run(main())
    seen["clipboard"] = top.clipboard
    seen["exception"] = top._exception
    seen["command"] = handoff_command(f)
    return seen


def test_y_copies_a_printable_command_that_the_shell_reads_as_the_exact_id() -> None:
    sid = f"s{CLIPBOARD}1{TITLE}\u202e"
    seen = drive(sid, ["y"])
    assert seen["exception"] is None
    copied = seen["clipboard"]
    assert copied and copied.isprintable() and "\x1b" not in copied and "\x07" not in copied
    # the shell gets the very id back: the command still cancels that sample
    words = subprocess.run(["bash", "-c", f"printf '%s\\0' {copied}"], capture_output=True,
                           check=True).stdout.decode().split("\0")[:-1]
    assert words == shlex.split(seen["command"])
    assert sid in words
    toast = " ".join(m for m, _ in seen["toasts"])
    assert "copied:" in toast and "\x1b" not in toast and "\x07" not in toast
    assert "\x1b" not in seen["screen"]


def test_markup_in_an_id_is_shown_never_parsed() -> None:
    for sid in ("test_x[/tmp/a.py]", "[@click=app.quit]quit[/]", "[link=http://x]y[/link]"):
        seen = drive(sid, ["y"])
        assert seen["exception"] is None, (sid, seen["exception"])  # no MarkupError
        assert seen["running"]  # neither crashed nor quit by a click action
        assert seen["toasts"] and all(markup is False for _, markup in seen["toasts"])
        assert shlex.split(seen["clipboard"])[-2] == sid


def test_x_result_toast_is_plain_text() -> None:
    acts = Actions()
    seen = drive("s1", ["x", "y"], actions=acts)
    assert acts.runs == ["s1"] and seen["exception"] is None and seen["running"]
    said = [m for m, markup in seen["toasts"] if not markup]
    assert any("[@click=app.quit]" in m for m in said)
    assert all("\x1b" not in m for m, _ in seen["toasts"])


def test_look_alike_ids_are_told_apart_before_a_cancel() -> None:
    plain, zwsp, cyrillic = "sample-a", "sample-a\u200b", "s\u0430mple-a"
    f = example_snapshots()[0]
    words = {sid: target_words(with_id(f, sid), "score", "ok") for sid in
             (plain, zwsp, cyrillic)}
    assert len({w.splitlines()[0] for w in words.values()}) == 3  # the first lines differ
    assert "exact sample id: sample-a\\u200b" in words[zwsp]
    assert "exact sample id: s\\u0430mple-a" in words[cyrillic]
    assert "exact sample id" not in words[plain]
    seen = drive(cyrillic, ["x"], actions=Actions())
    assert "s\\u0430mple-a" in seen["screen"]


def test_printable_command_keeps_plain_commands_as_they_are() -> None:
    cmd = "inspect ctl sample cancel --dry-run -- demo 's 1' 1"
    assert printable_command(cmd) == cmd
    assert ConfirmScreen  # the confirmation renders its target as text (test_top.py)
