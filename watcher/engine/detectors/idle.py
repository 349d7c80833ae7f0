"""``idle``: nothing new (or one event left pending) for longer than its kind allows.

Driven by the clock: the stream's :class:`~watcher.engine.runtime.SampleStatus` between
events, corroborated by at least ``polls`` polls that brought nothing new.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from watcher.engine.detectors.base import COMMON_FACTS, RuleState
from watcher.engine.detectors.params import INT, NUMBER_MAP, Kind, Param, Table
from watcher.engine.rule import CLOCK
from watcher.findings import Finding

if TYPE_CHECKING:
    from watcher.engine.rule import Rule
    from watcher.engine.runtime import SampleStatus, SampleWatch

IDLE_KINDS = ("model", "tool", "sandbox", "none")


IDLE_FACTS: frozenset[str] = COMMON_FACTS | {
    "kind", "idle_seconds", "threshold_seconds", "function", "polls"}


@dataclass
class IdleSpec:
    """Nothing new (or one event left pending) for longer than the in-flight kind allows."""

    thresholds: dict[str, float]
    functions: dict[str, float] = field(default_factory=dict)
    polls: int = 2
    kind: str = "idle"


    @property
    def min_count(self) -> int:
        return self.polls

    def new_state(self, rule: Rule, watch: SampleWatch) -> RuleState:
        return IdleState(rule, watch, self)


class IdleState(RuleState):
    def __init__(self, rule: Rule, watch: SampleWatch, spec: IdleSpec) -> None:
        super().__init__(rule, watch)
        self.spec = spec
        self.need = spec.polls

    def tick(self, now: float, status: SampleStatus) -> list[Finding]:
        spec = self.spec
        function = None
        if status.in_flight:
            item = min(status.in_flight, key=lambda x: x.get("since") or now)
            t = str(item.get("type") or "")
            kind = t if t in ("model", "tool", "sandbox") else "tool"
            function = item.get("function")
            since = item.get("since")
            since = float(since) if isinstance(since, (int, float)) else now
        else:
            kind = "none"
            since = next((t for t in (status.last_change_at, status.last_event_at)
                          if t is not None), now)
        idle = now - since
        threshold = spec.functions.get(str(function)) if function else None
        if threshold is None:
            threshold = spec.thresholds.get(kind)
        stalled = threshold is not None and idle >= threshold and (
            status.polls_without_change >= spec.polls)
        if self.watch.suppressed(status.last_event or {}, self.rule):
            stalled = False
        ep = self.ep
        if not stalled:
            return self.end(now) if ep is not None else []
        facts = {"kind": kind, "idle_seconds": round(idle, 1), "threshold_seconds": threshold,
                 "function": function, "polls": status.polls_without_change}
        if ep is None:
            ep = self.open(since)
            ep.add(status.last_event, now, excerpt=status.last_event is not None)
            ep.facts.update(facts)
            if function:
                ep.facts["tool"] = function
            ep.last_seen = now
            return self.start(ep)
        ep.count += 1
        ep.last_seen = now
        ep.facts.update(facts)
        return self.update(ep)

    def activity(self, ts: float) -> list[Finding]:
        return self.end(ts) if self.ep is not None else []




def build(v: dict[str, Any]) -> IdleSpec:
    return IdleSpec({k: float(x) for k, x in v["thresholds"].items()},
                    {str(k): float(x) for k, x in v["functions"].items()}, v["polls"])


KIND = Kind(
    name="idle", drive=CLOCK, facts=IDLE_FACTS, build=build,
    doc="Nothing new for longer than the threshold of what is in flight.",
    params=Table("detect.idle", "idle", params=(
        Param("thresholds", NUMBER_MAP, "Seconds by what is in flight: model, tool, sandbox, "
              "none.", required=True, choices=IDLE_KINDS, gt=0, stop=True,
              message="idle thresholds are seconds > 0"),
        Param("functions", NUMBER_MAP, "Seconds for particular tools, by name.", default={},
              stop=True),
        Param("polls", INT, "Polls without news that corroborate a stall.", default=2, lo=2,
              hi=1000, stop=True),
    )),
)
