"""Where the shared corpus of real `.eval` logs is (read-only; copy before writing).

CI lays a copy of ``shared/`` beside the clone; sessions have it at /work/shared.
``INSPECT_WATCH_CORPUS`` overrides both.
"""

from __future__ import annotations

import os
from pathlib import Path


def corpus_dir() -> Path:
    candidates = [
        os.environ.get("INSPECT_WATCH_CORPUS"),
        str(Path(__file__).resolve().parents[2] / "shared" / "corpus" / "inspect"),
        "/work/shared/corpus/inspect",
    ]
    for c in candidates:
        if c and (Path(c) / "docent-intercode-ctf-gpt4o.eval").exists():
            return Path(c)
    raise FileNotFoundError("the shared corpus of real .eval logs was not found; "
                            "set INSPECT_WATCH_CORPUS")


CORPUS = corpus_dir()
