"""A compiled (mypyc) build of the working tree, for tests and benchmarks.

The test suite imports the sources in place, so it exercises the pure-Python
engine. ``pip install .`` compiles the hot modules (``setup.py``); this builds the
same wheel from the working tree and unpacks it into ``build/compiled/<digest>``
(kept while the sources are unchanged), so the compiled engine can be tested
against the pure one and benchmarked beside it. A compiled install of exactly these
sources (as CI makes with ``pip install .``) is used instead of building again.
"""

from __future__ import annotations

import compileall
import hashlib
import importlib.metadata
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def source_digest() -> str:
    """A digest of everything that goes into the wheel."""
    h = hashlib.sha256()
    files = sorted([*ROOT.glob("watcher/**/*.py"), *ROOT.glob("watcher/**/*.c"),
                    *ROOT.glob("inspect_watch/*.py"),
                    *ROOT.glob("rules/*"),
                    ROOT / "setup.py", ROOT / "pyproject.toml"])
    for f in files:
        if f.is_file():
            h.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def compiled_tree() -> Path:
    """A directory holding the installed form of the compiled package.

    Put it on ``PYTHONPATH`` (with a working directory that has no ``watcher``
    package in it) to import the compiled engine. Raises ``RuntimeError`` if the
    build fails or gives a pure-Python package.
    """
    installed = installed_compiled()
    if installed is not None:
        return installed
    tree = ROOT / "build" / "compiled" / source_digest()
    if (tree / ".complete").exists():
        return tree
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", tmp],
            capture_output=True, text=True, cwd=ROOT)
        wheels = list(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            raise RuntimeError(f"building the wheel failed:\n{proc.stdout}\n{proc.stderr}")
        shutil.rmtree(tree, ignore_errors=True)
        with zipfile.ZipFile(wheels[0]) as z:
            z.extractall(tree)
    if not _has_compiled_engine(tree):
        raise RuntimeError(f"the wheel holds no compiled engine (see setup.py): {tree}")
    # byte-compiled as pip does on install: else a benchmark's first run of the tree
    # (bench_cost's live row) also compiled every interpreted module (8 % of its CPU)
    compileall.compile_dir(str(tree), quiet=1)
    (tree / ".complete").write_text("")
    return tree


def installed_compiled() -> Path | None:
    """The site directory of a compiled, non-editable install of these very sources."""
    # every distribution of that name on sys.path: the build leaves an egg-info in the
    # working tree, which is on sys.path when the tests run from it
    for dist in importlib.metadata.distributions(name="inspect-watch"):
        site = Path(str(dist.locate_file(""))).resolve()
        if site == ROOT or not _has_compiled_engine(site):
            continue  # the working tree, an editable or a pure-Python install
        if _same_sources(site):
            return site
    return None


def _has_compiled_engine(site: Path) -> bool:
    engine = site / "watcher" / "engine"
    return any(engine.glob("runtime.*.so")) and any(engine.glob("_fold.*.so"))


def _same_sources(site: Path) -> bool:
    pkg = site / "watcher"
    pairs = [(f, site / f.relative_to(ROOT))
             for f in [*ROOT.glob("watcher/**/*.py"), *ROOT.glob("inspect_watch/*.py")]]
    pairs += [(f, pkg / "rules" / f.name) for f in ROOT.glob("rules/*") if f.is_file()]
    return all(theirs.is_file() and theirs.read_bytes() == mine.read_bytes()
               for mine, theirs in pairs)
