"""``inspect-watch record``: save one sample's event pages as a replayable JSONL file."""

from __future__ import annotations

from typing import Any, NamedTuple

from watcher.discovery import list_servers
from watcher.events import Tier
from watcher.sources.base import NotFound, Source, SourceError, TaskInfo


class RecordError(Exception):
    """The sample could not be found or read."""


class NothingMatched(RecordError):
    """No task, or no sample of it, matches what was asked (exit 4, not 3)."""


class Recorded(NamedTuple):
    """What ``record`` wrote: its page count, and whether the sample had not ended
    yet (a partial recording: replay reads it to its end and stops there)."""

    pages: int
    partial: bool


def _find(sources: list[Source], task: str) -> tuple[Source, TaskInfo]:
    from watcher.run.values import Selector

    selector = Selector(task)
    for src in sources:
        for t in src.tasks():
            if selector.task_matches(t):
                return src, t
    raise NothingMatched(f"no task matching {task!r}")


def record_sample(task: str, sample_id: str, epoch: int, output: str, *, tier: Tier = "content",
                  log_dir: str | None = None) -> Recorded:
    """Page the sample from its start to now (or its end)."""
    from watcher.sources.replay import write_recording

    sources: list[Source] = []
    try:
        if log_dir:
            from watcher.sources.logfiles import LogSource

            sources.append(LogSource(log_dir))
        else:
            from watcher.sources.http import HttpSource

            sources.extend(HttpSource(s) for s in list_servers())
        src, info = _find(sources, task)
        pages: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(100_000):
            page = src.events(info, sample_id, epoch, since=cursor, types=None, tier=tier)
            pages.append({"events": page.events, "next": page.next, "done": page.done})
            if page.done or not page.next or page.next == cursor:
                break
            cursor = page.next
        partial = not (pages and pages[-1]["done"])
        header = {"task": info.task, "task_id": info.task_id, "eval_id": info.eval_id,
                  "model": info.model, "sample_id": sample_id, "epoch": epoch, "tier": tier,
                  "partial": partial}
        write_recording(output, header, pages)
        return Recorded(len(pages), partial)
    except NotFound as e:
        raise NothingMatched(f"no sample {sample_id!r} epoch {epoch} of task {task!r} "
                             f"({e})") from e
    except SourceError as e:
        raise RecordError(str(e)) from e
    finally:
        for s in sources:
            s.close()
