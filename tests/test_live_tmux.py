"""The text reporter in a real terminal (tmux): status redrawn in place, findings above it.

Skipped when tmux is not installed (``apt-get install -y tmux``).
"""

from __future__ import annotations

import atexit
import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

TMUX = shutil.which("tmux")
pytestmark = pytest.mark.skipif(TMUX is None, reason="tmux not installed")

SCRIPT = """
import sys, time
from pathlib import Path
from watcher.reporters import ReportContext, StatusSnapshot, TaskStatus, TextReporter
from watcher.reporters.examples import T0, example_snapshots

r = TextReporter(sys.stdout, verbose=True)
assert r.tty and r.color
r.start(ReportContext(sources=("http://127.0.0.1:7575",), version="test"))
snaps = example_snapshots()
for i in range(6):
    r.status(StatusSnapshot(
        tasks=(TaskStatus("demo", "mockllm/model", running=3, done=i, total=7),),
        findings_by_confidence={"high": min(i, 2)}, now=T0 + i, last_poll_at=T0 + i - 1,
        polls=100 + i))
    if i == 2:
        r.finding(snaps[0])  # medium, with hostile text (OSC title, clear screen, bidi)
    if i == 4:
        r.finding(snaps[2])  # escalated to high
Path(sys.argv[1]).write_text("drawn")
while not Path(sys.argv[2]).exists():
    time.sleep(0.05)
r.stop()
"""


# 15 tasks named in double-width characters: each status line is wider in cells than in
# characters, and a line cut by characters wrapped onto a second row
WIDE_SCRIPT = """
import sys, time
from pathlib import Path
from watcher.reporters import ReportContext, StatusSnapshot, TaskStatus, TextReporter

r = TextReporter(sys.stdout)
assert r.tty
r.start(ReportContext(sources=("live",), version="test"))
tasks = tuple(TaskStatus("評価タスク" * 12 + str(k), "模型/模型" * 6, running=1, total=3)
              for k in range(15))
for i in range(6):
    r.status(StatusSnapshot(tasks=tasks, now=100.0 + i, last_poll_at=99.0 + i, polls=200 + i))
Path(sys.argv[1]).write_text("drawn")
while not Path(sys.argv[2]).exists():
    time.sleep(0.05)
r.stop()
"""


# One private tmux server for this test process, kept up between sessions: with the
# default socket, a session started just as the last one was killed raced the server's exit
# ("server exited unexpectedly", seen once in CI), and a user's own tmux was shared.
SOCKET = f"iw-tests-{os.getpid()}"
_server_up = False


def tmux(*args: str) -> str:
    assert TMUX is not None
    res = subprocess.run([TMUX, "-L", SOCKET, *args], capture_output=True, text=True,
                         timeout=30, check=False)
    return res.stdout


def _stop_server(socket_path: str) -> None:
    tmux("kill-server")
    Path(socket_path).unlink(missing_ok=True)  # tmux leaves the socket file behind


def new_session(name: str, width: int, height: int, cmd: str) -> None:
    """A detached session on the private server, which is started (and told not to exit
    when its last session ends) the first time. Its programs get the server's environment,
    without NO_COLOR: the reporter's colours are under test."""
    global _server_up
    assert TMUX is not None
    base = [TMUX, "-L", SOCKET, "-f", "/dev/null"]
    if not _server_up:
        env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
        subprocess.run([*base, "start-server", ";", "set-option", "-g", "exit-empty", "off"],
                       check=True, env=env, timeout=30)
        _server_up = True
        atexit.register(_stop_server, tmux("display-message", "-p", "#{socket_path}").strip())
    subprocess.run([*base, "new-session", "-d", "-s", name, "-x", str(width), "-y",
                    str(height), cmd], check=True, timeout=30)


