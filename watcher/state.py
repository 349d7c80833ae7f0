"""``--state FILE``: what was reported and where each finished sample stands.

A restart (or the next ``--once``) must report nothing twice and miss nothing.
Finding ids are deterministic, so the state keeps, per finding id, the last
level we reported; samples that finished are remembered so they are not read
again; running samples are re-read from their start so rule windows that span
the restart are rebuilt (their old findings are suppressed, not repeated).
Live tasks not read to their end are remembered with their logs (``open_evals``):
if the eval has exited by the next watch, that watch reads the rest from the log.
The watchdog (``watch --act``) remembers the finding episodes it acted on
(``acted``), saved *before* it sends the request, so a restarted watch never acts
on one twice.

The watch saves the state as it goes, before the findings it marks reported are
written (see :meth:`watcher.run.router.Router.flush`), so a watcher killed outright
reports nothing twice when resumed. One watcher at a time: :meth:`WatchState.open`
takes an exclusive lock (``flock``) on ``FILE.lock`` beside the state.

Writes are atomic (a temporary file nobody could plant, renamed over the state; a
symlink is written through) and the file is ``0600``:
it names tasks and samples of the user's evals.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from watcher.files import write_file
from watcher.findings import CONFIDENCE_LEVELS, Finding, confidence_rank

STATE_VERSION = 1


@dataclass(frozen=True)
class SampleDone:
    """The runner's word that a sample was read to its end (``reopened``: a retry made it
    unfinished again). It travels on the runner's queue behind the sample's findings, so
    the watch marks the sample finished only once those findings have been routed: a
    state saved in between must not skip a sample whose findings it never reported."""

    key: str  # WatchState.sample_key
    reopened: bool = False


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
    # eval_id -> {"log", "pid", "task", "task_id"}: live tasks not read to their end
    open_evals: dict[str, dict[str, Any]] = field(default_factory=dict)
    # finding id (or "run:<pid>") -> {"verb", "at", ...}: what the watchdog acted on
    acted: dict[str, dict[str, Any]] = field(default_factory=dict)
    path: Path | None = None
    # top-level keys this version does not know (a newer watcher's): kept, written back
    extra: dict[str, Any] = field(default_factory=dict)
    _lock_fd: int | None = field(default=None, repr=False, compare=False)

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
            **self.extra,
            "version": STATE_VERSION,
            "reported": {k: [r.confidence, r.status, r.count] for k, r in self.reported.items()},
            "finished": sorted(self.finished),
            "task_as_of": self.task_as_of,
            "open_evals": self.open_evals,
            "acted": self.acted,
        }

    @classmethod
    def load(cls, path: Path) -> WatchState:
        """Load ``path``; a missing file is an empty state, a corrupt one an error."""
        state = cls(path=path)
        if not path.exists():
            return state
        try:
            data = json.loads(_read_regular(path))
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            version = data.get("version")
            if type(version) is not int or version != STATE_VERSION:  # (True == 1)
                raise ValueError(f"unsupported state version {version!r}")
            for k, v in data.get("reported", {}).items():
                state.reported[str(k)] = _reported(v)
            state.finished = set(data.get("finished", []))
            state.task_as_of = {k: float(v) for k, v in data.get("task_as_of", {}).items()}
            state.open_evals = {str(k): dict(v) for k, v in data.get("open_evals", {}).items()}
            state.acted = {str(k): dict(v) for k, v in data.get("acted", {}).items()}
            state.extra = {k: v for k, v in data.items() if k not in _KNOWN}
        except (OSError, ValueError, TypeError, IndexError, AttributeError,
                OverflowError, RecursionError) as e:
            raise StateError(f"{path}: cannot read state file: {e}") from e
        return state

    @classmethod
    def open(cls, path: Path) -> WatchState:
        """Lock and load ``path`` for a watch, and save it at once.

        A second watcher on the same state is refused: the two would overwrite each
        other's saves and report each other's findings again. A state file that cannot
        be written is an error before the watch starts, not a loss at its end.
        """
        try:
            if not path.parent.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
            lock_fd = _lock(path)
        except OSError as e:
            raise StateError(f"{path}: cannot write state file: {e.strerror or e}") from e
        try:
            state = cls.load(path)
            state._lock_fd = lock_fd
            state.save()
        except OSError as e:
            os.close(lock_fd)
            raise StateError(f"{path}: cannot write state file: {e.strerror or e}") from e
        except BaseException:
            os.close(lock_fd)
            raise
        return state

    def close(self) -> None:
        """Release the lock (the process's exit releases it too, however it ends)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def save(self) -> None:
        if self.path is not None:
            atomic_write(self.path, orjson.dumps(self.to_dict()).decode())


_KNOWN = frozenset({"version", "reported", "finished", "task_as_of", "open_evals", "acted"})
_STATUSES = ("open", "escalated", "ended")


def _reported(v: Any) -> Reported:
    """One ``reported`` entry, ``[confidence, status, count]``, checked: a count of
    ``1e400`` (a float infinity to JSON) was a traceback, not a located error."""
    if not isinstance(v, list) or len(v) != 3:
        raise ValueError(f"a reported entry must be [confidence, status, count], not {v!r:.60}")
    confidence, status, count = v
    if confidence not in CONFIDENCE_LEVELS or status not in _STATUSES:
        raise ValueError(f"a reported entry has an unknown level or status: {v!r:.60}")
    if type(count) is not int or count < 0:
        raise ValueError(f"a reported count must be a whole number, not {count!r:.40}")
    return Reported(confidence, status, count)


class StateError(Exception):
    """The state file exists but cannot be used."""


def lock_path(path: Path) -> Path:
    """The lock beside the file ``path`` names (through symlinks: two links to one state
    take one lock)."""
    real = Path(os.path.realpath(path))
    return real.with_name(real.name + ".lock")


def _lock(path: Path) -> int:
    """Take the state's lock, or raise :class:`StateError` naming the watcher holding it.

    The lock file is left in place when released: removing it would let a watcher that
    opened it before the removal and one that opened it after each hold "the" lock.
    """
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(lock_path(path), flags, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        os.close(fd)
        who = f"watcher (pid {holder})" if holder.isdigit() else "watcher"
        raise StateError(f"{path}: another {who} is using this state file; two watchers "
                         "sharing one state would report findings twice: give each its "
                         "own --state") from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


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
