"""``absence``: a trigger event not followed by an expected event within a window."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from watcher.engine.detectors.base import COMMON_FACTS, EpisodicState, RuleState, Window
from watcher.engine.detectors.params import BOOL, PRED, WINDOW, Kind, Param, Table
from watcher.engine.rule import EVENT, Pred
from watcher.events import Event
from watcher.findings import Finding

if TYPE_CHECKING:
    from watcher.engine.rule import Rule
    from watcher.engine.runtime import SampleWatch

ABSENCE_FACTS: frozenset[str] = COMMON_FACTS | {"waited_events", "waited_seconds", "at_end"}


@dataclass
class AbsenceSpec:
    """A trigger event not followed by an expected event within a window."""

    trigger: Pred
    expect: Pred
    within: Window
    at_end: bool = False
    gap: Window | None = None
    kind: str = "absence"


    @property
    def min_count(self) -> int:
        return 1

    def new_state(self, rule: Rule, watch: SampleWatch) -> RuleState:
        return AbsenceState(rule, watch, self)


class AbsenceState(EpisodicState):
    def armed(self) -> bool:
        """A miss never reaches this detector's state: the engine need not call it."""
        return False

    def __init__(self, rule: Rule, watch: SampleWatch, spec: AbsenceSpec) -> None:
        super().__init__(rule, watch, spec.gap)
        self.spec = spec
        self.idx = 0
        self.pending: deque[tuple[int, float, Event]] = deque(maxlen=32)

    def _due(self, now: float, idx: int | None) -> list[Finding]:
        w = self.spec.within
        out: list[Finding] = []
        while self.pending:
            p_idx, p_ts, p_e = self.pending[0]
            waited = (idx - p_idx) if idx is not None else self.idx - p_idx
            if (w.events is not None and idx is not None and waited >= w.events) or (
                w.seconds is not None and now - p_ts > w.seconds
            ):
                self.pending.popleft()
                out += self.hit(p_e, now, {"waited_events": waited,
                                           "waited_seconds": round(now - p_ts, 3),
                                           "at_end": False})
            else:
                break
        return out

    def feed(self, e: Event, ts: float, matched: bool) -> list[Finding]:
        if not matched:
            return []
        self.idx += 1
        out: list[Finding] = []
        if self.spec.expect(e):
            self.pending.clear()
        else:
            out += self._due(ts, self.idx)
        if self.spec.trigger(e):
            self.pending.append((self.idx, ts, e))
        self.since_hit += 1
        out += self.gap_check(ts)
        return out

    def expire(self, now: float) -> list[Finding]:
        return self._due(now, None) + self.gap_check(now)

    def finalize(self, now: float) -> list[Finding]:
        out = self.expire(now)
        if self.spec.at_end:
            while self.pending:
                p_idx, p_ts, p_e = self.pending.popleft()
                out += self.hit(p_e, now, {"waited_events": self.idx - p_idx,
                                           "waited_seconds": round(now - p_ts, 3),
                                           "at_end": True})
        if self.ep is not None:
            out += self.end(now)
        return out




def build(v: dict[str, Any]) -> AbsenceSpec:
    return AbsenceSpec(v["trigger"], v["expect"], v["within"], v["at_end"], v["gap"])


KIND = Kind(
    name="absence", drive=EVENT, facts=ABSENCE_FACTS, build=build,
    doc="A `trigger` event not followed by an `expect` event within a window.",
    params=Table("detect.absence", "absence", params=(
        Param("trigger", PRED, "The event that starts the wait.", required=True),
        Param("expect", PRED, "The event that ends it in time.", required=True),
        Param("within", WINDOW, "How long to wait.", required=True),
        Param("at_end", BOOL, "A wait still open when the sample ends is a finding too.",
              default=False, stop=True),
        Param("gap", WINDOW, "Findings further apart than this start a new episode."),
    )),
)
