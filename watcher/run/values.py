"""The small values a watch passes around: what to watch, how, and where an output came from.

Kept apart from :mod:`watcher.run.runner` so that the CLI, the router, the watchdog and
the front ends can name a :class:`Selector` or an :class:`Origin` without importing
the reading machinery (threads, streams, the engine) that produces them.
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass, field
from typing import Any

from watcher.discovery import ControlServer
from watcher.findings import Finding, Notice
from watcher.sources.base import SampleRow, Source, TaskInfo
from watcher.state import SampleDone

Output = Finding | Notice | SampleDone

# How long a live source whose tasks are all done is kept: a kept-alive process idles
# (it may be given more work, but a watch without --follow should end); a normal one
# exits by itself shortly after its last task, and may start another task before that.
KEEP_ALIVE_GRACE = 5.0
PROCESS_EXIT_GRACE = 60.0


@dataclass
class Selector:
    """Which tasks and samples to watch (``watch [TASK [SAMPLE_ID [EPOCH]]]``), and, with
    ``log_root`` (``--evals-from DIR``), only evals whose log is written under it."""

    task: str | None = None
    sample_id: str | None = None
    epoch: int | None = None
    log_root: str | None = None

    def task_matches(self, t: TaskInfo) -> bool:
        """Task id (or eval id) prefix, or exact task name, as ``inspect ctl`` matches;
        and its log under ``log_root``, if one is given."""
        if self.log_root is not None and not under(t.log_location, self.log_root):
            return False
        if not self.task:
            return True
        return (t.task == self.task or t.task_id.startswith(self.task)
                or t.eval_id.startswith(self.task))

    @property
    def scoped(self) -> bool:
        """Narrowed to some evals (a task, or a log directory), not every one found."""
        return bool(self.task) or self.log_root is not None

    def sample_matches(self, sample_id: str, epoch: int) -> bool:
        if self.sample_id is not None and sample_id != self.sample_id:
            return False
        return self.epoch is None or epoch == self.epoch


def under(location: str | None, root: str) -> bool:
    """Whether the log ``location`` is in the directory ``root`` (below it, any depth):
    local paths compared resolved (symlinks, ``..``), URLs by their text."""
    if not location:
        return False
    local = location.removeprefix("file://")
    base = root.removeprefix("file://")
    if "://" in local or "://" in base:
        return "://" in local and "://" in base and local.startswith(base.rstrip("/") + "/")
    real, top = os.path.realpath(local), os.path.realpath(os.path.expanduser(base))
    return real.startswith(top.rstrip(os.sep) + os.sep)


@dataclass
class RunOptions:
    poll: float = 1.0
    once: bool = False
    page_limit: int = 500
    resync_every: float = 15.0
    selector: Selector = field(default_factory=Selector)
    # seconds a live process whose tasks are all done is still watched for new tasks
    exit_grace: float = PROCESS_EXIT_GRACE
    # (k, n): read only the samples of shard k of n (a parallel post-hoc worker); the
    # others still count in the task context, so sample rules judge them all alike
    shard: tuple[int, int] | None = None
    # the last this many events of each sample are kept, shortened (tracked.RECENT_FIELDS),
    # for a front end to show (TaskWatcher.recent_events); 0: none
    recent_events: int = 0

    def owns(self, sample_id: str, epoch: int) -> bool:
        if self.shard is None:
            return True
        k, n = self.shard
        return zlib.crc32(f"{sample_id}:{epoch}".encode()) % n == k


@dataclass(frozen=True)
class Origin:
    """Where an output was read: the runner's key and label for the source, the source,
    and the control server it speaks to (``None`` for logs, replays and ``inspect ctl``
    without a discovery file). What a hook at the deciding step needs to act on a
    finding through the channel it came from (:class:`watcher.run.router.Decider`)."""

    key: str
    label: str
    source: Source
    server: ControlServer | None = None


@dataclass(frozen=True)
class SampleView:
    """A tracked sample as a front end sees it (the live status area): copied from its
    stream on the reading thread's data, so the routing thread never walks live state."""

    sample_id: str
    epoch: int
    attempt: int
    done: bool
    events: int  # events delivered to the rules
    last_event_at: float | None
    last_change_at: float
    in_flight: tuple[dict[str, Any], ...]
    last_event: dict[str, Any] | None
    row: SampleRow | None  # its task's listing row


@dataclass(frozen=True)
class TaskView:
    """One watched task as a front end sees it: its listing rows and tracked samples."""

    task: TaskInfo
    finished: bool
    rows: tuple[SampleRow, ...]
    samples: tuple[SampleView, ...]
