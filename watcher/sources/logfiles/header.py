"""A log's header and sample summaries, as the control channel's task and listing rows.

:func:`task_from_header` reads a finished log's stored ``header.json`` (no Inspect
import), :func:`task_from_log` an ``EvalLog`` from Inspect's reader (older formats,
``.json`` logs, URLs); both give the same :class:`~watcher.sources.base.TaskInfo`.
:func:`summary_row` makes a sample summary (pydantic or its stored JSON) a listing row
with the live listing's fields and status logic.
"""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

from watcher.sources.base import TaskInfo

_CANCELLED_EXC_NAMES = ("CancelledError", "Cancelled")


def to_unix(value: Any) -> float | None:
    """An ISO string or datetime (as found in log headers/summaries) as unix seconds."""
    if value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, datetime):
        return value.timestamp()
    try:
        return datetime.fromisoformat(str(value)).timestamp()
    except ValueError:
        return None


def _is_cancellation(message: str | None) -> bool:
    # Inspect's test, without importing Inspect for it (seconds) unless it is loaded
    mod = sys.modules.get("inspect_ai._util.error")
    test = getattr(mod, "is_cancellation_message", None)
    if test is not None:
        return bool(test(message))
    return message is not None and any(
        message.startswith(f"{name}(") for name in _CANCELLED_EXC_NAMES)


def get_field(obj: Any, name: str) -> Any:
    """An attribute of a pydantic summary, or a key of its stored JSON."""
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def summary_status(summary: Any) -> tuple[str, Any]:
    """``(status, error message)`` of a sample summary (or its JSON): ``cancelled`` (no
    error then), ``error``, ``completed`` or ``running``."""
    error = get_field(summary, "error")
    if isinstance(error, dict):  # stored JSON of an older log: an EvalError
        error = error.get("message")
    if error is not None and _is_cancellation(error):
        return "cancelled", None
    if error is not None:
        return "error", error
    return ("completed" if get_field(summary, "completed") else "running"), None


def summary_row(summary: Any) -> dict[str, Any]:
    """A listing row from an ``EvalSampleSummary`` (or its JSON), shaped like the live
    listing's."""
    status, error = summary_status(summary)
    usage = get_field(summary, "model_usage") or {}
    limit = get_field(summary, "limit")
    if isinstance(limit, dict):  # stored JSON of an older log: an EvalSampleLimit
        limit = limit.get("type")
    return {
        "sample_id": str(get_field(summary, "id")),
        "epoch": get_field(summary, "epoch"),
        "status": status,
        "started_at": to_unix(get_field(summary, "started_at")),
        "completed_at": to_unix(get_field(summary, "completed_at")),
        "total_time": get_field(summary, "total_time"),
        "total_tokens": sum(get_field(u, "total_tokens") or 0 for u in usage.values()),
        "message_count": get_field(summary, "message_count"),
        "turn_count": get_field(summary, "turn_count"),
        "scores": {name: get_field(sc, "value")
                   for name, sc in (get_field(summary, "scores") or {}).items()},
        "error": error,
        "retries": get_field(summary, "retries") or 0,
        "limit": limit,
        "limit_reason": get_field(summary, "limit_reason"),
        "uuid": get_field(summary, "uuid"),
    }


def sample_counts(summaries: list[Any]) -> dict[str, int]:
    """The live task row's ``samples`` counts, over the samples the log holds."""
    counts = {"total": len(summaries), "completed": 0, "errored": 0, "cancelled": 0,
              "in_flight": 0}
    key = {"completed": "completed", "error": "errored", "cancelled": "cancelled"}
    for summary in summaries:
        counts[key.get(summary_status(summary)[0], "in_flight")] += 1
    return counts


def task_from_log(log: Any, location: str) -> TaskInfo:
    spec, stats = log.eval, log.stats
    results = log.results
    return TaskInfo(
        eval_id=spec.eval_id,
        task=spec.task,
        task_id=spec.task_id,
        model=spec.model,
        status=log.status,
        started_at=to_unix(stats.started_at) if stats else None,
        completed_at=to_unix(stats.completed_at) if stats else None,
        log_location=location,
        run_id=spec.run_id,
        raw={
            "eval_id": spec.eval_id, "run_id": spec.run_id, "task": spec.task,
            "task_id": spec.task_id, "model": spec.model, "status": log.status,
            "log_location": location, "version": log.version,
            "created": to_unix(spec.created),
            "total_samples": results.total_samples if results else None,
            "completed_samples": results.completed_samples if results else None,
            "error": log.error.message if log.error else None,
            "scores": _scores(results.scores if results else None),
        },
    )


def _scores(scores: Any) -> dict[str, float]:
    """The header's metrics as ``{name: value}`` (``scorer/name`` when there are several
    scorers), from ``EvalScore`` objects or their stored JSON."""
    scores = list(scores or [])
    out: dict[str, float] = {}
    for score in scores:
        scorer = get_field(score, "name") or get_field(score, "scorer") or "score"
        for name, metric in (get_field(score, "metrics") or {}).items():
            value = get_field(metric, "value")
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[f"{scorer}/{name}" if len(scores) > 1 else str(name)] = float(value)
    return out


def task_from_header(header: dict[str, Any], location: str) -> TaskInfo:
    """:func:`task_from_log` from a finished log's stored ``header.json``."""
    spec = header.get("eval") or {}
    stats = header.get("stats") or {}
    results = header.get("results") or {}
    error = header.get("error") or {}
    return TaskInfo(
        eval_id=spec["eval_id"],
        task=spec["task"],
        task_id=spec["task_id"],
        model=spec["model"],
        status=header.get("status") or "unknown",
        started_at=to_unix(stats.get("started_at") or None),
        completed_at=to_unix(stats.get("completed_at") or None),
        log_location=location,
        run_id=spec.get("run_id"),
        raw={
            "eval_id": spec["eval_id"], "run_id": spec.get("run_id"), "task": spec["task"],
            "task_id": spec["task_id"], "model": spec["model"],
            "status": header.get("status"), "log_location": location,
            "version": header.get("version"), "created": to_unix(spec.get("created")),
            "total_samples": results.get("total_samples") if results else None,
            "completed_samples": results.get("completed_samples") if results else None,
            "error": error.get("message") if error else None,
            "scores": _scores(results.get("scores") if results else None),
        },
    )
