"""The HTML report in a real browser: headless Chromium renders it, runs no script, loads nothing.

Skipped when Chromium is not installed (``apt-get install -y chromium``).
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from watcher.reporters import render_html
from watcher.reporters.examples import example_summary

CHROMIUM = next((p for n in ("chromium", "chromium-browser", "google-chrome")
                 if (p := shutil.which(n))), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed")


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / "profile"
    profile.mkdir(exist_ok=True)
    assert CHROMIUM is not None
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--no-first-run", f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)


@pytest.fixture
def report(tmp_path: Path) -> Path:
    path = tmp_path / "report.html"
    path.write_text(render_html(example_summary()), encoding="utf-8")
    return path


def test_dump_dom_renders_report_without_scripts(tmp_path: Path, report: Path) -> None:
    res = chromium(tmp_path, "--dump-dom", report.as_uri())
    dom = res.stdout
    assert res.returncode == 0, res.stderr[-2000:]
    assert "<title>inspect-watch report</title>" in dom
    assert re.findall(r"<h2>([^<]*)</h2>", dom) == [
        "Tasks", "Outliers", "Errored samples", "Timeline (3 findings)", "Findings (3)",
        "Notices (2)", "Logs"]
    assert len(re.findall(r'class="bar (?:high|medium|low)"', dom)) == 3
    # The agent's markup survives only as text.
    assert "<script" not in dom.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;/pre&gt;" in dom
    assert "javascript:" not in "".join(re.findall(r'(?:href|src)="[^"]*"', dom))


def _png_pixels(data: bytes) -> tuple[int, int, int, bytes]:
    """Decode an 8-bit, non-interlaced RGB/RGBA PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    height = channels = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0 and color in (2, 6)
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
    raw = zlib.decompress(idat)
    stride = width * channels
    out = bytearray()
    prev = bytearray(stride)
    for y in range(height):
        ftype = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 0xFF
            elif ftype == 2:
                line[i] = (line[i] + b) & 0xFF
            elif ftype == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        out += line
        prev = line
    return width, height, channels, bytes(out)


def test_screenshot_shows_the_report(tmp_path: Path, report: Path) -> None:
    shot = tmp_path / "shot.png"
    res = chromium(tmp_path, f"--screenshot={shot}", "--window-size=1000,1600",
                   "--hide-scrollbars", report.as_uri())
    assert shot.exists(), res.stderr[-2000:]
    width, height, channels, px = _png_pixels(shot.read_bytes())
    assert (width, height) == (1000, 1600)
    pixels = [px[i:i + 3] for i in range(0, len(px), channels)]
    non_white = sum(1 for p in pixels if p != b"\xff\xff\xff")
    assert non_white > 0.02 * len(pixels)  # text, tables and the note box were drawn
    # HIGH badges and timeline bars (red, #c62828, some blended by opacity) are in view.
    red = sum(1 for r, g, b in pixels if r > 170 and g < 90 and b < 90)
    assert red > 500
