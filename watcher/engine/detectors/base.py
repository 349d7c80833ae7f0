"""What every detector kind shares: episodes, windows, event marks and excerpts, facts.

Each kind (one module each, listed in :mod:`watcher.engine.detectors`) has a spec
(validated parameters, compiled once) and a state class holding only bounded windows
for one sample attempt. States report through :class:`RuleState`, which owns episode
bookkeeping: one finding per episode, re-emitted only when it is new, escalates, or
ends. Windows hold marks of events (:func:`mark_of`), never the events, so a sample's
rule state stays small and keeps no agent text alive.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from watcher.engine.text import collapse_ws, unmark
from watcher.events import CONTENT_WIDTH, WHOLE, Event, is_cut
from watcher.findings import Evidence, Finding, built, confidence_rank, finding_id

if TYPE_CHECKING:
    from watcher.engine.rule import Rule
    from watcher.engine.runtime import RunContext, SampleStatus, SampleWatch

COMMON_FACTS = frozenset({
    "count", "first_seen", "last_seen", "span", "excerpt", "tool", "event_type", "episode",
    "rule", "title",
})
SECONDS_WINDOW_CAP: Final = 2000  # entries kept for a seconds-only window
MAX_EVIDENCE: Final = 20
MAX_EXCERPTS: Final = 5
EXCERPT_WIDTH: Final = 160

_BANDS: Final = {"low": (0.2, 0.45), "medium": (0.45, 0.75), "high": (0.75, 1.0)}




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


def push(items: list[Any], item: Any, cap: int) -> None:
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
            push(self.uuids, str(uuid), MAX_EVIDENCE)
        push(self.timestamps, ts, MAX_EVIDENCE)
        if x and (not self.excerpts or self.excerpts[-1] != x):
            push(self.excerpts, x, MAX_EXCERPTS)


def note_kind(ep: Episode, etype: Any, function: Any) -> None:
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

    # event-driven detectors override feed; clock-driven ones tick; row-driven ones row
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
        """The clock moved on without events: close what time alone closes."""
        return self.expire(now)

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
        grown = self.watch.grown
        if not ep.data.get("_shown"):
            if not self.rule.meets(facts):
                return []
            ep.data["_shown"] = True
            ep.data["_status"] = "open"
            return [self.snapshot(ep, "ended" if status == "ended" else "open", facts)]
        if status == "ended":
            grown.pop(ep, None)
            return [self.snapshot(ep, "ended", facts)]
        if raised:
            grown.pop(ep, None)
            ep.data["_status"] = "escalated"
            return [self.snapshot(ep, "escalated", facts)]
        # shown, and grown without news (a count, the evidence): the watch asks for a
        # fresh snapshot of it now and then (SampleWatch.grown_snapshots)
        grown[ep] = self
        return []

    def current(self, ep: Episode) -> Finding:
        """A snapshot of a shown, open episode as it stands (its last status kept)."""
        return self.snapshot(ep, str(ep.data.get("_status") or "open"), self.facts_of(ep))

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
        summary = rule.message.render(facts) if rule.message is not None else rule.title
        fid = ep.data.get("_id")
        if fid is None:  # an episode keeps its id: hashed once, not for every snapshot
            ref = ep.data["_ref"] = self.watch.ref  # and the sample (attempt) it named
            fid = ep.data["_id"] = finding_id(rule.id, ref, ep.number)
        else:
            ref = ep.data.get("_ref", self.watch.ref)
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
            "episode": ep.number, "actions": (),
        })

    def common(self, ep: Episode, e: Event) -> None:
        note_kind(ep, e.get("type"), e.get("function"))


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
                push(ep.uuids, u, MAX_EVIDENCE)
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



def short_key(text: str, width: int = EXCERPT_WIDTH) -> str:
    """:func:`short` of a (long) key, reading only as much as it shows."""
    if len(text) > 8 * width:  # a long key: its head is enough unless mostly whitespace
        head = short(text[: 8 * width], width)
        if head.endswith("…"):
            return head
    return short(text, width)


def short(text: str, width: int = EXCERPT_WIDTH) -> str:
    text = " ".join(text.replace("\x1f", " ").replace("\x00", "").split())
    return text if len(text) <= width else text[: width - 1] + "…"