@pytest.fixture
def session(tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    yield from _session(tmp_path, SCRIPT)


@pytest.fixture
def wide_session(tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    yield from _session(tmp_path, WIDE_SCRIPT)


def _session(tmp_path: Path, text: str) -> Iterator[tuple[str, Path, Path]]:
    name = f"iw-test-{uuid.uuid4().hex[:8]}"
    script = tmp_path / "live.py"
    script.write_text(text)
    drawn, release = tmp_path / "drawn", tmp_path / "release"
    cmd = " ".join(shlex.quote(a) for a in (sys.executable, str(script), str(drawn),
                                            str(release)))
    # Keep the pane after the program exits so its last screen can be inspected.
    cmd = f"cd {shlex.quote(str(Path(__file__).parent.parent))} && {cmd}; sleep 30"
    new_session(name, 160, 50, cmd)
    try:
        yield name, drawn, release
    finally:
        release.touch()
        tmux("kill-session", "-t", name)


def wait_for(path: Path, limit: float = 60.0) -> None:
    """Wait for the child to signal; the limit only guards against a hung child."""
    deadline = time.monotonic() + limit
    while not path.exists():
        if time.monotonic() > deadline:
            pytest.fail(f"child did not write {path}")
        time.sleep(0.05)


def wait_screen(name: str, text: str, limit: float = 60.0) -> str:
    """The pane once ``text`` shows (tmux may lag the child's writes); fails if it never does."""
    deadline = time.monotonic() + limit
    while text not in (screen := tmux("capture-pane", "-p", "-t", name)):
        if time.monotonic() > deadline:
            pytest.fail(f"{text!r} never appeared:\n{screen}")
        time.sleep(0.05)
    return screen


def test_status_area_in_place_and_finding_blocks(session: tuple[str, Path, Path]) -> None:
    name, drawn, _ = session
    wait_for(drawn)
    screen = wait_screen(name, "105 polls")
    lines = screen.rstrip("\n").split("\n")
    # Exactly one status headline: earlier ones were erased in place, the latest one is last.
    heads = [i for i, ln in enumerate(lines) if ln.startswith("inspect-watch · ")]
    assert len(heads) == 1, screen
    assert "105 polls" in lines[heads[0]] and "findings: 2 high" in lines[heads[0]]
    assert "3 running  5 done of 7" in lines[heads[0] + 1]
    # Finding lines are above it, the escalation after the first report, the evidence
    # (--verbose) once, under the first.
    new = next(i for i, ln in enumerate(lines) if " MEDIUM  loop.repeat_tool_call 5×" in ln)
    esc = next(i for i, ln in enumerate(lines)
               if " HIGH  escalated from medium loop.repeat_tool_call 14×" in ln)
    assert new < esc < heads[0]
    assert lines[new + 1] == "  Repeated identical tool call (loop.repeat_tool_call, new)"
    assert sum("(loop.repeat_tool_call, " in ln for ln in lines) == 1
    assert any("agent text (untrusted): «rm -rf /tmp/xRED" in ln for ln in lines)
    # The agent's escapes did nothing: the banner survived the "clear screen",
    # and the pane title was not set to "pwned".
    assert lines[0].startswith("inspect-watch test: watching http://127.0.0.1:7575")
    assert "pwned" not in tmux("display-message", "-p", "-t", name, "#{pane_title}")
    assert "pwned" not in screen


def test_status_area_left_as_plain_lines_on_stop(session: tuple[str, Path, Path]) -> None:
    name, drawn, release = session
    wait_for(drawn)
    release.touch()
    screen = wait_screen(name, "inspect-watch: stopped.")
    lines = screen.rstrip("\n").split("\n")
    heads = [ln for ln in lines if ln.startswith("inspect-watch · ")]
    assert len(heads) == 1 and "105 polls" in heads[0]
    stop = next(i for i, ln in enumerate(lines) if ln.startswith("inspect-watch: stopped."))
    assert lines.index(heads[0]) < stop


def test_status_area_of_double_width_names_leaves_no_stale_rows(
        wide_session: tuple[str, Path, Path]) -> None:
    """Task names in double-width characters: status lines were cut to the terminal's width
    in characters, so each wrapped onto a second row that the redraw did not erase (15
    stale rows per redraw). Cut by cells, the status area is redrawn in place."""
    name, drawn, _ = wide_session
    wait_for(drawn)
    screen = wait_screen(name, "205 polls")
    lines = screen.rstrip("\n").split("\n")
    heads = [i for i, ln in enumerate(lines) if ln.startswith("inspect-watch · ")]
    assert len(heads) == 1, screen
    assert "205 polls" in lines[heads[0]]
    rows = lines[heads[0] + 1:]
    # four task lines (counts first, the names cut), the other 11 summed on one line
    assert len(rows) == 5, screen
    assert all(r.startswith("  1 running  0 done of 3  評価タスク") for r in rows[:4]), screen
    assert all(r.endswith("…") for r in rows[:4]), screen
    assert rows[4] == "  … 11 more tasks: 11 running, 0 done, 0 finished", screen
