"""``sequence``: ordered steps within a window, optionally with no ``unless`` between."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from watcher.engine.detectors.base import COMMON_FACTS, EpisodicState, RuleState, Window
from watcher.engine.detectors.params import PRED, PREDS, WINDOW, Kind, Param, Table
from watcher.engine.rule import EVENT, Pred
from watcher.events import Event
from watcher.findings import Finding

if TYPE_CHECKING:
    from watcher.engine.rule import Rule
    from watcher.engine.runtime import SampleWatch

SEQUENCE_FACTS: frozenset[str] = COMMON_FACTS | {"steps"}


@dataclass
class SequenceSpec:
    """Ordered steps within a window, optionally with no ``unless`` event in between."""

    steps: tuple[Pred, ...]
    within: Window
    unless: Pred | None = None
    gap: Window | None = None
    kind: str = "sequence"


    @property
    def min_count(self) -> int:
        return 1

    def new_state(self, rule: Rule, watch: SampleWatch) -> RuleState:
        return SequenceState(rule, watch, self)


class SequenceState(EpisodicState):
    def armed(self) -> bool:
        """A miss never reaches this detector's state: the engine need not call it."""
        return False

    def __init__(self, rule: Rule, watch: SampleWatch, spec: SequenceSpec) -> None:
        super().__init__(rule, watch, spec.gap)
        self.spec = spec
        self.idx = 0
        # partial[j] = (start index, start ts, uuids): steps 0..j-1 matched; newest start wins
        self.partial: dict[int, tuple[int, float, list[str]]] = {}

    def feed(self, e: Event, ts: float, matched: bool) -> list[Finding]:
        if not matched:
            return []
        spec = self.spec
        self.idx += 1
        idx = self.idx
        w = spec.within
        for j in list(self.partial):
            s_idx, s_ts, _ = self.partial[j]
            if (w.events is not None and idx - s_idx >= w.events) or (
                w.seconds is not None and ts - s_ts > w.seconds
            ):
                del self.partial[j]
        out: list[Finding] = []
        n = len(spec.steps)
        uuid = str(e.get("uuid") or "")
        for j in sorted(self.partial, reverse=True):
            s_idx, s_ts, uuids = self.partial[j]
            if spec.steps[j](e):
                del self.partial[j]
                if j + 1 == n:
                    self.partial.clear()
                    out += self.hit(e, ts, {"steps": n}, uuids)
                    self.ep.first_seen = min(self.ep.first_seen, s_ts)  # type: ignore[union-attr]
                    return out
                cur = self.partial.get(j + 1)
                if cur is None or cur[0] < s_idx:
                    self.partial[j + 1] = (s_idx, s_ts, uuids + [uuid])
            elif spec.unless is not None and spec.unless(e):
                del self.partial[j]
        if spec.steps[0](e):
            self.partial[1] = (idx, ts, [uuid])
        self.since_hit += 1
        out += self.gap_check(ts)
        return out




def build(v: dict[str, Any]) -> SequenceSpec:
    return SequenceSpec(tuple(v["steps"]), v["within"], v["unless"], v["gap"])


KIND = Kind(
    name="sequence", drive=EVENT, facts=SEQUENCE_FACTS, build=build,
    doc="Steps matched in order within a window (an `unless` event in between breaks it).",
    params=Table("detect.sequence", "sequence", params=(
        Param("steps", PREDS, "2 to 10 predicates, matched in this order.", required=True,
              lo=2, hi=10, item_what="step {n}",
              message="a sequence needs between 2 and 10 steps",
              hint="use detect: match for a single step"),
        Param("within", WINDOW, "The first step to the last.", required=True),
        Param("unless", PRED, "An event matching this between two steps breaks the sequence."),
        Param("gap", WINDOW, "Sequences further apart than this start a new episode."),
    )),
)
