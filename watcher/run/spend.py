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
does not deliver them), it falls back to the samples listing's ``total_tokens``
(live only), measured from the first snapshot the meter saw.
"""

from __future__ import annotations

import bisect
from dataclasses import replace
from typing import Any

from watcher.events import Event
from watcher.findings import SPEND_FACTS, Finding

TOKENS_SINCE, TOKENS_SINCE_HIGH, COST_SINCE = SPEND_FACTS


class SpendMeter:
    """The spend of one sample attempt, and the findings open on it."""

    def __init__(self, from_events: bool = True) -> None:
        self.from_events = from_events
        self._times: list[float] = []  # completed model events' timestamps, sorted
        self._tokens: list[int] = []  # each one's tokens, in the same order
        self._costs: list[float | None] = []
        self.tokens = 0  # all the attempt's model events so far
        self.cost: float | None = None
        self.row_tokens: int | None = None  # the listing's total (the fallback)
        self._row_base: dict[str, int] = {}  # finding id -> row tokens when first seen
        self._high_at: dict[str, float] = {}  # finding id -> when it became high
        self.open: dict[str, Finding] = {}  # the last snapshot of each open finding
        self.moved = False  # spent more since the open findings were last refreshed

    # -- what the sample spent ----------------------------------------------------

    def add(self, event: Event) -> None:
        """Count one delivered event (only completed model events spend)."""
        if event.get("type") != "model" or event.get("pending"):
            return
        tokens = event.get("tokens")
        ts = event.get("timestamp")
        if type(tokens) is not int or not isinstance(ts, int | float):
            return
        cost = event.get("cost")
        cost = float(cost) if isinstance(cost, int | float) and not isinstance(
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
        """A listing row of the sample: its ``total_tokens`` (the fallback)."""
        total = raw.get("total_tokens")
        if type(total) is int and total != self.row_tokens:
            self.row_tokens = total
            if not self.from_events:
                self.moved = True

    def _before(self, t: float) -> tuple[int, float | None]:
        """Tokens and cost of the model events at or before ``t``."""
        n = bisect.bisect_right(self._times, t)
        costs = [c for c in self._costs[:n] if c is not None]
        return sum(self._tokens[:n]), (sum(costs) if costs else None)

    def since(self, t: float, fid: str, *, with_t: bool = True
              ) -> tuple[int | None, float | None]:
        """Tokens (and cost) spent after ``t``; ``with_t``: the model event at ``t`` too
        (the first evidence of a finding was itself spent on the episode; the event that
        made it ``high`` was spent before anyone could act)."""
        if self.from_events:
            tokens, cost = self._before(t - 1e-6 if with_t else t)
            spent_cost = None if self.cost is None else self.cost - (cost or 0.0)
            return self.tokens - tokens, spent_cost
        if self.row_tokens is None:
            return None, None
        base = self._row_base.setdefault(fid, self.row_tokens)
        return self.row_tokens - base, None

    # -- findings ---------------------------------------------------------------------

    def annotate(self, f: Finding) -> Finding:
        """``f`` with the spend facts as of now; remembered while it is open."""
        if f.confidence == "high" and f.id not in self._high_at:
            self._high_at[f.id] = f.last_seen
        tokens, cost = self.since(f.first_seen, f.id)
        if tokens is None:
            return f
        facts = dict(f.evidence.facts)
        facts[TOKENS_SINCE] = tokens
        high_at = self._high_at.get(f.id)
        if high_at is not None:
            facts[TOKENS_SINCE_HIGH] = self.since(high_at, f.id + "|high", with_t=False)[0]
        if cost is not None:
            facts[COST_SINCE] = round(cost, 6)
        out = replace(f, evidence=replace(f.evidence, facts=facts))
        if f.status == "ended":
            self.open.pop(f.id, None)
        else:
            self.open[f.id] = out
        return out

    def refreshed(self, skip: frozenset[str] | set[str] = frozenset()) -> list[Finding]:
        """The open findings again, with what the sample spent since their last
        snapshot (none if it spent nothing): a live report shows the spend grow.
        ``skip``: ids just annotated afresh (their new snapshot already says it)."""
        if not self.moved:
            return []
        self.moved = False
        return [self.annotate(f) for f in list(self.open.values()) if f.id not in skip]
