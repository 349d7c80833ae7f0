"""``--state FILE``: what was reported and where each finished sample stands.

A restart (or the next ``--once``) must report nothing twice and miss nothing.
Finding ids are deterministic, so the state keeps, per finding id, the last
level we reported; samples that finished are remembered so they are not read
again; running samples are re-read from their start so rule windows that span
the restart are rebuilt (their old findings are suppressed, not repeated).

Writes are atomic (a temporary file nobody could plant, renamed over the state; a
symlink is written through) and the file is ``0600``:
it names tasks and samples of the user's evals.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from watcher.files import write_file
from watcher.findings import Finding, confidence_rank

STATE_VERSION = 1


@dataclass
class Reported:
    """The last snapshot of a finding that reached the reporters."""

    confidence: str
    status: str
    count: int

    def wants(self, f: Finding) -> bool:
        """Whether ``f`` is news relative to what was reported."""
        if f.status == "ended":
            return self.status != "ended"
        return confidence_rank(f.confidence) > confidence_rank(self.confidence)


@dataclass
class WatchState:
    """Reported findings and finished samples, persisted between runs."""

    reported: dict[str, Reported] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)  # "eval_id|sample_id|epoch"
    task_as_of: dict[str, float] = field(default_factory=dict)
    path: Path | None = None

    def should_report(self, f: Finding) -> bool:
        prior = self.reported.get(f.id)
        return prior is None or prior.wants(f)

    def mark_reported(self, f: Finding) -> None:
        self.reported[f.id] = Reported(f.confidence, f.status, f.count)

    @staticmethod
    def sample_key(eval_id: str, sample_id: str, epoch: int) -> str:
        return f"{eval_id}|{sample_id}|{epoch}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "reported": {k: [r.confidence, r.status, r.count] for k, r in self.reported.items()},
            "finished": sorted(self.finished),
            "task_as_of": self.task_as_of,
        }

    @classmethod
    def load(cls, path: Path) -> WatchState:
        """Load ``path``; a missing file is an empty state, a corrupt one an error."""
        state = cls(path=path)
        if not path.exists():
            return state
        try:
            data = json.loads(_read_regular(path))
            if data.get("version") != STATE_VERSION:
                raise ValueError(f"unsupported state version {data.get('version')!r}")
            for k, v in data.get("reported", {}).items():
                state.reported[k] = Reported(str(v[0]), str(v[1]), int(v[2]))
            state.finished = set(data.get("finished", []))
            state.task_as_of = {k: float(v) for k, v in data.get("task_as_of", {}).items()}
        except (OSError, ValueError, TypeError, IndexError, AttributeError) as e:
            raise StateError(f"{path}: cannot read state file: {e}") from e
        return state

    @classmethod
    def open(cls, path: Path) -> WatchState:
        """Load ``path`` for a watch and save it at once: a state file that cannot be
        written is an error before the watch starts, not a loss at its end."""
        state = cls.load(path)
        try:
            state.save()
        except OSError as e:
            raise StateError(f"{path}: cannot write state file: {e.strerror or e}") from e
        return state

    def save(self) -> None:
        if self.path is not None:
            atomic_write(self.path, json.dumps(self.to_dict(), indent=1))


class StateError(Exception):
    """The state file exists but cannot be used."""


def _read_regular(path: Path) -> bytes:
    """A regular file's bytes; anything else is refused before a byte is read.

    ``--state /dev/full`` used to be read for ever (zeros until the OOM killer) and a
    FIFO blocked the start; the state is replaced by renaming a file over it, so only a
    regular file (or a symlink to one) can be a state file.
    """
    # O_NONBLOCK: opening a FIFO without a writer would wait for one
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file (a device, FIFO or socket)")
        return fh.read()


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (through a symlink), readable by the user only."""
    if not path.parent.exists():  # (a file there fails below: "Not a directory")
        path.parent.mkdir(parents=True, exist_ok=True)
    write_file(path, text, mode=0o600)
