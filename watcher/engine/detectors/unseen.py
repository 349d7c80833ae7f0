"""``unseen``: a value (e.g. the submitted answer) that no earlier output contained."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from watcher.engine.detectors.base import (
    COMMON_FACTS,
    EpisodicState,
    RuleState,
    Window,
    key_text,
    prefix_only,
    short,
    whole_view,
)
from watcher.engine.detectors.keys import normalise_text, part_chain, part_keys
from watcher.engine.detectors.params import INT, PATH, PRED, WINDOW, Kind, Param, Table
from watcher.engine.rule import EVENT, CompiledPath, Pred
from watcher.engine.text import CUT_MARK
from watcher.events import Event
from watcher.findings import Finding

if TYPE_CHECKING:
    from watcher.engine.rule import Rule
    from watcher.engine.runtime import SampleWatch

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
                return self.hit(e, ts, {"value": short(text, 80),
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




def build(v: dict[str, Any]) -> UnseenSpec:
    spec = UnseenSpec(v["value"], v["when"], v["seen_in"], v["field"], v["keep"],
                      v["min_length"], v["gap"])
    _ = spec.fold_keys  # made now, shared by every sample's state
    return spec


KIND = Kind(
    name="unseen", drive=EVENT, facts=UNSEEN_FACTS, build=build,
    doc="A `when` event whose `value` occurs in none of the last `keep` `seen_in` outputs.",
    params=Table("detect.unseen", "unseen", params=(
        Param("value", PATH, "JMESPath of the value to look for, e.g. args.answer.",
              required=True, reads=False),
        Param("when", PRED, "The events whose value is checked.", required=True),
        Param("seen_in", PRED, "The events whose output is remembered.", required=True),
        Param("field", PATH, "JMESPath of the output of seen_in events.", default="result",
              reads=False),
        Param("keep", INT, "Outputs remembered.", default=50, lo=1, hi=1000),
        Param("min_length", INT, "Shorter values are never findings.", default=3, lo=1,
              hi=1000),
        Param("gap", WINDOW, "Findings further apart than this start a new episode."),
    )),
)
