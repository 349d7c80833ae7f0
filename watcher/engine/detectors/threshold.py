"""``threshold``: at least ``count`` matching events in a sliding window.

``reset`` empties the window; ``similarity_key`` groups the window's texts by
near-identity (the ``near_identical`` fact), read from a prefix of each.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from rapidfuzz import fuzz

from watcher.engine.detectors.base import (
    COMMON_FACTS,
    PREFIX_256,
    SECONDS_WINDOW_CAP,
    WHOLE_VALUES,
    Episode,
    RuleState,
    Window,
    compared_note,
    event_mark,
    key_text,
    note_kind,
    prefix_only,
    whole_view,
)
from watcher.engine.detectors.keys import NUM
from watcher.engine.detectors.params import INT, PATH, PRED, WINDOW, Kind, Param, Problem, Table
from watcher.engine.rule import EVENT, CompiledPath, Pred
from watcher.engine.text import collapse_ws, lower, unmark
from watcher.events import Event
from watcher.findings import Finding

if TYPE_CHECKING:
    from watcher.engine.rule import Rule
    from watcher.engine.runtime import SampleWatch

THRESHOLD_FACTS: frozenset[str] = COMMON_FACTS | {
    "window_count", "window", "near_identical", "compared_on", "compared", "unknown_prompts"}


@dataclass
class ThresholdSpec:
    """At least ``count`` matching events in a sliding window (``reset`` clears it)."""

    count: int
    window: Window
    reset: Pred | None = None
    similarity_key: CompiledPath | None = None
    kind: str = "threshold"

    @property
    def min_count(self) -> int:
        return self.count

    def new_state(self, rule: Rule, watch: SampleWatch) -> RuleState:
        return ThresholdState(rule, watch, self)


_NEAR: Final = 90.0  # rapidfuzz ratio above which two texts count as near-identical


NEAR_CHARS: Final = 500  # texts are grouped by their first 500 normalised characters


def _near_text(value: Any) -> str:
    """The first ``NEAR_CHARS`` characters of the text, spaces collapsed, lower-cased,
    numbers as ``#``.

    Normalising only ever shortens text, and each character's result depends on its
    neighbours alone, so a long text is normalised from a prefix: when that gives
    comfortably more than ``NEAR_CHARS`` characters, its head is the full text's head
    (a long completion costs the same as a short one).
    """
    text = unmark(key_text(value))
    if len(text) > 4 * NEAR_CHARS:
        head = _near_norm(text[: 4 * NEAR_CHARS])
        # only the last few characters of a prefix's result can differ from the whole
        # text's (a number or a run of spaces cut in two, a final sigma)
        if len(head) > NEAR_CHARS + 16:
            return head[:NEAR_CHARS]
    return _near_norm(text)[:NEAR_CHARS]


def _near_norm(text: str) -> str:
    # split() and join() are twice as fast as the regex ``\s+`` and mean the same; most
    # texts have no digit for the (Unicode) number regex to replace
    text = lower(collapse_ws(text))
    if text.isascii() and not any(d in text for d in "0123456789"):
        return text
    return NUM.sub("#", text)


class _Cut:
    """A similarity value the source served only as a prefix (see ``prefix_only``)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class _Unknown:
    """A value of a model turn whose prompt (what answered the turn before) is unknown."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class ThresholdState(RuleState):
    def __init__(self, rule: Rule, watch: SampleWatch, spec: ThresholdSpec) -> None:
        super().__init__(rule, watch)
        self.spec = spec
        self.need = spec.count
        # matching events only, as (population index, ts, mark, similarity value): bounded
        # by the window; created on the first match (most samples never match most
        # threshold rules). Marks, not events: the window must not keep agent text alive
        self.q: deque[tuple[int, float, tuple[Any, str, Any, Any, bool], Any]] | tuple[()] = ()
        self.qlen = spec.window.events or SECONDS_WINDOW_CAP
        self.idx = 0

    @property
    def n(self) -> int:
        return len(self.q)

    def _slide(self, ts: float) -> None:
        q = self.q
        w = self.spec.window
        self.idx = self.watch.pop[self.pop_i]
        lim = self.idx - w.events if w.events is not None else None
        sec = w.seconds
        while q and ((lim is not None and q[0][0] <= lim) or
                     (sec is not None and ts - q[0][1] > sec)):
            q.popleft()

    def _add(self, ep: Episode, mark: tuple[Any, str, Any, Any, bool], value: Any,
             ts: float) -> None:
        ep.add_mark(mark, ts)
        note_kind(ep, mark[2], mark[3])
        if type(value) is _Unknown:
            ep.facts["unknown_prompts"] = ep.facts.get("unknown_prompts", 0) + 1
            value = value.value
        if type(value) is _Cut:
            ep.facts["compared_on"] = PREFIX_256
            value = value.value
        self._near(ep, value)

    def _near(self, ep: Episode, value: Any) -> None:
        """Group texts of the episode by near-identity; the largest group is the fact."""
        if self.spec.similarity_key is None:
            return
        ep.facts.setdefault("compared_on", WHOLE_VALUES)
        ep.facts["compared"] = compared_note(ep.facts["compared_on"])
        ep.facts.setdefault("unknown_prompts", 0)
        text = _near_text(value)
        groups: list[list[Any]] = ep.data.setdefault("groups", [])
        for g in groups:
            if fuzz.ratio(text, g[0], score_cutoff=_NEAR) > 0:
                g[1] += 1
                break
        else:
            if len(groups) < 20:
                groups.append([text, 1])
        ep.facts["near_identical"] = max(g[1] for g in groups) if groups else 0

    def feed(self, e: Event, ts: float, matched: bool) -> list[Finding]:
        reset = self.spec.reset
        if reset is not None and reset(e):
            # the window starts again; the resetting event may itself be its first match
            # (a model turn answering a user's reply can be a text-only turn)
            self.q = ()
            out = self.end(ts) if self.ep is not None else []
            if matched:
                out += self.feed_match(e, ts)
            return out
        if self.q:
            self._slide(ts)
        else:
            self.idx = self.watch.pop[self.pop_i]
        ep = self.ep
        if not matched:
            if ep is not None and not self.q:
                return self.end(ts)
            return []
        return self.feed_match(e, ts)

    def feed_match(self, e: Event, ts: float) -> list[Finding]:
        """Count a matching event into the window (which the caller has slid)."""
        if not self.q:
            self.idx = self.watch.pop[self.pop_i]
        ep = self.ep
        q = self.q
        if type(q) is tuple:
            q = self.q = deque(maxlen=self.qlen)
        mark = event_mark(e, self.watch.cache)
        skey = self.spec.similarity_key
        value = None
        if skey is not None:
            value = skey.get(whole_view(e, self.watch.cache))
            if prefix_only(e, skey.fields):
                value = _Cut(value)  # compared on the served prefix only
        if e.get("type") == "model" and q and e.get("prompt_role") is None:
            # what answered the turn before this one is not known (the source served no
            # model input): a user's reply would have meant conversation, not narration
            value = _Unknown(value)
        q.append((self.idx, ts, mark, value))  # type: ignore[union-attr]
        if ep is not None:
            self._add(ep, mark, value, ts)
            ep.facts["window_count"] = len(self.q)
            return self.update(ep)
        if len(self.q) >= self.spec.count:
            ep = self.open(ts)
            for _, t, m, v in self.q:
                self._add(ep, m, v, t)
            ep.first_seen = min(ep.timestamps) if ep.timestamps else ts
            ep.facts["window_count"] = len(self.q)
            ep.facts["window"] = self.spec.window.describe()
            return self.start(ep)
        return []

    def armed(self) -> bool:
        return self.ep is not None or bool(self.q)

    def expire(self, now: float) -> list[Finding]:
        if self.q:
            self._slide(now)
        if self.ep is not None and not self.q:
            return self.end(now)
        return []


def build(v: dict[str, Any]) -> ThresholdSpec | Problem:
    count: int = v["count"]
    window: Window = v["window"]
    if window.events is not None and window.events < count:
        return Problem(("window",),
                       f"window of {window.events} events can never hold {count} matches",
                       "make window.events >= count")
    return ThresholdSpec(count, window, v["reset"], v["similarity_key"])


KIND = Kind(
    name="threshold", drive=EVENT, facts=THRESHOLD_FACTS, build=build,
    doc="At least `count` matching events within a sliding `window`.",
    params=Table("detect.threshold", "threshold", params=(
        Param("count", INT, "Matches that make a finding.", required=True, lo=1, hi=10_000),
        Param("window", WINDOW, "The sliding window.", required=True),
        Param("reset", PRED, "An event matching this empties the window."),
        Param("similarity_key", PATH,
              "JMESPath of a text: the near_identical fact counts the largest group of "
              "near-identical ones."),
    )),
)
