"""What a finding cost: the tokens (and money) its sample spent after it was first seen.

A loop found at 02:00 keeps spending until someone stops it. So that a report can say
what it cost (and, post-hoc, what a watchdog would have saved), the runner keeps one
:class:`SpendMeter` per sample attempt and attaches to every snapshot of a finding,
outside the engine, the facts named in :data:`watcher.findings.SPEND_FACTS`:

- ``tokens_since_first_seen``: tokens the sample spent after the finding's first
  evidence (``first_seen``), the first event included;
- ``tokens_since_high``: the same from the moment it became ``high`` (the
  ``last_seen`` of its first ``high`` snapshot: when a watchdog could have acted);
- ``cost_since_first_seen``: the money, where Inspect knows the model's price (its
  ``ModelUsage.total_cost``; absent otherwise).

The meter counts the completed model events the sample's stream delivers (their
``tokens``, and ``cost`` from a log or the sample buffer), so a live watch and a
post-hoc one over the logs agree. When the rules read no model events (so the stream
does not deliver them), what a finding cost is not known: the figures are ``null`` and
the fact ``spend_not_counted`` says why (a listing's running total, measured from the
first snapshot, would have said ``0`` of a loop found an hour into its transcript).
Model events that carry no token usage (an old log) are said the same way.
"""

from __future__ import annotations

import bisect
from dataclasses import replace
from typing import Any

from watcher.events import Event
from watcher.findings import SPEND_FACTS, SPEND_NOT_COUNTED, Finding

TOKENS_SINCE, TOKENS_SINCE_HIGH, COST_SINCE = SPEND_FACTS
NOT_COUNTED = SPEND_NOT_COUNTED  # why a finding's token figures are null (or partial)
NO_MODEL_EVENTS = ("no loaded rule reads model events, so this watch does not read them "
                   "and cannot count what the sample spent (load a rule that reads them, or "
                   "drop --only/--needs)")


class SpendMeter:
    """The spend of one sample attempt, and the findings open on it."""

    def __init__(self, from_events: bool = True) -> None:
        self.from_events = from_events
        self._times: list[float] = []  # completed model events' timestamps, sorted
        self._tokens: list[int] = []  # each one's tokens, in the same order
        self._costs: list[float | None] = []
        self.tokens = 0  # all the attempt's model events so far
        self.cost: float | None = None
        self.row_tokens: int | None = None  # the listing's total (Inspect's own count)
        self._high_at: dict[str, float] = {}  # finding id -> when it became high
        self.open: dict[str, Finding] = {}  # the last snapshot of each open finding
        self.moved = False  # spent more since the open findings were last refreshed
        self.unpriced = 0  # completed model events without token usage

    # -- what the sample spent ----------------------------------------------------

    def add(self, event: Event) -> None:
        """Count one delivered event (only completed model events spend)."""
        if event.get("type") != "model" or event.get("pending"):
            return
        tokens = event.get("tokens")
        ts = event.get("timestamp")
        if type(tokens) is not int or not isinstance(ts, (int, float)):  # noqa: UP038
            self.unpriced += 1  # a model call whose usage the transcript does not hold
            return
        cost = event.get("cost")
        cost = float(cost) if isinstance(cost, (int, float)) and not isinstance(  # noqa: UP038
            cost, bool) else None
        i = bisect.bisect_right(self._times, ts)
        self._times.insert(i, float(ts))
        self._tokens.insert(i, tokens)
        self._costs.insert(i, cost)
        self.tokens += tokens
        if cost is not None:
            self.cost = (self.cost or 0.0) + cost
        self.moved = True

    def row(self, raw: dict[str, Any]) -> None:
        """A listing row of the sample: its ``total_tokens`` (Inspect's own count)."""
        total = raw.get("total_tokens")
        if type(total) is int:
            self.row_tokens = total

    def _before(self, t: float) -> tuple[int, float | None]:
        """Tokens and cost of the model events at or before ``t``."""
        n = bisect.bisect_right(self._times, t)
        costs = [c for c in self._costs[:n] if c is not None]
        return sum(self._tokens[:n]), (sum(costs) if costs else None)

    def since(self, t: float, *, with_t: bool = True) -> tuple[int, float | None]:
        """Tokens (and cost) of the model events after ``t``; ``with_t``: the model event
        at ``t`` too (the first evidence of a finding was itself spent on the episode; the
        event that made it ``high`` was spent before anyone could act)."""
        tokens, cost = self._before(t - 1e-6 if with_t else t)
        spent_cost = None if self.cost is None else self.cost - (cost or 0.0)
        return self.tokens - tokens, spent_cost

    # -- findings ---------------------------------------------------------------------

    def annotate(self, f: Finding) -> Finding:
        """``f`` with the spend facts as of now; remembered while it is open."""
        if f.confidence == "high" and f.id not in self._high_at:
            self._high_at[f.id] = f.last_seen
        high_at = self._high_at.get(f.id)
        facts = dict(f.evidence.facts)
        if not self.from_events or (self.unpriced and not self._times):
            # not known: null, with the reason, never a zero that reads as "spent nothing"
            facts[TOKENS_SINCE] = None
            if high_at is not None:
                facts[TOKENS_SINCE_HIGH] = None
            facts[NOT_COUNTED] = NO_MODEL_EVENTS if not self.from_events else (
                f"its {self.unpriced} model call(s) carry no token usage")
            return self._keep(replace(f, evidence=replace(f.evidence, facts=facts)))
        tokens, cost = self.since(f.first_seen)
        facts[TOKENS_SINCE] = tokens
        if high_at is not None:
            facts[TOKENS_SINCE_HIGH] = self.since(high_at, with_t=False)[0]
        if self.unpriced:
            facts[NOT_COUNTED] = (f"{self.unpriced} of its model calls carry no token usage "
                                  "and are not counted")
        if cost is not None:
            facts[COST_SINCE] = round(cost, 6)
        return self._keep(replace(f, evidence=replace(f.evidence, facts=facts)))

    def _keep(self, out: Finding) -> Finding:
        """Remember an open finding's last snapshot (for :meth:`refreshed`)."""
        if out.status == "ended":
            self.open.pop(out.id, None)
        else:
            self.open[out.id] = out
        return out

    def refreshed(self, skip: frozenset[str] | set[str] = frozenset()) -> list[Finding]:
        """The open findings again, with what the sample spent since their last
        snapshot (none if it spent nothing): a live report shows the spend grow.
        ``skip``: ids just annotated afresh (their new snapshot already says it)."""
        if not self.moved:
            return []
        self.moved = False
        return [self.annotate(f) for f in list(self.open.values()) if f.id not in skip]
