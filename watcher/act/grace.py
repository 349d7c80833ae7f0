"""Step 2 of the watchdog: the grace, and whether the sample is still the one to act on.

The sample is read every poll until N more events or T seconds have passed (whichever
first); the finding must still be open and the sample still running the same attempt
(same ``retries``, started before the finding's first evidence, no cancel pending).
Pure functions of the pending action and the sample's row: the watchdog reads the row.
"""

from __future__ import annotations

from typing import Any

from watcher.act.pending import Pending
from watcher.act.verbs import VERBS, said

# a grace in events only, on a server whose rows count no events, is met after this long
EVENTS_UNKNOWN_GRACE = 60.0


def not_acting(p: Pending, row: dict[str, Any]) -> tuple[str, str] | None:
    """Why the sample is not (any more) the one to act on (reason, words), or ``None``.
    A task's budget finding is about the task: the sample it names may have ended."""
    f = p.finding
    if f.category == "budget" and p.spec is not None and VERBS[p.spec.verb].about_task:
        return None
    status = str(row.get("status") or "unknown")
    if status != "running":
        return ("sample_not_running", f"the sample is no longer running (its row says "
                f"{said(status)}): nothing was done")
    retries = row.get("retries") or 0
    attempt = (retries if isinstance(retries, int) else 0) + 1
    if attempt != f.sample.attempt:
        return ("new_attempt", f"the sample is on attempt {attempt}, the finding is about "
                f"attempt {f.sample.attempt}: nothing was done")
    started = row.get("started_at")
    if isinstance(started, int | float) and started > f.first_seen + 1.0:
        return ("requeued", "the sample's running attempt started after the finding's "
                "evidence (it was re-queued): nothing was done")
    if row.get("interrupt"):
        return ("cancel_pending", f"a cancel of the sample is already pending (interrupt "
                f"{said(str(row['interrupt']))}): nothing more was done")
    return None


def grace_met(p: Pending, events: int | None, now: float) -> str | None:
    """How the grace was met (``asked``, ``none``, ``events``, ``seconds``), or ``None``
    while it runs; ``events`` is the row's event count now (``None``: not counted)."""
    assert p.spec is not None
    spec = p.spec
    waited = now - p.since
    if p.asked:
        return "asked"
    if spec.grace_events is None and spec.grace_seconds is None:
        return "none"
    if (spec.grace_events is not None and events is not None and p.events0 is not None
            and events - p.events0 >= spec.grace_events):
        return "events"
    if spec.grace_seconds is not None and waited >= spec.grace_seconds:
        return "seconds"
    if spec.grace_seconds is None and (events is None or p.events0 is None) and (
            waited >= EVENTS_UNKNOWN_GRACE):
        return "seconds"  # the server counts no events: a grace of time instead
    return None
