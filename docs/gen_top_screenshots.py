"""Regenerate the screenshots of ``inspect-watch top`` in docs/ (docs/top-*.svg).

    python docs/gen_top_screenshots.py [--out DIR] [--work DIR] [--tool-delay SECONDS]

Runs the bundled demo eval (``examples/demo_eval.py``, scripted model: no key, no
network) with a private data directory, and watches it live with top as
``inspect-watch top`` runs it (the watch as a library, :mod:`watcher.top.run`), in
Textual's own harness at 80x24; each screenshot is Textual's SVG export of the screen
once it shows what the picture is for:

* ``top-fleet.svg``: the fleet table and the findings pane, samples still running;
* ``top-samples.svg``: drilled in (Enter) to the demo task's samples;
* ``top-events.svg``: ``e`` on the worst sample: its recent events;
* ``top-finding.svg``: a finding opened (Enter in the findings pane);
* ``top-60.svg``: the fleet at 60 columns.

Nothing is edited afterwards. The eval runs in ``--work`` (default
``/tmp/inspect-watch-top-docs``, emptied first) so the paths in the pictures are the
same from run to run; times and idle seconds are those of the run. tests/test_top_docs.py
runs this script and checks what each picture says.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from watcher import app  # noqa: E402
from watcher.top.app import EventsScreen, FindingScreen, SamplesScreen, TopApp  # noqa: E402
from watcher.top.model import TopSink  # noqa: E402
from watcher.top.run import top_options  # noqa: E402

# each picture and what it must say (tests/test_top_docs.py checks the committed ones
# and a fresh run against these)
EXPECTED: dict[str, tuple[str, ...]] = {
    "top-fleet": ("inspect-watch top · live · findings ≥low: ", "done/run/n", "oldest idle",
                  "H/M/L", "demo", "Same tool call repeated", "repeated-call/1 demo"),
    "top-samples": ("task demo · confidence ≥ low · sorted by worst", "repeated-call/1",
                    "submit-loop/1", "clean/1", "last event", "worst"),
    "top-events": ("recent events of demo/repeated-call/1", "tool shell",
                   "agent text (untrusted): «"),
    "top-finding": ("y copies: inspect ctl sample cancel", "--dry-run",
                    "x: cancel this sample", "evidence: ", "why high: "),
    "top-60": ("inspect-watch top · findings ≥low: ", "H/M/L", "Same tool call"),
}
SHOTS = tuple(EXPECTED)
_ROW = re.compile(r'<text class="[^"]*" x="[^"]*" y="[^"]*" textLength="[^"]*" '
                  r'clip-path="url\(#[\w-]+-line-(\d+)\)">([^<]*)</text>')
WORK = Path("/tmp/inspect-watch-top-docs")
SIZE = (80, 24)


def svg_rows(svg: str) -> list[str]:
    """The text of a Textual SVG screenshot, row by row."""
    rows: dict[int, str] = {}
    for line, text in _ROW.findall(svg):
        rows[int(line)] = rows.get(int(line), "") + html.unescape(text).replace("\xa0", " ")
    return [rows.get(i, "") for i in range(max(rows, default=-1) + 1)]


def missing(name: str, svg: str) -> list[str]:
    """What picture ``name`` should say and does not."""
    text = "\n".join(svg_rows(svg))
    return [want for want in EXPECTED[name] if want not in text]


def start_demo(work: Path, tool_delay: float) -> subprocess.Popen[bytes]:
    """The demo eval, with its own data directory (so top sees it alone)."""
    data = work / "data"
    env = {**os.environ, "XDG_DATA_HOME": str(data), "INSPECT_LOG_LEVEL": "warning",
           "DEMO_TOOL_DELAY": str(tool_delay)}
    return subprocess.Popen(
        [sys.executable, "-m", "inspect_ai._cli.main", "eval",
         f"{REPO / 'examples' / 'demo_eval.py'}@demo", "--log-dir", str(work / "logs"),
         "--display", "none"],
        env=env, cwd=work, stdout=(work / "eval.out").open("wb"), stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL)


def screen_text(top: TopApp) -> str:
    return "\n".join(strip.text for strip in top.screen._compositor.render_strips())


async def until(pilot: Any, what: Callable[[], bool], limit: float = 180.0) -> None:
    deadline = time.monotonic() + limit
    while not what():
        if time.monotonic() > deadline:
            raise SystemExit("top never showed what the screenshot waits for:\n"
                             + screen_text(pilot.app))
        await pilot.pause(0.1)


async def shoot(pilot: Any, top: TopApp, out: Path) -> None:
    """Drive the screen through the five pictures."""

    def save(name: str) -> None:
        (out / f"{name}.svg").write_text(top.export_screenshot(title=f"inspect-watch top: "
                                                               f"{name[4:]}"),
                                         encoding="utf-8")

    def fleet_ready() -> bool:
        text = screen_text(top)
        snap = top.view.snapshot
        return ("Same tool call repeated" in text and snap is not None
                and any(t.running for t in snap.tasks))

    await until(pilot, fleet_ready)
    await pilot.pause(0.5)
    save("top-fleet")
    await pilot.press("enter")
    await until(pilot, lambda: isinstance(top.screen, SamplesScreen)
                and "clean/1" in screen_text(top))
    await pilot.pause(0.3)
    save("top-samples")
    await pilot.press("e")  # the first row: the worst sample
    await until(pilot, lambda: isinstance(top.screen, EventsScreen)
                and "agent text (untrusted): «" in screen_text(top))
    await pilot.pause(0.3)
    save("top-events")
    await pilot.press("escape", "tab", "enter")
    await until(pilot, lambda: isinstance(top.screen, FindingScreen)
                and "y copies:" in screen_text(top))
    await pilot.pause(0.3)
    save("top-finding")
    await pilot.press("escape", "escape")
    await until(pilot, lambda: not isinstance(top.screen, SamplesScreen | FindingScreen))
    await pilot.resize_terminal(60, 24)
    await pilot.pause(0.5)
    save("top-60")
    await pilot.press("q")


def generate(out: Path, work: Path, tool_delay: float = 1.5) -> list[Path]:
    """Run the demo eval and top over it; write the pictures to ``out``."""
    if work.exists():
        shutil.rmtree(work)
    (work / "data").mkdir(parents=True)
    out.mkdir(parents=True, exist_ok=True)
    ev = start_demo(work, tool_delay)
    before = os.environ.get("XDG_DATA_HOME")
    os.environ["XDG_DATA_HOME"] = str(work / "data")  # where the watch discovers evals
    sink = TopSink()
    handle = app.start(top_options(app.WatchOptions(poll=0.3)), sinks=[sink])
    top = TopApp(sink, mode="live", read_events=handle.recent_events)

    async def main() -> None:
        async with top.run_test(size=SIZE) as pilot:
            await shoot(pilot, top, out)

    try:
        asyncio.run(main())
    finally:
        handle.stop()
        handle.wait(60)
        if before is None:
            os.environ.pop("XDG_DATA_HOME", None)
        else:
            os.environ["XDG_DATA_HOME"] = before
        if ev.poll() is None:
            ev.terminate()
            try:
                ev.wait(30)
            except subprocess.TimeoutExpired:
                ev.kill()
                ev.wait()
    return [out / f"{name}.svg" for name in SHOTS]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "docs")
    ap.add_argument("--work", type=Path, default=WORK)
    ap.add_argument("--tool-delay", type=float, default=1.5)
    args = ap.parse_args()
    for path in generate(args.out, args.work, args.tool_delay):
        lacks = missing(path.stem, path.read_text(encoding="utf-8"))
        print(f"wrote {path}" + (f"; it lacks {lacks}" if lacks else ""))


if __name__ == "__main__":
    main()
