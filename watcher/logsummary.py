"""What ``inspect-watch report`` adds to findings files: the tasks and samples of the logs the
findings name, read from their headers and sample summaries only.

A findings file says which samples had findings, not how many samples a task had, how
many succeeded or what it scored. The logs know: each finding names its log
(``log_location``), and :class:`~watcher.sources.logfiles.LogSource` reads a log's header and
sample summaries (local, or any fsspec URL) without parsing a single event. The cost is
bounded: at most ``max_logs`` logs are read. What could not be read is said per task, in
plain words, so a report prints ``?`` and why instead of zeros.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from watcher.summary import RunSummary, SampleSummary, TaskSummary, sample_summary

MAX_LOGS = 50  # logs ``report`` reads at most (--max-logs)


def log_scheme(location: str) -> str | None:
    """A location's URL scheme (``s3``), or ``None`` for a local path (``file://`` too)."""
    if "://" not in location or location.startswith("file://"):
        return None
    return location.split("://", 1)[0].lower()


def may_read(location: str, schemes: Collection[str]) -> str | None:
    """Why ``report`` may not read the log a findings record names, or ``None``.

    Findings files can come from anywhere, and each record names its log: a location
    such as ``http://127.0.0.1/…`` would make ``report`` request an internal URL, and ``/``
    walk the whole disk. Only a log file (``.eval``, ``.json``) is read, on the local disk
    or over a scheme the user allowed (``--logs-from``, or the scheme of a findings file
    they named)."""
    scheme = log_scheme(location)
    if not location.rstrip("/").endswith((".eval", ".json")):
        return "its findings name no log file there (not a .eval or .json file)"
    if scheme is not None and scheme not in schemes:
        return (f"its log was not read: {scheme}:// is not a scheme this report was allowed "
                f"to read (--logs-from {scheme})")
    return None


def with_logs(summary: RunSummary, *, read: bool = True, max_logs: int = MAX_LOGS,
              schemes: Collection[str] = ()) -> RunSummary:
    """``summary`` (from findings files) with its tasks and samples read from the logs its
    findings and notices name; each task not read says why in ``TaskSummary.unknown``.
    Only local log files are read, and URLs of the ``schemes`` given (:func:`may_read`)."""
    from watcher.sources.base import SourceError
    from watcher.sources.logfiles import LogSource

    locations: list[str] = []
    for ref in [f.sample for f in summary.findings] + [n.sample for n in summary.notices
                                                        if n.sample is not None]:
        # a record from another host or version may carry anything there: a name or none
        if isinstance(ref.log_location, str) and ref.log_location and (
                ref.log_location not in locations):
            locations.append(ref.log_location)
    tasks: list[TaskSummary] = []
    samples: list[SampleSummary] = []
    why_not: dict[str, str] = {}  # log location -> why it was not read
    for i, location in enumerate(locations):
        if not read:
            why_not[location] = "its log was not read (--no-logs)"
            continue
        refused = may_read(location, {x.lower() for x in schemes})
        if refused is not None:
            why_not[location] = refused
            continue
        if i >= max_logs:
            why_not[location] = (f"its log was not read: the findings name {len(locations)} "
                                 f"log(s) and at most {max_logs} are read (--max-logs)")
            continue
        source = LogSource(location, strict=True)
        try:
            for t in source.tasks():
                rows = source.samples(t).samples
                total = t.raw.get("total_samples")
                tasks.append(TaskSummary(
                    task=t.task, model=t.model, eval_id=t.eval_id, task_id=t.task_id,
                    status=t.status, scores=dict(t.raw.get("scores") or {}),
                    total_samples=total if isinstance(total, int) else len(rows),
                    log_location=location,
                    unknown="" if rows else "its log holds no sample yet"))
                samples += [sample_summary(t, r.sample_id, r.epoch, r.raw) for r in rows]
        except SourceError as e:
            why_not[location] = f"its log could not be read ({e})"
        except Exception as e:  # noqa: BLE001 - fsspec backends raise their own types
            why_not[location] = f"its log could not be read ({type(e).__name__}: {e})"
        finally:
            source.close()
    read_ids = {t.eval_id for t in tasks}
    # tasks whose log was not read stay as the findings tell them, saying why
    for f in summary.findings:
        s = f.sample
        if s.eval_id in read_ids:
            continue
        read_ids.add(s.eval_id)
        why = why_not.get(s.log_location or "", "its findings name no log")
        tasks.append(TaskSummary(task=s.task, model=s.model, eval_id=s.eval_id,
                                 task_id=s.task_id, log_location=s.log_location,
                                 unknown=f"{why}; known only from its findings"))
    logs = tuple(dict.fromkeys([*summary.log_files, *locations]))
    return replace(summary, tasks=tuple(tasks), samples=(*summary.samples, *samples),
                   log_files=logs)
