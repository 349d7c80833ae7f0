"""Detectors: parameter parsing (load time) and per-sample state (run time).

Each detector kind has a spec (validated parameters, compiled once) and a state
class holding only bounded windows for one sample attempt. States report through
:class:`RuleState`, which owns episode bookkeeping: one finding per episode,
re-emitted only when it is new, escalates, or ends.
"""

from __future__ import annotations

import json
import re
import statistics
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from rapidfuzz import fuzz

from watcher.engine.errors import BadDetectorParamsError
from watcher.engine.lang.ctx import Ctx
from watcher.engine.lang.paths import compile_path
from watcher.engine.lang.predicates import PredicateCompiler
from watcher.engine.rule import CLOCK, EVENT, ROW, CompiledPath
from watcher.engine.text import CUT_MARK, cache_key, collapse_ws, lower, unmark
from watcher.engine.yamlsrc import Path_
from watcher.events import CONTENT_WIDTH, WHOLE, Event, is_cut
from watcher.findings import (
    Evidence,
    Finding,
    built,
    confidence_rank,
    finding_id,
)

if TYPE_CHECKING:
    from watcher.engine.rule import Rule
    from watcher.engine.runtime import RunContext, SampleStatus, SampleWatch

Pred = Callable[[dict[str, Any]], bool]

COMMON_FACTS = frozenset({
    "count", "first_seen", "last_seen", "span", "excerpt", "tool", "event_type", "episode",
    "rule", "title",
})
SECONDS_WINDOW_CAP: Final = 2000  # entries kept for a seconds-only window
MAX_EVIDENCE: Final = 20
MAX_EXCERPTS: Final = 5
EXCERPT_WIDTH: Final = 160

_BANDS: Final = {"low": (0.2, 0.45), "medium": (0.45, 0.75), "high": (0.75, 1.0)}


# --------------------------------------------------------------------------- helpers


@dataclass(frozen=True)
class Window:
    """A window bounded by a number of events, seconds, or both."""

    events: int | None = None
    seconds: float | None = None

    def describe(self) -> str:
        parts = []
        if self.events is not None:
            parts.append(f"{self.events} events")
        if self.seconds is not None:
            parts.append(f"{self.seconds:g}s")
        return " / ".join(parts) or "unbounded"


