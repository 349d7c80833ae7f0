"""Where the bundled rule pack and example eval live.

In a wheel they are the packages ``watcher.rules`` and ``watcher.examples``
(mapped from the top-level ``rules/`` and ``examples/``); in a source checkout
that shadows the installed package (pytest run from the repository) they are
those top-level directories.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def bundled_dir(name: str) -> Path:
    """Directory of the bundled ``rules`` or ``examples``."""
    try:
        found = Path(str(files(f"watcher.{name}")))
        if found.is_dir():
            return found
    except ModuleNotFoundError:
        pass
    return Path(__file__).resolve().parent.parent / name
