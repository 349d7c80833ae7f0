"""``inspect-watch top`` in a real terminal (tmux, 80x24) against a real scripted eval:
the sample ids and a finding on screen, the drill-in, hostile agent text inert, and a
clean exit on ``q``, on Ctrl+C and on SIGTERM that leaves the terminal as it was.

Skipped when tmux is not installed (``apt-get install -y tmux``).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.evalproc import REPO, EvalProc, start_eval
from tests.test_live_tmux import TMUX, new_session, tmux, wait_screen

pytestmark = [pytest.mark.skipif(TMUX is None, reason="tmux not installed"), pytest.mark.e2e]


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[str]:
    """A shell in an 80x24 tmux pane; its screen says MARK-BEFORE before top starts."""
    name = f"iw-top-{uuid.uuid4().hex[:8]}"
    new_session(name, 80, 24, "bash --norc --noprofile")
    tmux("send-keys", "-t", name, f"cd {shlex.quote(str(REPO))} && clear && echo MARK-BEFORE",
         "Enter")
    wait_line(name, r"MARK-BEFORE")  # printed, not just typed
    try:
        yield name
    finally:
        tmux("kill-session", "-t", name)


def wait_line(name: str, pattern: str, limit: float = 60.0) -> str:
    """The pane once a whole row matches ``pattern``: a command's output, not the echo of
    the command line that asked for it (which holds the same words)."""
    deadline = time.monotonic() + limit
    row = re.compile(pattern)
    while True:
        screen = tmux("capture-pane", "-p", "-t", name)
        if any(row.fullmatch(r.strip()) for r in screen.split("\n")):
            return screen
        if time.monotonic() > deadline:
            pytest.fail(f"no row matching {pattern!r}:\n{screen}")
        time.sleep(0.05)


def start_top(name: str, ev: EvalProc) -> None:
    cmd = (f"XDG_DATA_HOME={shlex.quote(str(ev.data_home))} "
           f"{shlex.quote(sys.executable)} -m watcher top --poll 0.3; echo TOP-EXIT=$?")
    tmux("send-keys", "-t", name, cmd, "Enter")


def left_cleanly(name: str) -> str:
    """The shell's screen once top has exited: the alternate screen is gone, what was
    on the terminal before is back, and the exit code is 0."""
    screen = wait_line(name, r"TOP-EXIT=\d+")
    assert "\nTOP-EXIT=0" in screen, screen
    assert "MARK-BEFORE" in screen, screen
    assert tmux("display-message", "-p", "-t", name, "#{alternate_on}").strip() == "0"
    tmux("send-keys", "-t", name, "echo TYPED-AFTER", "Enter")  # the keyboard is the shell's
    wait_screen(name, "\nTYPED-AFTER")
    return screen


def _inert(name: str, screen: str) -> None:
    """The agent's escapes did nothing: no title set, no bidi or escape character on
    screen, its red not drawn red, its fake inspect-watch line never starting a row."""
    assert "pwned" not in tmux("display-message", "-p", "-t", name, "#{pane_title}")
    for bad in ("\x1b", "\x07", "\u202e", "\u202c"):
        assert bad not in screen, repr(bad)
    assert "\x1b[31mRED" not in tmux("capture-pane", "-p", "-e", "-t", name)
    for row in screen.split("\n"):
        assert not row.lstrip().startswith(("## inspect-watch", "inspect-watch says")), row


def test_top_in_a_terminal_fleet_finding_drill_in_and_q(terminal: str, tmp_path: Path) -> None:
    ev = start_eval(tmp_path, "loops", "-T", "hostile=true", tool_delay=2.0)
    try:
        ev.discovery()
        start_top(terminal, ev)
        screen = wait_screen(terminal, "Same tool call repeated", 180)
        assert "repeat/1 loops" in screen and "loops" in screen.split("\n")[2]
        assert screen.split("\n")[0].startswith("inspect-watch top · live · findings ≥low: ")
        screen = wait_screen(terminal, "submit-loop/1 loops")
        # the agent's escapes did nothing: no title set, no screen cleared, no bidi
        assert "pwned" not in tmux("display-message", "-p", "-t", terminal, "#{pane_title}")
        assert "\u202e" not in screen and "MARK-BEFORE" not in screen
        # drilled in: every sample with its status and worst finding
        tmux("send-keys", "-t", terminal, "Enter")
        screen = wait_screen(terminal, "clean/1")
        assert "task loops · confidence ≥ low · sorted by worst" in screen
        rows = [r.lstrip() for r in screen.split("\n")]
        assert any(r.startswith("repeat/1 ") and "HIGH" in r for r in rows), screen
        assert any(r.startswith("submit-loop/1 ") for r in rows), screen
        # the submit loop's recent events: its claims' escapes, bidi and fake line inert
        tmux("send-keys", "-t", terminal, "s", "s", "s")  # worst -> idle -> tokens -> sample
        wait_screen(terminal, "sorted by sample")
        tmux("send-keys", "-t", terminal, "Down", "Down")  # clean, repeat, submit-loop
        tmux("send-keys", "-t", terminal, "e")
        screen = wait_screen(terminal, "fake end")
        assert "recent events of loops/submit-loop/1" in screen, screen
        assert "agent text (untrusted): «" in screen and "› fake end ‹" in screen, screen
        _inert(terminal, screen)
        tmux("send-keys", "-t", terminal, "Escape")
        wait_screen(terminal, "sorted by sample")
        # the submit loop's whole finding: agent text quoted, its fake line inert
        tmux("send-keys", "-t", terminal, "Tab")
        tmux("send-keys", "-t", terminal, "Enter")
        screen = wait_screen(terminal, "y copies:")
        _inert(terminal, screen)
        tmux("send-keys", "-t", terminal, "Escape")
        tmux("send-keys", "-t", terminal, "Escape")
        wait_screen(terminal, "H/M/L")
        tmux("send-keys", "-t", terminal, "q")
        left_cleanly(terminal)
    finally:
        ev.stop()


def test_top_in_a_terminal_exits_on_ctrl_c(terminal: str, tmp_path: Path) -> None:
    ev = start_eval(tmp_path, "slow", "-T", "samples=2", "-T", "turns=40", tool_delay=0.5)
    try:
        ev.discovery()
        start_top(terminal, ev)
        wait_screen(terminal, "0/2/2", 180)  # the fleet: done/running/total
        tmux("send-keys", "-t", terminal, "C-c")
        left_cleanly(terminal)
    finally:
        ev.stop()


def test_top_in_a_terminal_exits_on_sigterm_from_elsewhere(terminal: str,
                                                          tmp_path: Path) -> None:
    """A SIGTERM (a closed tmux window's hang-up aside, what a supervisor sends) quits the
    screen as q does: the terminal is given back and the exit code is 0."""
    logs = tmp_path / "logs"
    logs.mkdir()
    tmux("send-keys", "-t", terminal,
         f"{shlex.quote(sys.executable)} -m watcher top --log-dir {shlex.quote(str(logs))}; "
         "echo TOP-EXIT=$?", "Enter")
    wait_screen(terminal, "no Inspect logs read yet")
    shell = int(tmux("display-message", "-p", "-t", terminal, "#{pane_pid}").strip())
    children = subprocess.run(["ps", "-o", "pid=", "--ppid", str(shell)], capture_output=True,
                              text=True, check=True, timeout=30).stdout.split()
    assert len(children) == 1, children
    os.kill(int(children[0]), signal.SIGTERM)
    left_cleanly(terminal)