def parse_window(value: Any, ctx: Ctx, path: Path_, what: str = "window") -> Window | None:
    """``{events: N}``, ``{seconds: S}`` or both; a bare integer means events."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = {"events": value}
    if not ctx.expect(value, dict, path, what):
        return None
    if not ctx.check_keys(value, path, ["events", "seconds"], section=what):
        return None
    if not value:
        ctx.error(BadDetectorParamsError, path, f"{what} needs 'events' or 'seconds'")
        return None
    ev = value.get("events")
    sec = value.get("seconds")
    if ev is not None and (not ctx.expect(ev, int, path + ("events",), f"{what}.events")):
        return None
    if sec is not None and not ctx.expect(sec, (int, float), path + ("seconds",),
                                          f"{what}.seconds"):
        return None
    if ev is not None and not 1 <= ev <= 10_000:
        ctx.error(BadDetectorParamsError, path + ("events",), f"{what}.events must be 1..10000")
        return None
    if sec is not None and sec <= 0:
        ctx.error(BadDetectorParamsError, path + ("seconds",), f"{what}.seconds must be > 0")
        return None
    return Window(ev, float(sec) if sec is not None else None)


def positive_int(value: Any, ctx: Ctx, path: Path_, what: str, lo: int = 1,
                 hi: int = 100_000) -> int | None:
    if not ctx.expect(value, int, path, what):
        return None
    if not lo <= value <= hi:
        ctx.error(BadDetectorParamsError, path, f"{what} must be between {lo} and {hi}")
        return None
    return int(value)


def excerpt_of(e: Event) -> str:
    """A short, single-line view of what an event was about (agent text: untrusted)."""
    body, cut = _excerpt_parts(e)
    return body + "…" if cut else body


def _excerpt_parts(e: Event) -> tuple[str, bool]:
    """An excerpt without its truncation mark, and whether it was cut."""
    t = e.get("type")
    if t == "tool":
        args = e.get("arguments")
        args = unmark(args) if isinstance(args, str) else ""
        if len(args) > 4 * EXCERPT_WIDTH:
            # only the head is shown: format that much (the same text when it is cut)
            head = collapse_ws(f"{e.get('function')}({args[: 4 * EXCERPT_WIDTH]}")
            if len(head) > EXCERPT_WIDTH:
                return head[: EXCERPT_WIDTH - 1], True
        text = f"{e.get('function')}({args})"
    elif t == "model":
        text = e.get("completion") or f"[model turn, stop_reason={e.get('stop_reason')}]"
        text = unmark(text) if isinstance(text, str) else text
    elif t == "error":
        text = str(e.get("error") or "error")
    else:
        text = str(e.get("data") or e.get("message") or t)
    text = str(text)
    if len(text) > 4 * EXCERPT_WIDTH:  # collapse a prefix, not a whole file's worth of text
        head = collapse_ws(text[: 4 * EXCERPT_WIDTH])
        if len(head) > EXCERPT_WIDTH:
            return head[: EXCERPT_WIDTH - 1], True
    text = collapse_ws(text)
    return (text, False) if len(text) <= EXCERPT_WIDTH else (text[: EXCERPT_WIDTH - 1], True)


def mark_of(e: Event) -> tuple[Any, str, Any, Any, bool]:
    """What an episode keeps of an event it may add later.

    ``(uuid, excerpt body, type, function, cut)``: windows hold marks rather than
    events, so a sample's rule state stays small and does not keep agent text alive
    after the stream has moved on. The excerpt's "…" is added when it is shown (one
    non-ASCII character would double the size of the stored string).
    """
    body, cut = _excerpt_parts(e)
    return (e.get("uuid"), body, e.get("type"), e.get("function"), cut)


def event_mark(e: Event, cache: dict[Any, Any]) -> tuple[Any, str, Any, Any, bool]:
    """:func:`mark_of` the current event, made once per event for every rule that keeps
    it (``cache`` is the sample's per-event cache)."""
    mark = cache.get("mark")
    if mark is None:
        mark = cache["mark"] = mark_of(e)
    return mark


def key_text(value: Any) -> str:
    """A comparable string for a key value; lists of strings avoid JSON (hot path)."""
    if isinstance(value, str):
        return value
    if type(value) is list:
        parts: list[str] = []
        for x in value:
            if x is None:
                parts.append("\x00")
            elif type(x) is str:
                parts.append(x)
            else:
                break
        else:
            return "\x1f".join(parts)
    try:
        return json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(value)


# the ``compared_on`` fact: what identity and similarity were judged on
WHOLE_VALUES: Final = "whole values"
PREFIX_256: Final = f"the first {CONTENT_WIDTH} characters"


def whole_value(e: Event, name: str) -> Any:
    """Field ``name`` of the event, whole: the source's whole text where the display
    text was cut (``events.WHOLE``), else the field itself."""
    whole = e.get(WHOLE)
    if whole:
        v = whole.get(name)
        if v is not None:
            return v
    return e.get(name)


def whole_view(e: Event, cache: dict[Any, Any]) -> Event:
    """The event with its whole texts in place of the cut ones, for expressions that
    compare values (made once per event, and only for events that had text cut)."""
    whole = e.get(WHOLE)
    if not whole:
        return e
    view: Event | None = cache.get("whole-view")
    if view is None:
        view = cache["whole-view"] = {**e, **whole}
    return view


def prefix_only(e: Event, names: frozenset[str] | tuple[str, ...]) -> bool:
    """Whether any of the fields was served only as a truncated prefix (the control
    channel's content tier, which has no ``whole``): identity cannot be judged on it."""
    if e.get(WHOLE) is not None:
        return False
    for name in names:
        if is_cut(e.get(name)):
            return True
    return False


def compared_note(compared_on: str) -> str:
    """The words a message adds when values were compared on less than their whole."""
    return "" if compared_on == WHOLE_VALUES else f" (compared on {compared_on} only)"


# --------------------------------------------------------------------------- episodes


def _push(items: list[Any], item: Any, cap: int) -> None:
    items.append(item)
    if len(items) > cap:
        del items[0]


class Episode:
    """Mutable record of one open episode; snapshots become :class:`Finding`."""

    __slots__ = ("number", "first_seen", "last_seen", "count", "uuids", "timestamps",
                 "excerpts", "facts", "level", "reason", "key", "data")

    def __init__(self, number: int, ts: float) -> None:
        self.number = number
        self.first_seen = ts
        self.last_seen = ts
        self.count = 0
        # bounded lists (the newest kept): a deque costs a 0.5 KB block each
        self.uuids: list[str] = []
        self.timestamps: list[float] = []
        self.excerpts: list[str] = []
        self.facts: dict[str, Any] = {}
        self.level = "low"
        self.reason = ""
        self.key: Any = None
        self.data: dict[str, Any] = {}

    def add(self, e: Event | None, ts: float, excerpt: bool = True) -> None:
        self.count += 1
        self.last_seen = max(self.last_seen, ts)
        if e is not None:
            self._note(e.get("uuid"), ts, excerpt_of(e) if excerpt else "")

    def add_mark(self, mark: tuple[Any, str, Any, Any, bool], ts: float) -> None:
        """Like :meth:`add`, from a :func:`mark_of` tuple."""
        self.count += 1
        self.last_seen = max(self.last_seen, ts)
        self._note(mark[0], ts, mark[1] + "…" if mark[4] else mark[1])

    def _note(self, uuid: Any, ts: float, x: str) -> None:
        if uuid:
            _push(self.uuids, str(uuid), MAX_EVIDENCE)
        _push(self.timestamps, ts, MAX_EVIDENCE)
        if x and (not self.excerpts or self.excerpts[-1] != x):
            _push(self.excerpts, x, MAX_EXCERPTS)


def _note_kind(ep: Episode, etype: Any, function: Any) -> None:
    """The facts every finding has about its events: their type, and the tool's name."""
    ep.facts["event_type"] = etype
    if etype == "tool":
        ep.facts["tool"] = function


class RuleState:
    """Per-sample state of one rule; subclasses implement the detector."""

    need: int = 1  # events an episode needs; scales the score within a confidence band
    pop_i: int = -1  # this rule's counter in ``watch.pop`` (set by the SampleWatch)

    def __init__(self, rule: Rule, watch: SampleWatch) -> None:
        self.rule = rule
        self.watch = watch
        self.episodes = 0
        self.ep: Episode | None = None

    # event-driven detectors override feed; idle overrides tick; sample overrides row
    def feed(self, e: Event, ts: float, matched: bool) -> list[Finding]:
        return []

    def armed(self) -> bool:
        """Whether an event the predicate rejected could change this state.

        When it could not (nothing open, nothing waiting), the engine skips the call:
        most events match no rule, and a call per rule per event is most of the cost.
        Detectors that count events read their position from ``watch.pop`` instead.
        """
        return self.ep is not None

    def tick(self, now: float, status: SampleStatus) -> list[Finding]:
        return []

    def row(self, row: dict[str, Any], context: RunContext | None, now: float) -> list[Finding]:
        return []

    def activity(self, ts: float) -> list[Finding]:
        """Something new happened on the sample (only idle rules care)."""
        return []

    def finalize(self, now: float) -> list[Finding]:
        out = self.expire(now)
        if self.ep is not None:
            out += self.end(now)
        return out

    def expire(self, now: float) -> list[Finding]:
        """Close episodes whose time window passed (called by finalize and tick)."""
        return []

    # -- episode bookkeeping
    def facts_of(self, ep: Episode) -> dict[str, Any]:
        facts = dict(ep.facts)
        facts.update(
            count=ep.count, first_seen=ep.first_seen, last_seen=ep.last_seen,
            span=round(ep.last_seen - ep.first_seen, 3), episode=ep.number,
            rule=self.rule.id, title=self.rule.title,
        )
        facts.setdefault("excerpt", ep.excerpts[-1] if ep.excerpts else "")
        return facts

    def open(self, ts: float) -> Episode:
        self.episodes += 1
        self.ep = Episode(self.episodes, ts)
        return self.ep

    def emit(self, ep: Episode, status: str) -> list[Finding]:
        """Recompute confidence; a snapshot if the episode is new, escalated or ending.

        An episode whose facts miss the rule's ``require`` stays silent until they hold
        (it is then reported as new); if they never hold, it is never reported.
        """
        facts = self.facts_of(ep)
        level, reason = self.rule.judge(facts)
        compared_on = facts.get("compared_on")
        if compared_on is not None and compared_on != WHOLE_VALUES and level != "low":
            # identity judged on a prefix is not identity: never more than a hint
            level = "low"
            reason = (f"The values were compared on {compared_on} only (the source served "
                      "no more of them), so they are not known to be the same.")
        raised = confidence_rank(level) > confidence_rank(ep.level)
        ep.level, ep.reason = level, reason
        if not ep.data.get("_shown"):
            if not self.rule.meets(facts):
                return []
            ep.data["_shown"] = True
            return [self.snapshot(ep, "ended" if status == "ended" else "open", facts)]
        if status == "ended":
            return [self.snapshot(ep, "ended", facts)]
        if raised:
            return [self.snapshot(ep, "escalated", facts)]
        return []

    def start(self, ep: Episode) -> list[Finding]:
        ep.level = "low"
        return self.emit(ep, "open")

    def update(self, ep: Episode) -> list[Finding]:
        return self.emit(ep, "open")

    def end(self, now: float, ep: Episode | None = None) -> list[Finding]:
        if ep is None or ep is self.ep:
            ep, self.ep = self.ep, None
        assert ep is not None
        return self.emit(ep, "ended")

    def snapshot(self, ep: Episode, status: str, facts: dict[str, Any]) -> Finding:
        rule = self.rule
        lo, hi = _BANDS[ep.level]
        strength = min(1.0, ep.count / (2.0 * max(self.need, 1)))
        score = round(lo + (hi - lo) * strength, 3)
        ref = self.watch.ref
        summary = rule.message.render(facts) if rule.message is not None else rule.title
        fid = ep.data.get("_id")
        if fid is None:  # an episode keeps its id: hashed once, not for every snapshot
            fid = ep.data["_id"] = finding_id(rule.id, ref, ep.number)
        # Finding(...) and Evidence(...) with every field named, built at once (see built)
        evidence = built(Evidence, {
            "event_uuids": tuple(ep.uuids), "timestamps": tuple(ep.timestamps),
            "excerpts": tuple(ep.excerpts),
            "facts": {k: v for k, v in facts.items() if k not in ("rule", "title", "excerpt")},
        })
        return built(Finding, {
            "id": fid, "rule": rule.id, "title": rule.title, "category": rule.category,
            "severity": rule.severity, "confidence": ep.level, "score": score,
            "confidence_reason": ep.reason, "sample": ref, "summary": summary,
            "evidence": evidence, "first_seen": ep.first_seen, "last_seen": ep.last_seen,
            "count": ep.count, "status": status, "handoff": rule.handoff,
            "episode": ep.number,
        })

    def common(self, ep: Episode, e: Event) -> None:
        _note_kind(ep, e.get("type"), e.get("function"))


# --------------------------------------------------------------------------- match


MATCH_FACTS: frozenset[str] = COMMON_FACTS


@dataclass
class MatchSpec:
    """Every matching event is a finding, folded into one episode per gap."""

    gap: Window | None = None
    kind: str = "match"

    @classmethod
    def parse(cls, value: Any, ctx: Ctx, path: Path_, pc: PredicateCompiler) -> MatchSpec | None:
        if value is None:
            value = {}
        if not ctx.expect(value, dict, path, "match"):
            return None
        if not ctx.check_keys(value, path, ["gap"], section="detect.match"):
            return None
        gap = None
        if "gap" in value:
            gap = parse_window(value["gap"], ctx, path + ("gap",), "gap")
            if gap is None:
                return None
        return cls(gap)

    @property
    def min_count(self) -> int:
        return 1

    def new_state(self, rule: Rule, watch: SampleWatch) -> RuleState:
        return EpisodicState(rule, watch, self.gap)


class EpisodicState(RuleState):
    """Shared by match, sequence and absence: hits fold into an episode until a gap."""

    def __init__(self, rule: Rule, watch: SampleWatch, gap: Window | None) -> None:
        super().__init__(rule, watch)
        self.gap = gap
        self.since_hit = 0

    def hit(self, e: Event | None, ts: float, extra: dict[str, Any] | None = None,
            uuids: list[str] | None = None) -> list[Finding]:
        out: list[Finding] = []
        out += self.gap_check(ts)
        self.since_hit = 0
        ep = self.ep
        new = ep is None
        if ep is None:
            ep = self.open(ts)
        if uuids:
            for u in uuids:
                _push(ep.uuids, u, MAX_EVIDENCE)
        ep.add(e, ts)
        if e is not None:
            self.common(ep, e)
        if extra:
            ep.facts.update(extra)
        out += self.start(ep) if new else self.update(ep)
        return out

    def gap_check(self, ts: float) -> list[Finding]:
        if self.ep is None or self.gap is None:
            return []
        if (self.gap.events is not None and self.since_hit > self.gap.events) or (
            self.gap.seconds is not None and ts - self.ep.last_seen > self.gap.seconds
        ):
            return self.end(ts)
        return []

    def feed(self, e: Event, ts: float, matched: bool) -> list[Finding]:
        if matched:
            return self.hit(e, ts)
        if self.ep is None:  # nothing open: no gap to measure
            return []
        self.since_hit += 1
        return self.gap_check(ts)

    def expire(self, now: float) -> list[Finding]:
        return self.gap_check(now)


# --------------------------------------------------------------------------- repeat

_NUM: Final = re.compile(r"\d+(?:\.\d+)?")
_PATHRX: Final = re.compile(r"(?:[A-Za-z]:)?(?:[\w.~-]*/)+[\w.-]*")
NORMALISERS = ("whitespace", "case", "numbers", "paths")


REPEAT_FACTS: frozenset[str] = COMMON_FACTS | {
    "exact", "similarity", "results_identical", "results_changed", "distinct_results",
    "period", "cycle", "repetitions", "key", "streak", "between", "compared_on", "compared",
}


@dataclass
class RepeatSpec:
    """N matching events with the same (or similar) key within a window; also cycles."""

    key: CompiledPath
    count: int
    window: Window
    result_key: CompiledPath | None = None
    similarity: float | None = None
    normalise: tuple[str, ...] = ()
    cycles: tuple[int, int] | None = None  # (max_period, min_repeats)
    consecutive: bool = False
    # calls count toward one another only when their result keys are equal
    same_result: bool = False
    # the fields identity is judged on (key and result): served cut, identity is not known
    id_fields: tuple[str, ...] = ()
    kind: str = "repeat"

    @classmethod
    def parse(cls, value: Any, ctx: Ctx, path: Path_, pc: PredicateCompiler) -> RepeatSpec | None:
        if not ctx.expect(value, dict, path, "repeat"):
            return None
        allowed = ["key", "result_key", "count", "window", "similarity", "normalise",
                   "cycles", "consecutive", "same_result"]
        if not ctx.check_keys(value, path, allowed, ["key", "count", "window"],
                              section="detect.repeat"):
            return None
        key = compile_path(value["key"], ctx, path + ("key",), "key")
        rkey = (compile_path(value["result_key"], ctx, path + ("result_key",), "result_key")
                if "result_key" in value else None)
        count = positive_int(value["count"], ctx, path + ("count",), "count", 2, 10_000)
        window = parse_window(value["window"], ctx, path + ("window",))
        sim = value.get("similarity")
        if sim is not None:
            if not ctx.expect(sim, (int, float), path + ("similarity",), "similarity"):
                return None
            if not 50 <= sim <= 100:
                ctx.error(BadDetectorParamsError, path + ("similarity",),
                          "similarity is a rapidfuzz ratio between 50 and 100",
                          "100 means identical after normalisation; 90 is a good start")
                return None
        norm = value.get("normalise", [])
        if not ctx.expect(norm, list, path + ("normalise",), "normalise"):
            return None
        for i, n in enumerate(norm):
            if n not in NORMALISERS:
                ctx.error(BadDetectorParamsError, path + ("normalise", i),
                          f"unknown normaliser {n!r}", "one of: " + ", ".join(NORMALISERS))
                return None
        cycles = None
        if "cycles" in value:
            cv = value["cycles"]
            if cv is True:
                cv = {}
            if not ctx.expect(cv, dict, path + ("cycles",), "cycles"):
                return None
            if not ctx.check_keys(cv, path + ("cycles",), ["max_period", "min_repeats"],
                                  section="cycles"):
                return None
            mp = positive_int(cv.get("max_period", 4), ctx, path + ("cycles", "max_period"),
                              "max_period", 2, 4)
            mr = positive_int(cv.get("min_repeats", 3), ctx, path + ("cycles", "min_repeats"),
                              "min_repeats", 2, 100)
            if mp is None or mr is None:
                return None
            cycles = (mp, mr)
        consecutive = value.get("consecutive", False)
        if not ctx.expect(consecutive, bool, path + ("consecutive",), "consecutive"):
            return None
        same_result = value.get("same_result", False)
        if not ctx.expect(same_result, bool, path + ("same_result",), "same_result"):
            return None
        if same_result and "result_key" not in value:
            ctx.error(BadDetectorParamsError, path + ("same_result",),
                      "same_result compares result keys, and this repeat has none",
                      "add a result_key (e.g. \"[result, error]\") or drop same_result")
            return None
        if key is None or count is None or window is None or ("result_key" in value and
                                                                rkey is None):
            return None
        if window.events is not None and window.events < count:
            ctx.error(BadDetectorParamsError, path + ("window",),
                      f"window of {window.events} events can never hold {count} repeats",
                      "make window.events >= count")
            return None
        pc.fields |= key.fields | (rkey.fields if rkey else set())
        spec = cls(key, count, window, rkey, float(sim) if sim is not None else None,
                   tuple(norm), cycles, consecutive, same_result,
                   id_fields=tuple(sorted(key.fields | (rkey.fields if rkey else set()))))
        _ = spec.step_keys, spec.part_keys  # made now, shared by every sample's state
        return spec

    @property
    def min_count(self) -> int:
        return self.count

    @property
    def step_keys(self) -> tuple[str, ...]:
        """Per-event cache keys of this key after ``k`` normalisers, for ``k`` from 0 (the
        raw key) to all of them (the last one is the rule's own key); see
        :func:`cache_key`. One tuple per (key, normalisers), made when the rule loads
        (mypyc compiles ``cached_property`` as a plain property: see ``_KEYS``)."""
        src, steps = self.key.source, self.normalise
        return _memo_keys("repeat-key", (src,), steps)

    @property
    def part_keys(self) -> tuple[tuple[str, ...], ...]:
        """:func:`part_keys` of each field of a plain-fields key (empty otherwise)."""
        return tuple(part_keys(f, self.normalise) for f in self.key.parts or ())

    def new_state(self, rule: Rule, watch: SampleWatch) -> RuleState:
        return RepeatState(rule, watch, self)


def normalise_text(text: str, steps: tuple[str, ...]) -> str:
    """Apply repeat-key normalisers in order (see ``NORMALISERS``)."""
    for n in steps:
        text = normalise_step(text, n)
    return text


def normalise_step(text: str, step: str) -> str:
    """One repeat-key normaliser (see ``NORMALISERS``)."""
    if "…" in text:  # (no scan of a one-byte text: the mark cannot be in it)
        # the server's truncation mark compares as "..."; one non-ASCII character
        # would also double the size of every stored key
        text = text.replace("…", "...")
    if step == "whitespace":
        return collapse_ws(text)
    if step == "case":
        return lower(text)
    if step == "paths":
        return _PATHRX.sub("<path>", text)
    if step == "numbers":
        return _NUM.sub("#", text)
    return text


def part_text(e: Event, cache: dict[Any, Any], name: str, steps: tuple[str, ...]) -> str:
    """Field ``name`` of the event as key text after the normalisers ``steps``.

    Cached for the current event under every prefix of ``steps``: the repeat rules and
    the unseen rule read the same fields (``arguments``, ``result``) through the same
    first normalisers, and each field is normalised once per event.
    """
    return part_chain(e, cache, name, steps, part_keys(name, steps))


# cache-key tuples by (kind, names, normalisers): made once and shared by every
# sample's rule states (a sample's state holds references, not copies)
_KEYS: dict[tuple[str, tuple[str, ...], tuple[str, ...]], tuple[str, ...]] = {}


def _memo_keys(kind: str, names: tuple[str, ...], steps: tuple[str, ...]) -> tuple[str, ...]:
    got = _KEYS.get((kind, names, steps))
    if got is None:
        got = _KEYS[(kind, names, steps)] = tuple(
            cache_key(kind, *names, steps[:k]) for k in range(len(steps) + 1))
    return got


def part_keys(name: str, steps: tuple[str, ...]) -> tuple[str, ...]:
    """The cache keys of :func:`part_chain`: ``[k]`` holds the text after ``steps[:k]``."""
    return _memo_keys("part", (name,), steps)


def part_chain(e: Event, cache: dict[Any, Any], name: str, steps: tuple[str, ...],
               keys: tuple[Any, ...]) -> str:
    """:func:`part_text` with its cache keys made beforehand (by :func:`part_keys`).

    Repeat rules read several fields through several normalisers on every event they
    match; building the keys once per rule rather than per call saves a tuple and a
    hash per lookup. Starts from the longest prefix of ``steps`` already done.
    """
    n = len(steps)
    t: str | None = cache.get(keys[n])
    if t is not None:
        return t
    k = n - 1
    while k >= 0:
        t = cache.get(keys[k])
        if t is not None:
            break
        k -= 1
    if t is None:
        v = whole_value(e, name)
        t = "\x00" if v is None else unmark(v) if type(v) is str else key_text(v)
        cache[keys[0]] = t
        k = 0
    while k < n:
        t = normalise_step(t, steps[k])
        k += 1
        cache[keys[k]] = t
    return t


class _Entry:
    """One matching event in a repeat window (``idx`` counts the rule's population).

    Only what the rule compares and reports is kept: the normalised key (its hash for
    exact rules, bounded text for fuzzy ones), hashes of the raw key and the result
    (for the distinct counts) and the event's mark.
    """

    __slots__ = ("idx", "ts", "nkey", "raw", "result", "mark", "cut")

    def __init__(self, idx: int, ts: float, nkey: Any, raw: int,
                 result: int | None, mark: tuple[Any, str, Any, Any, bool],
                 cut: str = WHOLE_VALUES) -> None:
        self.idx = idx
        self.ts = ts
        self.nkey = nkey
        self.raw = raw
        self.result = result
        self.mark = mark
        self.cut = cut  # what the key and result were compared on (the compared_on fact)


FUZZY_KEY_CHARS: Final = 512  # fuzzy keys are compared on this much text
FUZZY_PREFIX: Final = f"the first {FUZZY_KEY_CHARS} characters"


class RepeatState(RuleState):
    def __init__(self, rule: Rule, watch: SampleWatch, spec: RepeatSpec) -> None:
        super().__init__(rule, watch)
        self.spec = spec
        self.need = spec.count
        # only matching events are stored; ``idx`` tells how far back each one is
        self.win: deque[_Entry] = deque()
        self.cap = spec.window.events if spec.window.events is not None else SECONDS_WINDOW_CAP
        self.idx = 0
        self.counts: dict[Any, int] = {}  # a plain dict: Counter's __delitem__ is Python
        self.eps: dict[Any, Episode] = {}  # plain repeats by key; self.ep holds a cycle
        self.recent: deque[Any] = deque(
            maxlen=max(8, spec.cycles[0] * spec.cycles[1]) if spec.cycles else 8)
        # the entries behind ``recent``, for opening a cycle (only cycle rules do)
        self.recent_entries: deque[_Entry] | None = (
            deque(maxlen=self.recent.maxlen) if spec.cycles else None)
        # the current event's raw key (see raw_key_text): a finding shows the latest one
        self.raw_now: Any = ""
        self.step_keys = spec.step_keys
        self.part_keys = spec.part_keys
        self.cache_key = spec.step_keys[-1]
        self.result_cache_key = cache_key(
            "result-key", spec.result_key.source if spec.result_key else "")

    def _read_key(self, e: Event, cache: dict[Any, Any]) -> tuple[Any, int, str]:
        """``(raw key, its hash, normalised key)``, cached for the current event.

        Every step is cached under its own prefix of normalisers, so another rule on
        the same key (``[whitespace]`` beside ``[whitespace, case]``, in either order)
        starts from the longest prefix already done. A key of plain fields whose first
        normaliser is ``whitespace`` is normalised field by field (see
        :func:`part_chain`), so rules keyed on overlapping fields share that work; its
        raw key is then the tuple of the fields' raw texts (see :func:`raw_key_text`):
        comparing and hashing it needs no joined copy of the fields.
        """
        steps = self.spec.normalise
        keys = self.step_keys  # keys[k]: after the first k normalisers
        parts = self.spec.key.parts
        if parts is not None and steps and steps[0] == "whitespace":
            pkeys = self.part_keys
            if len(parts) == 1:
                norm = part_chain(e, cache, parts[0], steps, pkeys[0])
            else:
                # the same text as normalising the joined key: its separator is
                # whitespace, and an empty field leaves no trace after ``whitespace``
                texts = [part_chain(e, cache, parts[i], steps, pkeys[i])
                         for i in range(len(parts))]
                norm = " ".join([t for t in texts if t])
            raw = tuple([cache[k[0]] for k in pkeys])  # each field's raw text, cached above
            hit: tuple[Any, int, str] = (raw, hash(raw), norm)
            cache[keys[-1]] = hit
            return hit
        done = len(steps) - 1
        got = None
        while done >= 0:  # the longest prefix another rule has done (not all: a miss)
            got = cache.get(keys[done])
            if got is not None:
                break
            done -= 1
        if got is None:
            got = self._read_raw(e, cache)
            done = 0
        raw_text, rawh, norm = got
        for k in range(done, len(steps)):
            norm = normalise_step(norm, steps[k])
            got = cache[keys[k + 1]] = (raw_text, rawh, norm)
        return got

    def _read_raw(self, e: Event, cache: dict[Any, Any]) -> tuple[str, int, str]:
        """``(raw key, its hash, raw key)``: the key before any normaliser, cached."""
        raw = key_text(self.spec.key.get(whole_view(e, cache)))
        got = cache[self.step_keys[0]] = (raw, hash(raw), raw)
        return got

    def _same(self, a: Any, b: Any) -> bool:
        if a == b:
            return True
        sim = self.spec.similarity
        if sim is None:
            return False
        if self.spec.same_result:  # fuzzy keys are (result hash, text): see ``feed``
            if a[0] != b[0]:
                return False
            a, b = a[1], b[1]
        return fuzz.ratio(a, b, score_cutoff=sim) > 0

    def _remember(self, entry: _Entry) -> None:
        assert entry.nkey is not None
        self.recent.append(entry.nkey)
        if self.recent_entries is not None:
            self.recent_entries.append(entry)

    def _pop(self) -> None:
        old = self.win.popleft()
        k = old.nkey
        if k is not None:
            counts = self.counts
            n = counts[k] - 1
            if n <= 0:
                del counts[k]
            else:
                counts[k] = n

    def _count(self, nkey: Any) -> int:
        """Whether ``count`` window keys are the same as ``nkey`` (or similar enough).

        Callers only compare the answer with ``count``: it reaches ``count`` exactly when
        that many keys match, and is otherwise just some number below it. Fuzzy rules
        skip every comparison that cannot change that: keys equal
        to ``nkey`` (counted already), keys of another result (``same_result``), keys
        whose length rules out similarity, and the rest once ``count`` is reached or out
        of reach.
        """
        exact = self.counts.get(nkey, 0)
        sim = self.spec.similarity
        need = self.spec.count
        if sim is None or exact >= need:
            return exact
        cands: list[str] = []
        if self.spec.same_result:  # (result hash, text) keys: only one result's texts
            res = nkey[0]
            text: str = nkey[1]
            for x in self.win:
                k = x.nkey
                if k is not None and k[0] == res and k != nkey:
                    cands.append(k[1])
            if exact + len(cands) < need:  # the common case: results differ
                return exact
        else:
            text = nkey
            for x in self.win:
                k = x.nkey
                if k is not None and k != nkey:
                    cands.append(k)
        # ratio >= sim needs |len(a) - len(b)| <= (100 - sim) / 100 * (len(a) + len(b))
        # (the Indel distance is at least the length difference); both sides times 100,
        # so a pair exactly on the boundary (ratio == sim) is not lost to a rounding
        room = 100.0 - sim
        n = len(text)
        keys = [k for k in cands if abs(len(k) - n) * 100 <= room * (len(k) + n)]
        left = len(keys)
        found = exact
        ratio = fuzz.ratio
        for k in keys:
            if found + left < need:
                break
            left -= 1
            if ratio(text, k, score_cutoff=sim):
                found += 1
                if found >= need:
                    break
        return found

    def _find(self, nkey: Any) -> Episode | None:
        ep = self.eps.get(nkey)
        if ep is None and self.spec.similarity is not None:
            ep = next((x for k, x in self.eps.items() if self._same(nkey, k)), None)
        return ep

    def feed(self, e: Event, ts: float, matched: bool) -> list[Finding]:
        spec = self.spec
        out: list[Finding] = []
        win = self.win
        self.idx = self.watch.pop[self.pop_i]
        if win:
            lim = self.idx - self.cap
            sec = spec.window.seconds
            while win and (win[0].idx <= lim or (sec is not None and ts - win[0].ts > sec)):
                self._pop()
        if not matched:
            if self.ep is not None:  # a cycle is broken by any other event
                out += self.end(ts)
            if self.eps:
                for k in list(self.eps):
                    if spec.consecutive or self._count(k) < spec.count:
                        out += self._end_plain(k, ts)
            return out
        cache = self.watch.cache
        hit = cache.get(self.cache_key)
        if hit is None:
            hit = self._read_key(e, cache)
        self.raw_now, rawh, norm = hit
        result = None
        if spec.result_key is not None:
            result = cache.get(self.result_cache_key)
            if result is None:
                result = cache[self.result_cache_key] = hash(key_text(
                    spec.result_key.get(whole_view(e, cache))))
        nkey: Any
        cut = PREFIX_256 if prefix_only(e, spec.id_fields) else WHOLE_VALUES
        if spec.similarity is None:
            nkey = hash(norm) if not spec.same_result else hash((hash(norm), result))
        else:  # fuzzy: the text itself, tagged with its result's hash under same_result
            nkey = norm[:FUZZY_KEY_CHARS] if not spec.same_result else (
                result, norm[:FUZZY_KEY_CHARS])
            if len(norm) > FUZZY_KEY_CHARS and cut == WHOLE_VALUES:
                cut = FUZZY_PREFIX
        mark = event_mark(e, cache)
        entry = _Entry(self.idx, ts, nkey, rawh, result, mark, cut)
        win.append(entry)
        self.counts[nkey] = self.counts.get(nkey, 0) + 1
        if self.ep is None and not self.eps:  # the common case: nothing open
            rec = self.recent
            rec.append(nkey)
            if self.recent_entries is not None:
                self.recent_entries.append(entry)
            if self.counts[nkey] >= spec.count:
                return self._try_open(entry, ts)
            if spec.similarity is None:
                # exact keys: a cycle needs this key one period back, else nothing opens
                cyc = spec.cycles
                if cyc is None or len(rec) < 2 * 2 or not any(
                        rec[-1 - p] == nkey for p in range(2, min(cyc[0], len(rec) - 1) + 1)):
                    return out
            elif len(win) < spec.count:  # too few calls in the window to be similar enough
                return out
            return self._try_open(entry, ts)
        cur = self.ep
        if cur is not None:
            period = cur.data["period"]
            if len(self.recent) >= period and self._same(nkey, self.recent[-period]):
                self._remember(entry)
                self._grow(cur, entry)
                return self.update(cur)
            out += self.end(ts)
        target = self._find(nkey)
        if target is not None:
            self._grow(target, entry)
            out += self.update(target)
        for k, ep in list(self.eps.items()):
            if ep is not target and (spec.consecutive or self._count(k) < spec.count):
                out += self._end_plain(k, ts)
        self._remember(entry)
        if target is None:
            out += self._try_open(entry, ts)
        return out

    def armed(self) -> bool:
        return self.ep is not None or bool(self.eps)

    def _end_plain(self, key: Any, now: float) -> list[Finding]:
        return self.end(now, self.eps.pop(key))

    def finalize(self, now: float) -> list[Finding]:
        out = self.end(now) if self.ep is not None else []
        for k in sorted(self.eps, key=lambda k: self.eps[k].number):
            out += self._end_plain(k, now)
        return out

    def _try_open(self, entry: _Entry, ts: float) -> list[Finding]:
        spec = self.spec
        nkey = entry.nkey
        assert nkey is not None
        if spec.consecutive:
            run: list[_Entry] = []
            want = entry.idx
            for x in reversed(self.win):
                if x.idx != want or not self._same(nkey, x.nkey):  # type: ignore[arg-type]
                    break
                run.append(x)
                want -= 1
            members = run[::-1] if len(run) >= spec.count else []
        else:
            members = ([x for x in self.win if x.nkey is not None and self._same(nkey, x.nkey)]
                       if self._count(nkey) >= spec.count else [])
        if members:
            period = self._period_since(members[0])
            return self._open_with(members if period == 1 else self._since(members[0]),
                                    nkey, ts, period)
        if spec.cycles is not None:
            max_p, reps = spec.cycles
            rec = self.recent
            size = len(rec)
            same = self._same
            exact = spec.similarity is None
            for p in range(2, max_p + 1):
                n = p * reps
                if size < n:
                    break
                if rec[size - 1] != rec[size - 1 - p] and (
                        exact or not same(rec[size - 1], rec[size - 1 - p])):
                    continue
                if not all(same(rec[size - i], rec[size - i - p]) for i in range(2, n - p + 1)):
                    continue
                if len({rec[size - n + i] for i in range(p)}) > 1:
                    assert self.recent_entries is not None
                    return self._open_with(list(self.recent_entries)[-n:], nkey, ts, p)
        return []

    def _since(self, first: _Entry) -> list[_Entry]:
        out: list[_Entry] = []
        seen = False
        for x in self.win:
            seen = seen or x is first
            if seen and x.nkey is not None:
                out.append(x)
        return out

    def _period_since(self, first: _Entry) -> int:
        """Detect an A,B,A,B… shape from ``first`` to now, so cycles are labelled as such."""
        keys = [x.nkey for x in self._since(first)]
        if self.spec.consecutive:
            return 1
        for p in range(2, 5):
            if len(keys) >= 2 * p and len(set(keys[:p])) > 1 and all(
                keys[i] == keys[i - p] for i in range(p, len(keys))
            ):
                return p
        return 1

    def _open_with(self, members: list[_Entry], nkey: Any, ts: float,
                   period: int) -> list[Finding]:
        if period > 1:
            ep = self.open(members[0].ts)
        else:
            self.episodes += 1
            ep = self.eps[nkey] = Episode(self.episodes, members[0].ts)
        ep.key = nkey
        ep.data["period"] = period
        ep.data["raws"] = set()
        ep.data["results"] = set()
        ep.data["min_sim"] = 100.0
        ep.data["block"] = []
        ep.data["last"] = None  # the member before the one being added
        ep.data["run"] = 0  # the current run of back-to-back members with one result
        ep.facts["streak"] = 0
        ep.facts["between"] = 0
        ep.facts["compared_on"] = WHOLE_VALUES
        for m in members:
            self._grow(ep, m)
        if period > 1:
            ep.facts["cycle"] = True
        return self.start(ep)

    def _grow(self, ep: Episode, m: _Entry) -> None:
        ep.add_mark(m.mark, m.ts)
        _note_kind(ep, m.mark[2], m.mark[3])
        self._streak(ep, m)
        raws: set[int] = ep.data["raws"]
        results: set[int] = ep.data["results"]
        if len(raws) < 64:
            raws.add(m.raw)
        if m.result is not None and len(results) < 64:
            results.add(m.result)
        period = ep.data["period"]
        if self.spec.similarity is not None and m.nkey is not None and period == 1:
            a, b = (ep.key[1], m.nkey[1]) if self.spec.same_result else (ep.key, m.nkey)
            ep.data["min_sim"] = min(ep.data["min_sim"], fuzz.ratio(a, b))
        distinct_keys = len(raws)
        f = ep.facts
        f["period"] = period
        f["cycle"] = period > 1
        f["repetitions"] = ep.count // period
        f["exact"] = distinct_keys <= (period if period > 1 else 1)
        f["similarity"] = round(ep.data["min_sim"], 1)
        # members grow in order: the last one is now
        f["key"] = _short_key(raw_key_text(self.raw_now))
        if self.spec.result_key is not None:
            f["distinct_results"] = len(results)
            identical = len(results) <= (period if period > 1 else 1)
            f["results_identical"] = identical
            f["results_changed"] = not identical

    def _streak(self, ep: Episode, m: _Entry) -> None:
        """The facts on what happened between the repeats.

        ``between`` counts the other calls (events of the rule's types that are not
        repeats) made between the first repeat and this one: an edit between two runs
        of the same test makes them iteration, not a loop. ``streak`` is the longest run
        of repeats made back to back (nothing between) with the same result, and never
        shrinks: three identical calls in a row stay a fact whatever follows. A cycle's
        rounds are back to back by construction, so there it counts the repetitions.
        ``compared_on`` says what identity was judged on (whole values, or a prefix when
        the source served no more: the finding is then capped at ``low``).
        """
        f = ep.facts
        if m.cut != WHOLE_VALUES and f.get("compared_on") == WHOLE_VALUES:
            f["compared_on"] = m.cut
        f["compared"] = compared_note(f["compared_on"])
        if ep.data["period"] > 1:
            f["streak"] = ep.count // ep.data["period"]
            return
        last: _Entry | None = ep.data["last"]
        run = ep.data["run"]
        if last is None:
            run = 1
        else:
            gap = m.idx - last.idx - 1
            if gap > 0:
                f["between"] = f["between"] + gap
            run = run + 1 if gap <= 0 and m.result == last.result else 1
        ep.data["run"] = run
        ep.data["last"] = m
        if run > f["streak"]:
            f["streak"] = run


def raw_key_text(raw: Any) -> str:
    """A raw key as text: a field-by-field key's raw key is the tuple of its fields'
    texts (see ``RepeatState._read_key``), joined here only when a finding shows it."""
    return raw if type(raw) is str else "\x1f".join(raw)


def _short_key(text: str, width: int = EXCERPT_WIDTH) -> str:
    """:func:`_short` of a (long) key, reading only as much as it shows."""
    if len(text) > 8 * width:  # a long key: its head is enough unless mostly whitespace
        head = _short(text[: 8 * width], width)
        if head.endswith("…"):
            return head
    return _short(text, width)


def _short(text: str, width: int = EXCERPT_WIDTH) -> str:
    text = " ".join(text.replace("\x1f", " ").replace("\x00", "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


# --------------------------------------------------------------------------- threshold


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

    @classmethod
    def parse(cls, value: Any, ctx: Ctx, path: Path_,
              pc: PredicateCompiler) -> ThresholdSpec | None:
        if not ctx.expect(value, dict, path, "threshold"):
            return None
        if not ctx.check_keys(value, path, ["count", "window", "reset", "similarity_key"],
                              ["count", "window"], section="detect.threshold"):
            return None
        count = positive_int(value["count"], ctx, path + ("count",), "count", 1, 10_000)
        window = parse_window(value["window"], ctx, path + ("window",))
        reset = pc.compile(value["reset"], path + ("reset",), "reset") if "reset" in value \
            else None
        skey = (compile_path(value["similarity_key"], ctx, path + ("similarity_key",),
                             "similarity_key") if "similarity_key" in value else None)
        if count is None or window is None or ("reset" in value and reset is None) or (
                "similarity_key" in value and skey is None):
            return None
        if window.events is not None and window.events < count:
            ctx.error(BadDetectorParamsError, path + ("window",),
                      f"window of {window.events} events can never hold {count} matches",
                      "make window.events >= count")
            return None
        if skey is not None:
            pc.fields |= skey.fields
        return cls(count, window, reset, skey)

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
    return _NUM.sub("#", text)


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
        _note_kind(ep, mark[2], mark[3])
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


# --------------------------------------------------------------------------- sequence


SEQUENCE_FACTS: frozenset[str] = COMMON_FACTS | {"steps"}


@dataclass
class SequenceSpec:
    """Ordered steps within a window, optionally with no ``unless`` event in between."""

    steps: tuple[Pred, ...]
    within: Window
    unless: Pred | None = None
    gap: Window | None = None
    kind: str = "sequence"

    @classmethod
    def parse(cls, value: Any, ctx: Ctx, path: Path_,
              pc: PredicateCompiler) -> SequenceSpec | None:
        if not ctx.expect(value, dict, path, "sequence"):
            return None
        if not ctx.check_keys(value, path, ["steps", "within", "unless", "gap"],
                              ["steps", "within"], section="detect.sequence"):
            return None
        steps_v = value["steps"]
        if not ctx.expect(steps_v, list, path + ("steps",), "steps"):
            return None
        if not 2 <= len(steps_v) <= 10:
            ctx.error(BadDetectorParamsError, path + ("steps",),
                      "a sequence needs between 2 and 10 steps",
                      "use detect: match for a single step")
            return None
        steps = [pc.compile(s, path + ("steps", i), f"step {i + 1}") for i, s in enumerate(steps_v)]
        within = parse_window(value["within"], ctx, path + ("within",), "within")
        unless = (pc.compile(value["unless"], path + ("unless",), "unless")
                  if "unless" in value else None)
        gap = parse_window(value["gap"], ctx, path + ("gap",), "gap") if "gap" in value else None
        if any(s is None for s in steps) or within is None or (
            "unless" in value and unless is None) or ("gap" in value and gap is None):
            return None
        return cls(tuple(steps), within, unless, gap)  # type: ignore[arg-type]

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


# --------------------------------------------------------------------------- absence


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

    @classmethod
    def parse(cls, value: Any, ctx: Ctx, path: Path_,
              pc: PredicateCompiler) -> AbsenceSpec | None:
        if not ctx.expect(value, dict, path, "absence"):
            return None
        if not ctx.check_keys(value, path, ["trigger", "expect", "within", "at_end", "gap"],
                              ["trigger", "expect", "within"], section="detect.absence"):
            return None
        trig = pc.compile(value["trigger"], path + ("trigger",), "trigger")
        exp = pc.compile(value["expect"], path + ("expect",), "expect")
        within = parse_window(value["within"], ctx, path + ("within",), "within")
        at_end = value.get("at_end", False)
        if not ctx.expect(at_end, bool, path + ("at_end",), "at_end"):
            return None
        gap = parse_window(value["gap"], ctx, path + ("gap",), "gap") if "gap" in value else None
        if trig is None or exp is None or within is None or ("gap" in value and gap is None):
            return None
        return cls(trig, exp, within, at_end, gap)

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


# --------------------------------------------------------------------------- idle

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

    @classmethod
    def parse(cls, value: Any, ctx: Ctx, path: Path_, pc: PredicateCompiler) -> IdleSpec | None:
        if not ctx.expect(value, dict, path, "idle"):
            return None
        if not ctx.check_keys(value, path, ["thresholds", "functions", "polls"], ["thresholds"],
                              section="detect.idle"):
            return None
        th = value["thresholds"]
        if not ctx.expect(th, dict, path + ("thresholds",), "thresholds"):
            return None
        if not ctx.check_keys(th, path + ("thresholds",), IDLE_KINDS, section="thresholds"):
            return None
        out: dict[str, float] = {}
        for k, v in th.items():
            if not ctx.expect(v, (int, float), path + ("thresholds", k), f"thresholds.{k}"):
                return None
            if v <= 0:
                ctx.error(BadDetectorParamsError, path + ("thresholds", k),
                          "idle thresholds are seconds > 0")
                return None
            out[k] = float(v)
        funcs: dict[str, float] = {}
        fv = value.get("functions", {})
        if not ctx.expect(fv, dict, path + ("functions",), "functions"):
            return None
        for k, v in fv.items():
            if not ctx.expect(v, (int, float), path + ("functions", k), f"functions.{k}"):
                return None
            funcs[str(k)] = float(v)
        polls = positive_int(value.get("polls", 2), ctx, path + ("polls",), "polls", 2, 1000)
        if polls is None:
            return None
        return cls(out, funcs, polls)

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


# --------------------------------------------------------------------------- sample


SAMPLE_FACTS: frozenset[str] = COMMON_FACTS | {
    "status", "retries", "error", "total_tokens", "total_time", "limit", "message_count",
    "task_wide", "same_error_samples", "errored_samples", "samples", "outlier_field",
    "outlier_ratio", "median",
}


@dataclass
class SampleSpec:
    """Predicates over the samples-listing row: retries, limits, errors, outliers."""

    where: Pred
    outlier: tuple[str, float, int] | None = None  # (field, factor, min_samples)
    kind: str = "sample"

    @classmethod
    def parse(cls, value: Any, ctx: Ctx, path: Path_, pc: PredicateCompiler) -> SampleSpec | None:
        if not ctx.expect(value, dict, path, "sample"):
            return None
        if not ctx.check_keys(value, path, ["row", "outlier"], section="detect.sample"):
            return None
        if "row" not in value and "outlier" not in value:
            ctx.error(BadDetectorParamsError, path, "detect.sample needs 'row' or 'outlier'")
            return None
        pred = pc.compile(value["row"], path + ("row",), "row") if "row" in value else (
            lambda r: True)
        outlier = None
        if "outlier" in value:
            ov = value["outlier"]
            if not ctx.expect(ov, dict, path + ("outlier",), "outlier"):
                return None
            if not ctx.check_keys(ov, path + ("outlier",), ["field", "factor", "min_samples"],
                                  ["field", "factor"], section="outlier"):
                return None
            fv, fac = ov["field"], ov["factor"]
            if not ctx.expect(fv, str, path + ("outlier", "field"), "outlier.field") or \
                    not ctx.expect(fac, (int, float), path + ("outlier", "factor"),
                                   "outlier.factor"):
                return None
            if fac <= 1:
                ctx.error(BadDetectorParamsError, path + ("outlier", "factor"),
                          "outlier.factor must be > 1 (a multiple of the median)")
                return None
            ms = positive_int(ov.get("min_samples", 5), ctx, path + ("outlier", "min_samples"),
                              "min_samples", 2, 100_000)
            if ms is None:
                return None
            outlier = (fv, float(fac), ms)
        if pred is None:
            return None
        return cls(pred, outlier)

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
            med = statistics.median(values)
            if med <= 0 or value / med < factor:
                return []
            facts.update(outlier_field=fname, outlier_ratio=round(value / med, 2), median=med)
        if facts.get("error"):
            facts["excerpt"] = _short(str(facts["error"]))
        ep = self.ep
        if ep is None:
            ep = self.open(now)
            ep.count = 1
            ep.facts.update(facts)
            if facts.get("error"):
                _push(ep.excerpts, _short(str(facts["error"])), MAX_EXCERPTS)
            return self.start(ep)
        ep.facts.update(facts)
        ep.last_seen = now
        return self.update(ep)


# --------------------------------------------------------------------------- unseen


UNSEEN_FACTS: frozenset[str] = COMMON_FACTS | {"value", "searched"}


@dataclass
class UnseenSpec:
    """A value (e.g. the submitted answer) that none of the earlier outputs contained.

    The last ``keep`` texts of ``seen_in`` events are remembered (lower-cased, so the
    state stays bounded); a ``when`` event whose ``value`` (trimmed, lower-cased, at
    least ``min_length`` characters) occurs in none of them is a hit.
    """

    value: CompiledPath
    when: Pred
    seen_in: Pred
    field: CompiledPath
    keep: int = 50
    min_length: int = 3
    gap: Window | None = None
    kind: str = "unseen"

    @classmethod
    def parse(cls, value: Any, ctx: Ctx, path: Path_,
              pc: PredicateCompiler) -> UnseenSpec | None:
        if not ctx.expect(value, dict, path, "unseen"):
            return None
        if not ctx.check_keys(value, path, ["value", "when", "seen_in", "field", "keep",
                                            "min_length", "gap"],
                              ["value", "when", "seen_in"], section="detect.unseen"):
            return None
        val = compile_path(value["value"], ctx, path + ("value",), "value")
        when = pc.compile(value["when"], path + ("when",), "when")
        seen_in = pc.compile(value["seen_in"], path + ("seen_in",), "seen_in")
        fld = compile_path(value.get("field", "result"), ctx, path + ("field",), "field")
        keep = positive_int(value.get("keep", 50), ctx, path + ("keep",), "keep", 1, 1000)
        min_length = positive_int(value.get("min_length", 3), ctx, path + ("min_length",),
                                  "min_length", 1, 1000)
        gap = parse_window(value["gap"], ctx, path + ("gap",), "gap") if "gap" in value else None
        if (val is None or when is None or seen_in is None or fld is None or keep is None
                or min_length is None or ("gap" in value and gap is None)):
            return None
        spec = cls(val, when, seen_in, fld, keep, min_length, gap)
        _ = spec.fold_keys  # made now, shared by every sample's state
        return spec

    @property
    def min_count(self) -> int:
        return 1

    @property
    def fold_keys(self) -> tuple[str, ...] | None:
        """:func:`part_keys` of ``field`` folded by ``_FOLD``, when it is one plain field
        (made on each call: states keep their own)."""
        parts = self.field.parts
        return part_keys(parts[0], _FOLD) if parts is not None and len(parts) == 1 else None

    def new_state(self, rule: Rule, watch: SampleWatch) -> RuleState:
        return UnseenState(rule, watch, self)


_FOLD: Final = ("whitespace", "case")  # how the unseen rule compares values with outputs
# outputs are searched whole, within a bound: each text to its first and last part, and
# all the texts kept to a budget (the oldest dropped first), so the state stays small
UNSEEN_TEXT: Final = 4096
UNSEEN_BUDGET: Final = 8_000


class UnseenState(EpisodicState):
    def armed(self) -> bool:
        """A miss never reaches this detector's state: the engine need not call it."""
        return False

    def __init__(self, rule: Rule, watch: SampleWatch, spec: UnseenSpec) -> None:
        super().__init__(rule, watch, spec.gap)
        self.spec = spec
        # the last ``keep`` texts, joined by NUL (which no searched value contains, so a
        # match cannot span two texts): one string instead of one object per text.
        # New texts wait in ``fresh`` and are joined in batches: rebuilding the string
        # for every output copied all of it each time
        self.fold_keys = spec.fold_keys
        self.fold_field = spec.field.parts[0] if spec.field.parts else ""
        self.blob = ""
        self.lens: list[int] = []
        self.fresh: list[str] = []

    FRESH_BATCH = 16

    def remember(self, text: str) -> None:
        self.fresh.append(text.replace("\x00", ""))
        if len(self.fresh) >= min(self.FRESH_BATCH, self.spec.keep):
            self._merge()

    def _merge(self) -> None:
        """Join the waiting texts onto the blob and keep only the last ``keep`` (and no
        more than :data:`UNSEEN_BUDGET` characters of them)."""
        fresh = self.fresh
        if not fresh:
            return
        lens = self.lens + [len(t) for t in fresh]
        blob = "\x00".join(([self.blob] if self.lens else []) + fresh)
        drop = len(lens) - self.spec.keep
        total = sum(lens) + len(lens)
        while drop < len(lens) - 1 and total - sum(lens[:max(drop, 0)]) - max(drop, 0) > (
                UNSEEN_BUDGET):
            drop = max(drop, 0) + 1
        if drop > 0:
            blob = blob[sum(lens[:drop]) + drop:]  # each dropped text and its separator
            del lens[:drop]
        self.blob, self.lens, self.fresh = blob, lens, []

    def feed(self, e: Event, ts: float, matched: bool) -> list[Finding]:
        if not matched:
            return []
        spec = self.spec
        if spec.when(e):
            raw = spec.value.get(e)
            text = normalise_text(key_text(raw), _FOLD) if raw is not None else ""
            text = text.replace("\x00", "")
            self._merge()
            if len(text) >= spec.min_length and text not in self.blob:
                return self.hit(e, ts, {"value": _short(text, 80),
                                        "searched": len(self.lens)})
            self.since_hit += 1
            return self.gap_check(ts)
        if spec.seen_in(e):
            out = spec.field.get(e)
            if out is not None:
                fold = self.fold_keys
                # a plain field: the repeat rules may have folded it for this event already
                text = (part_chain(e, self.watch.cache, self.fold_field, _FOLD, fold)
                        if fold is not None else normalise_text(
                            key_text(spec.field.get(whole_view(e, self.watch.cache))), _FOLD))
                if prefix_only(e, spec.field.fields):
                    # the server's truncation mark (read as CUT_MARK) is not output
                    text = text[:-len(CUT_MARK)]
                if len(text) > UNSEEN_TEXT:
                    text = text[:UNSEEN_TEXT // 2] + "\x00" + text[-UNSEEN_TEXT // 2:]
                self.remember(text)
        if self.ep is not None:
            self.since_hit += 1
            return self.gap_check(ts)
        return []


DETECTORS: dict[str, Any] = {
    "match": MatchSpec, "repeat": RepeatSpec, "threshold": ThresholdSpec,
    "sequence": SequenceSpec, "absence": AbsenceSpec, "idle": IdleSpec, "sample": SampleSpec,
    "unseen": UnseenSpec,
}
EVENT_DETECTORS = frozenset({"match", "repeat", "threshold", "sequence", "absence", "unseen"})
# each detector's facts (module constants: compiled, a class attribute becomes a slot)
FACTS_OF: dict[str, frozenset[str]] = {
    "match": MATCH_FACTS,
    "repeat": REPEAT_FACTS,
    "threshold": THRESHOLD_FACTS,
    "sequence": SEQUENCE_FACTS,
    "absence": ABSENCE_FACTS,
    "idle": IDLE_FACTS,
    "sample": SAMPLE_FACTS,
    "unseen": UNSEEN_FACTS,
}
# what drives each kind (see rule.EVENT, CLOCK, ROW)
DRIVES: dict[str, str] = {k: EVENT for k in EVENT_DETECTORS} | {"idle": CLOCK, "sample": ROW}
