"""``sample``: predicates over the samples-listing row: retries, limits, errors, outliers.

Driven by rows, not events: a row's ``context`` (other samples of the task) tells a
task-wide failure from a local one, and finished samples' figures give the median an
outlier is measured against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from watcher.engine.detectors.base import COMMON_FACTS, MAX_EXCERPTS, RuleState, push, short
from watcher.engine.detectors.params import INT, NUMBER, PRED, STR, TABLE, Kind, Param, Table
from watcher.engine.rule import ROW, Pred
from watcher.findings import Finding
from watcher.median import median

if TYPE_CHECKING:
    from watcher.engine.rule import Rule
    from watcher.engine.runtime import RunContext, SampleWatch

SAMPLE_FACTS: frozenset[str] = COMMON_FACTS | {
    "status", "retries", "error", "total_tokens", "total_time", "limit", "message_count",
    "task_wide", "same_error_samples", "errored_samples", "samples", "outlier_field",
    "outlier_ratio", "median", "compared_with",
}


@dataclass
class SampleSpec:
    """Predicates over the samples-listing row: retries, limits, errors, outliers."""

    where: Pred
    outlier: tuple[str, float, int] | None = None  # (field, factor, min_samples)
    kind: str = "sample"


    @property
    def min_count(self) -> int:
        return 1

    def new_state(self, rule: Rule, watch: SampleWatch) -> RuleState:
        return SampleRowState(rule, watch, self)


ROW_FACTS = ("status", "retries", "error", "total_tokens", "total_time", "limit",
             "message_count")


class SampleRowState(RuleState):
    def __init__(self, rule: Rule, watch: SampleWatch, spec: SampleSpec) -> None:
        super().__init__(rule, watch)
        self.spec = spec

    def row(self, row: dict[str, Any], context: RunContext | None, now: float) -> list[Finding]:
        if self.spec.outlier is not None:
            if context is None or not context.complete:
                return []  # judged once every sample of the task is known (RunContext)
        elif context is not None and context.outliers_only:
            return []  # that late pass is for outliers alone
        view = dict(row)
        ctx_view = context.view(row) if context is not None else {}
        view["context"] = ctx_view
        if not self.spec.where(view) or self.watch.suppressed(view, self.rule):
            return []
        facts: dict[str, Any] = {k: row.get(k) for k in ROW_FACTS if k in row}
        facts.update({k: v for k, v in ctx_view.items() if k in SAMPLE_FACTS})
        if self.spec.outlier is not None:
            fname, factor, min_n = self.spec.outlier
            value = row.get(fname)
            values = context.stats.get(fname, []) if context is not None else []
            if not isinstance(value, (int, float)) or len(values) < min_n:
                return []
            med = context.median(fname) if context is not None else median(values)
            if med <= 0 or value / med < factor:
                return []
            facts.update(outlier_field=fname, outlier_ratio=round(value / med, 2), median=med,
                         compared_with=len(values))
        if facts.get("error"):
            facts["excerpt"] = short(str(facts["error"]))
        ep = self.ep
        if ep is None:
            ep = self.open(now)
            ep.count = 1
            ep.facts.update(facts)
            if facts.get("error"):
                push(ep.excerpts, short(str(facts["error"])), MAX_EXCERPTS)
            return self.start(ep)
        ep.facts.update(facts)
        ep.last_seen = now
        return self.update(ep)




def _any_row(row: dict[str, Any]) -> bool:
    return True


def build(v: dict[str, Any]) -> SampleSpec:
    out = v["outlier"]
    return SampleSpec(v["row"] if v["row"] is not None else _any_row,
                      (out["field"], float(out["factor"]), out["min_samples"])
                      if out is not None else None)


KIND = Kind(
    name="sample", drive=ROW, facts=SAMPLE_FACTS, build=build,
    predicate_hint="put row tests under detect.sample.row",
    doc="A predicate over the samples-listing row, or a field far above the task's median.",
    params=Table("detect.sample", "sample", one_of=("row", "outlier"), params=(
        Param("row", PRED, "A predicate over the row (and its `context`)."),
        Param("outlier", TABLE, "A numeric field at least `factor` times the median.",
              stop=True, table=Table("outlier", "outlier", params=(
                  Param("field", STR, "The row's numeric field.", required=True, stop=True,
                        what="outlier.field"),
                  Param("factor", NUMBER, "Times the median (> 1).", required=True, gt=1,
                        stop=True, what="outlier.factor",
                        message="outlier.factor must be > 1 (a multiple of the median)"),
                  Param("min_samples", INT, "Finished samples the median needs.", default=5,
                        lo=2, hi=100_000, stop=True),
              ))),
    )),
)
