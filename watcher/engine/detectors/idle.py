"""``idle``: nothing new (or one call left pending) for longer than is normal for it.

Driven by the clock: the stream's :class:`~watcher.engine.runtime.SampleStatus` between
events, corroborated by at least ``polls`` polls that brought nothing new.

What "longer than normal" means: with ``learn``, what this task's own completed calls
of the same kind took (model calls per model, tool calls per function;
:mod:`watcher.engine.pace`): ``factor`` times their ``percentile``, never below the
longest of them nor below ``floor``, once ``min_calls`` of them are known. Until then,
and for what it does not learn (nothing in flight), the fixed ``thresholds``; a tool
named in ``functions`` always has the threshold given there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from watcher.engine.detectors.base import COMMON_FACTS, RuleState
from watcher.engine.detectors.params import INT, NUMBER, NUMBER_MAP, TABLE, Kind, Param, Table
from watcher.engine.pace import call_key
from watcher.engine.rule import CLOCK
from watcher.findings import Finding

if TYPE_CHECKING:
    from watcher.engine.rule import Rule
    from watcher.engine.runtime import SampleStatus, SampleWatch

IDLE_KINDS = ("model", "tool", "sandbox", "none")
NAME_WIDTH = 60  # characters of a model or tool name a message quotes


IDLE_FACTS: frozenset[str] = COMMON_FACTS | {
    "kind", "idle_seconds", "threshold_seconds", "function", "polls", "model", "waiting",
    "basis", "learned", "calls", "percentile", "percentile_seconds", "longest_seconds"}


@dataclass(frozen=True)
class Learn:
    """How an in-flight call is compared with the task's own completed calls."""

    percentile: float = 95.0
    factor: float = 5.0
    floor: float = 30.0
    min_calls: int = 20


@dataclass
class IdleSpec:
    """Nothing new (or one call left pending) for longer than is normal for it."""

    thresholds: dict[str, float]
    functions: dict[str, float] = field(default_factory=dict)
    polls: int = 2
    learn: Learn | None = None
    kind: str = "idle"

    @property
    def min_count(self) -> int:
        return self.polls

    @property
    def learns(self) -> bool:
        """Whether the engine must time the task's calls for this rule."""
        return self.learn is not None

    def new_state(self, rule: Rule, watch: SampleWatch) -> RuleState:
        return IdleState(rule, watch, self)


def secs(value: float) -> str:
    """Seconds as a message says them: "0.05", "4.1", "95", "312"."""
    if value < 1.0:
        return f"{value:.2g}"
    if value < 10.0:
        return f"{value:.1f}"
    return f"{value:.0f}"


def _name(value: Any) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= NAME_WIDTH else text[: NAME_WIDTH - 1] + "…"


def _waiting(kind: str, function: Any, model: Any, idle: float) -> str:
    """What is in flight, and for how long, in words."""
    if kind == "model":
        who = f" ({_name(model)})" if model else ""
        return f"model call{who} pending {secs(idle)} s"
    if kind == "sandbox":
        return f"sandbox command running {secs(idle)} s"
    if kind == "tool":
        return f"tool call {_name(function)} running {secs(idle)} s" if function else (
            f"tool call running {secs(idle)} s")
    return f"nothing in flight and nothing new for {secs(idle)} s"


def _noun(kind: str, function: Any, model: Any) -> str:
    """The calls an in-flight one is compared with: "model calls (m)", "bash calls"."""
    if kind == "model":
        return "calls to the model" if model else "model calls"
    if kind == "tool":
        return f"{_name(function)} calls" if function else "tool calls"
    return f"{kind} calls"


