"""Step 7's last part: a requested cancel is "requested" until the sample's row shows
it ended by the cancel (a ``confirmed`` record), or shows it ended otherwise, or does
not show it in time (``unconfirmed``). An eval gone meanwhile is asked through its log.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from watcher.act.verbs import said
from watcher.findings import SampleRef
from watcher.sources.base import SourceError

CONFIRM_SECONDS = 300.0  # how long a requested cancel is watched for the sample's end


@dataclass(frozen=True)
class Verdict:
    """What a row says of a requested cancel: the record's outcome, words and reason."""

    outcome: str
    message: str
    reason: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


def confirmation(row: dict[str, Any], action: Any, waited: float,
                 where: str = "the sample's row") -> Verdict | None:
    """What ``row`` says of a cancel requested ``waited`` seconds ago with ``action``, or
    ``None`` while it says nothing yet."""
    status = str(row.get("status") or "")
    limit = row.get("limit")
    by_cancel = (status == "cancelled" if action == "cancel" else limit == "operator")
    if by_cancel:
        return Verdict("confirmed", f"{where} shows the sample ended by the cancel (status "
                       f"{said(status)}" + (f", limit {said(str(limit))}" if limit else "")
                       + ")", details={"waited": round(waited, 3)})
    if status in ("error", "cancelled", "completed") and limit not in (None, ""):
        return Verdict("unconfirmed", f"the sample ended, but {where} does not say by the "
                       f"cancel (status {said(status)}, limit {said(str(limit))})",
                       reason="ended_otherwise")
    if waited >= CONFIRM_SECONDS:
        return Verdict("unconfirmed", f"{where} has not shown the sample end by the cancel "
                       f"within {CONFIRM_SECONDS:g} s", reason="not_seen")
    return None


def final_row(s: SampleRef) -> dict[str, Any] | None:
    """The sample's final row in its log (the eval has gone, or no longer serves it);
    ``None`` if there is no log, it cannot be read, or its row is not final."""
    location = s.log_location
    if not location:
        return None
    from watcher.sources.logfiles import LogSource

    try:
        source = LogSource(location)
        try:
            rows = [r for t in source.tasks() if t.eval_id == s.eval_id
                    for r in source.samples(t).samples
                    if r.sample_id == s.sample_id and r.epoch == s.epoch]
        finally:
            source.close()
    except SourceError:
        return None
    if not rows or not rows[0].terminal:
        return None
    return rows[0].raw
