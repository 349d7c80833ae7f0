"""The screenshots of ``inspect-watch top`` in docs/ (docs/top-*.svg) are Textual's
own SVG export of the screen, made by docs/gen_top_screenshots.py over a real live
watch of the demo eval: the committed ones say what docs/top.md says they show, and
the script still runs and makes them."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_top_screenshots",
                                                  DOCS / "gen_top_screenshots.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_screenshots_show_what_the_docs_say() -> None:
    gen = generator()
    doc = (DOCS / "top.md").read_text()
    for name in gen.SHOTS:
        svg = (DOCS / f"{name}.svg").read_text(encoding="utf-8")
        assert svg.startswith("<svg"), name
        assert gen.missing(name, svg) == [], name
        assert f"({name}.svg)" in doc, f"docs/top.md does not show {name}.svg"
    # the 60-column picture has dropped the less important columns
    header = gen.svg_rows((DOCS / "top-60.svg").read_text(encoding="utf-8"))
    table_head = next(r for r in header if "H/M/L" in r)
    assert "model" not in table_head and "tokens" not in table_head
    for name in gen.SHOTS:  # no escape or bidi character reached a picture
        svg = (DOCS / f"{name}.svg").read_text(encoding="utf-8")
        assert not re.search("[\x1b\x07\u202a-\u202e\u2066-\u2069]", svg), name


@pytest.mark.e2e
def test_the_screenshot_script_runs_and_makes_every_picture(tmp_path: Path) -> None:
    gen = generator()
    paths = gen.generate(tmp_path / "out", tmp_path / "work", tool_delay=1.0)
    assert [p.name for p in paths] == [f"{n}.svg" for n in gen.SHOTS]
    for path in paths:
        svg = path.read_text(encoding="utf-8")
        assert gen.missing(path.stem, svg) == [], (path.stem, gen.svg_rows(svg))