class IdleState(RuleState):
    def __init__(self, rule: Rule, watch: SampleWatch, spec: IdleSpec) -> None:
        super().__init__(rule, watch)
        self.spec = spec
        self.need = spec.polls

    def threshold(self, kind: str, function: Any, model: Any) -> tuple[float | None,
                                                                          dict[str, Any]]:
        """The threshold for what is in flight, and the facts that say where it came
        from (``basis`` in words)."""
        spec = self.spec
        facts: dict[str, Any] = {"learned": False, "calls": None, "percentile": None,
                                 "percentile_seconds": None, "longest_seconds": None}
        if function and kind != "model":
            fixed = spec.functions.get(str(function))
            if fixed is not None:
                facts["basis"] = f"threshold {secs(fixed)} s, set for {_name(function)} in " \
                                 "the rule"
                return fixed, facts
        default = spec.thresholds.get(kind)
        learn = spec.learn
        pace = self.watch.pace
        if learn is None or pace is None or kind == "none":
            if default is not None:
                what = "with nothing in flight" if kind == "none" else f"for a {kind} call"
                facts["basis"] = f"threshold {secs(default)} s {what}"
            return default, facts
        name = model if kind == "model" else function
        times = pace.times(call_key(kind, name))
        n = times.count if times is not None else 0
        noun = _noun(kind, function, model)
        facts["calls"] = n
        if times is None or n < learn.min_calls:
            if default is not None:
                known = (f"none of this task's {noun} has completed yet" if not n else
                         f"only {n} of this task's {noun} have completed")
                facts["basis"] = (f"default threshold {secs(default)} s ({known}; "
                                  f"{learn.min_calls} are needed to judge its pace)")
            return default, facts
        p = times.percentile(learn.percentile)
        longest = times.longest()
        by_factor = learn.factor * p
        threshold = max(by_factor, longest, learn.floor)
        pct = f"p{learn.percentile:g}"
        if learn.floor >= by_factor and learn.floor >= longest:
            why = "the floor"
        elif longest >= by_factor:
            why = "the longest of them"
        else:
            why = f"{learn.factor:g}× {pct}"
        facts.update(learned=True, percentile=learn.percentile,
                     percentile_seconds=round(p, 3), longest_seconds=round(longest, 3))
        facts["basis"] = (f"this task's {noun}: {pct} {secs(p)} s over {n} calls, longest "
                          f"{secs(longest)} s; threshold {secs(threshold)} s ({why})")
        return threshold, facts

    def tick(self, now: float, status: SampleStatus) -> list[Finding]:
        spec = self.spec
        function = model = None
        if status.in_flight:
            item = min(status.in_flight, key=lambda x: x.get("since") or now)
            t = str(item.get("type") or "")
            kind = t if t in ("model", "tool", "sandbox") else "tool"
            function = item.get("function")
            model = item.get("model")
            since = item.get("since")
            since = float(since) if isinstance(since, (int, float)) else now
        else:
            kind = "none"
            since = next((t for t in (status.last_change_at, status.last_event_at)
                          if t is not None), now)
        idle = now - since
        stalled = status.polls_without_change >= spec.polls
        threshold: float | None = None
        basis: dict[str, Any] = {}
        if stalled:
            threshold, basis = self.threshold(kind, function, model)
            stalled = threshold is not None and idle >= threshold
        if stalled and self.watch.suppressed(status.last_event or {}, self.rule):
            stalled = False
        ep = self.ep
        if not stalled:
            return self.end(now) if ep is not None else []
        facts = {"kind": kind, "idle_seconds": round(idle, 1), "threshold_seconds": threshold,
                 "function": function, "model": model if kind == "model" else None,
                 "polls": status.polls_without_change,
                 "waiting": _waiting(kind, function, model, idle), **basis}
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
    learn = v.get("learn")
    return IdleSpec({k: float(x) for k, x in v["thresholds"].items()},
                    {str(k): float(x) for k, x in v["functions"].items()}, v["polls"],
                    Learn(float(learn["percentile"]), float(learn["factor"]),
                          float(learn["floor"]), int(learn["min_calls"]))
                    if learn is not None else None)


KIND = Kind(
    name="idle", drive=CLOCK, facts=IDLE_FACTS, build=build,
    doc="Nothing new for longer than is normal for what is in flight: the task's own pace "
        "of calls (learn), or fixed thresholds.",
    params=Table("detect.idle", "idle", params=(
        Param("thresholds", NUMBER_MAP, "Seconds by what is in flight: model, tool, sandbox, "
              "none (with learn: until the task's own pace is known).", required=True,
              choices=IDLE_KINDS, gt=0, stop=True,
              message="idle thresholds are seconds > 0"),
        Param("functions", NUMBER_MAP, "Seconds for particular tools, by name (always "
              "used for them, learn or not).", default={}, stop=True),
        Param("polls", INT, "Polls without news that corroborate a stall.", default=2, lo=2,
              hi=1000, stop=True),
        Param("learn", TABLE, "Judge an in-flight call by the task's own completed calls of "
              "its kind (true, or the parameters).", stop=True, true_is_empty=True,
              table=Table("learn", "learn", params=(
                  Param("percentile", NUMBER, "The percentile of the task's call durations "
                        "compared with.", default=95, lo=50, hi=100),
                  Param("factor", NUMBER, "How many times that percentile a call may take.",
                        default=5, lo=1, hi=1000),
                  Param("floor", NUMBER, "The least threshold, in seconds.", default=30,
                        gt=0, lo=0, hi=86400),
                  Param("min_calls", INT, "Completed calls of the kind needed before the "
                        "task's figure is trusted (until then: thresholds).", default=20,
                        lo=1, hi=100000),
              ))),
    )),
)
