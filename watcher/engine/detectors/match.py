"""``match``: every matching event is a finding, folded into one episode per gap."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from watcher.engine.detectors.base import COMMON_FACTS, EpisodicState, RuleState, Window
from watcher.engine.detectors.params import WINDOW, Kind, Param, Table
from watcher.engine.rule import EVENT

if TYPE_CHECKING:
    from watcher.engine.rule import Rule
    from watcher.engine.runtime import SampleWatch

MATCH_FACTS: frozenset[str] = COMMON_FACTS


@dataclass
class MatchSpec:
    """Every matching event is a finding, folded into one episode per gap."""

    gap: Window | None = None
    kind: str = "match"

    @property
    def min_count(self) -> int:
        return 1

    def new_state(self, rule: Rule, watch: SampleWatch) -> RuleState:
        return EpisodicState(rule, watch, self.gap)


def build(v: dict[str, Any]) -> MatchSpec:
    return MatchSpec(v["gap"])


KIND = Kind(
    name="match", drive=EVENT, facts=MATCH_FACTS, build=build,
    doc="Every matching event is a finding; matches closer than `gap` fold into one episode.",
    params=Table("detect.match", "match", null_is_empty=True, params=(
        Param("gap", WINDOW, "Matches further apart than this start a new episode.",
              stop=True),
    )),
)
