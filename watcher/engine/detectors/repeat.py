"""``repeat``: N matching events with the same (or a similar) key within a window.

Also cycles (A, B, A, B, ...), consecutive runs, and repeats that count toward one
another only with the same result. Keys are compared whole (see ``compared_on``);
fuzzy keys on their first :data:`FUZZY_KEY_CHARS` characters.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from rapidfuzz import fuzz

from watcher.engine.calls import EFFECT_WORDS, label
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
    short_key,
    whole_view,
)
from watcher.engine.detectors.keys import (
    NORMALISERS,
    folded_before,
    memo_keys,
    normalise_step,
    normalise_text,
    part_chain,
    part_keys,
)
from watcher.engine.detectors.params import (
    BOOL,
    INT,
    NAMES,
    NUMBER,
    PATH,
    PRED,
    TABLE,
    WINDOW,
    Kind,
    Param,
    Problem,
    Table,
)
from watcher.engine.rule import EVENT, CompiledPath, Pred
from watcher.engine.text import cache_key
from watcher.events import Event
from watcher.findings import Finding

if TYPE_CHECKING:
    from watcher.engine.rule import Rule
    from watcher.engine.runtime import SampleWatch

REPEAT_FACTS: frozenset[str] = COMMON_FACTS | {
    "exact", "similarity", "results_identical", "results_changed", "distinct_results",
    "period", "cycle", "repetitions", "key", "streak", "between", "compared_on", "compared",
    "changes_between", "between_calls", "breaks_between",
}
BETWEEN_NAMES: Final = 8  # distinct calls named in ``between_calls``


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
    # events (of the rule's types, not repeats) that end a streak when they come between
    # two repeats: a user's reply, after which the next variant may be what they asked for
    breaks: Pred | None = None
    kind: str = "repeat"
    # (step_keys, part_keys, the result key's cache key), made once: a sample's state
    # is opened by its first matching call, and building them there was a tenth of
    # the engine's cost on samples of a few calls
    _keys: tuple[tuple[str, ...], tuple[tuple[str, ...], ...], str] | None = field(
        default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._keys = None  # (compiled, an init=False field's default is not set)

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
        return memo_keys("repeat-key", (src,), steps)

    @property
    def part_keys(self) -> tuple[tuple[str, ...], ...]:
        """:func:`part_keys` of each field of a plain-fields key (empty otherwise)."""
        return tuple(part_keys(f, self.normalise) for f in self.key.parts or ())

    def state_keys(self) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...], str]:
        """``(step_keys, part_keys, result cache key)``, made on first use and kept."""
        got = self._keys
        if got is None:
            got = self._keys = (self.step_keys, self.part_keys, cache_key(
                "result-key", self.result_key.source if self.result_key else ""))
        return got

    def new_state(self, rule: Rule, watch: SampleWatch) -> RuleState:
        return RepeatState(rule, watch, self)


class _Pending:
    """Stands for a fuzzy key not normalised yet (see ``_Entry.src``): equal only to
    itself, so no other key counts toward it or is found by it."""

    __slots__ = ()


class _Entry:
    """One matching event in a repeat window (``idx`` counts the rule's population).

    Only what the rule compares and reports is kept: the normalised key (its hash for
    exact rules, bounded text for fuzzy ones), hashes of the raw key and the result
    (for the distinct counts) and the event's mark; a fuzzy same-result key not
    compared yet is kept raw (``src``) until a call with its result comes.
    """

    __slots__ = ("idx", "ts", "nkey", "raw", "result", "mark", "cut", "seq", "chg", "upto",
                 "brk", "src")

    def __init__(self, idx: int, ts: float, nkey: Any, raw: int,
                 result: int | None, mark: tuple[Any, str, Any, Any, bool],
                 cut: str = WHOLE_VALUES, seq: int = -1, chg: int = 0, upto: int = 0,
                 brk: int = 0) -> None:
        self.idx = idx
        self.ts = ts
        self.nkey = nkey
        self.raw = raw
        self.result = result
        self.mark = mark
        self.cut = cut  # what the key and result were compared on (the compared_on fact)
        # the tool call's number in the sample, and the state-changing calls before it and
        # up to it (SampleWatch.call_seq, .changes; seq -1: call effects are not known)
        self.seq = seq
        self.chg = chg
        self.upto = upto
        self.brk = brk  # the rule's ``breaks`` events seen before this one
        # a fuzzy key not normalised yet: its raw key, normalised when another call with
        # the same result needs it (RepeatState._normalise_pending); None once it is
        self.src: Any = None


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
        # fuzzy keys compared only under one result: the window's entries per result hash,
        # so a call whose result no other call in the window returned is not compared at
        # all (no pass over the window: the common case of every such call)
        self.by_result: dict[Any, int] | None = (
            {} if spec.similarity is not None and spec.same_result else None)
        # and such a key is normalised only then: until another call returns the same
        # result, nothing compares it (_normalise_pending); a rule that finds cycles
        # compares keys across results, and normalises every key at once
        self.lazy = self.by_result is not None and spec.cycles is None
        self.eps: dict[Any, Episode] = {}  # plain repeats by key; self.ep holds a cycle
        self.recent: deque[Any] = deque(
            maxlen=max(8, spec.cycles[0] * spec.cycles[1]) if spec.cycles else 8)
        # the entries behind ``recent``: for opening a cycle (cycle rules), and for
        # normalising a pending key still in ``recent`` (fuzzy same-result rules)
        self.recent_entries: deque[_Entry] | None = (
            deque(maxlen=self.recent.maxlen) if spec.cycles or (
                spec.similarity is not None and spec.same_result) else None)
        # the current event's raw key (see raw_key_text): a finding shows the latest one
        self.raw_now: Any = ""
        self.brk = 0  # ``breaks`` events seen so far
        self.step_keys, self.part_keys, self.result_cache_key = spec.state_keys()
        self.cache_key = self.step_keys[-1]

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
            norm = normalise_step(norm, steps[k], folded_before(steps, k))
            got = cache[keys[k + 1]] = (raw_text, rawh, norm)
        return got

    def _read_raw(self, e: Event, cache: dict[Any, Any]) -> tuple[str, int, str]:
        """``(raw key, its hash, raw key)``: the key before any normaliser, cached."""
        raw = key_text(self.spec.key.get(whole_view(e, cache)))
        got = cache[self.step_keys[0]] = (raw, hash(raw), raw)
        return got

    def _raw_parts(self, e: Event, cache: dict[Any, Any]) -> Any:
        """The raw key as :meth:`_read_key` makes it (without normalising it): a tuple of
        the fields' raw texts for a plain-fields key, else the key's text."""
        steps = self.spec.normalise
        parts = self.spec.key.parts
        if parts is not None and steps and steps[0] == "whitespace":
            pkeys = self.part_keys
            return tuple([part_chain(e, cache, parts[i], (), (pkeys[i][0],))
                          for i in range(len(parts))])
        got = cache.get(self.step_keys[0])
        if got is None:
            got = self._read_raw(e, cache)
        return got[0]

    def _norm_of_raw(self, raw: Any) -> str:
        """The normalised key :meth:`_read_key` makes of the raw key ``raw``."""
        steps = self.spec.normalise
        if type(raw) is str:
            return normalise_text(raw, steps)
        texts = [normalise_text(t, steps) for t in raw]
        return texts[0] if len(texts) == 1 else " ".join([t for t in texts if t])

    def _recent_result(self, result: Any) -> bool:
        """Whether one of the last calls kept in ``recent`` returned ``result``."""
        for k in self.recent:
            if k[0] == result:
                return True
        return False

    def _normalise_pending(self, result: Any) -> None:
        """Normalise the keys of the calls kept (window and ``recent``) that returned
        ``result`` and are not normalised yet: a call with that result is being compared
        with them. A key is the same text whenever it is made."""
        rec = self.recent_entries
        assert rec is not None
        for x in self.win:
            if x.src is not None and x.result == result:
                old = x.nkey
                self._normalise_entry(x)
                counts = self.counts
                del counts[old]  # each pending key is its own, counted once
                counts[x.nkey] = counts.get(x.nkey, 0) + 1
        for i in range(len(rec)):
            x = rec[i]
            if x.src is not None and x.result == result:
                self._normalise_entry(x)  # no longer in the window: not counted
            if x.result == result:
                self.recent[i] = x.nkey

    def _normalise_entry(self, x: _Entry) -> None:
        norm = self._norm_of_raw(x.src)
        x.src = None
        x.nkey = (x.result, norm[:FUZZY_KEY_CHARS])
        if len(norm) > FUZZY_KEY_CHARS and x.cut == WHOLE_VALUES:
            x.cut = FUZZY_PREFIX

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
            by_result = self.by_result
            if by_result is not None:
                n = by_result[old.result] - 1
                if n <= 0:
                    del by_result[old.result]
                else:
                    by_result[old.result] = n

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
            if spec.breaks is not None and spec.breaks(e):
                self.brk += 1
            if self.ep is not None:  # a cycle is broken by any other event
                out += self.end(ts)
            if self.eps:
                for k in list(self.eps):
                    if spec.consecutive or self._count(k) < spec.count:
                        out += self._end_plain(k, ts)
            return out
        cache = self.watch.cache
        result = None
        if spec.result_key is not None:
            result = cache.get(self.result_cache_key)
            if result is None:
                result = cache[self.result_cache_key] = result_hash(
                    spec.result_key.get(whole_view(e, cache)))
        nkey: Any
        cut = PREFIX_256 if prefix_only(e, spec.id_fields) else WHOLE_VALUES
        lazy = False
        if self.lazy and self.ep is None and not self.eps:
            assert self.by_result is not None
            # no other call kept returned this result: nothing compares this key yet
            lazy = result not in self.by_result and not self._recent_result(result)
        if lazy:
            raw = self._raw_parts(e, cache)
            self.raw_now = raw
            rawh = hash(raw)
            nkey = (result, _Pending())  # equal to no other key until normalised
        else:
            hit = cache.get(self.cache_key)
            if hit is None:
                hit = self._read_key(e, cache)
            self.raw_now, rawh, norm = hit
            if spec.similarity is None:
                nkey = hash(norm) if not spec.same_result else hash((hash(norm), result))
            else:  # fuzzy: the text itself, tagged with its result's hash under same_result
                nkey = norm[:FUZZY_KEY_CHARS] if not spec.same_result else (
                    result, norm[:FUZZY_KEY_CHARS])
                if len(norm) > FUZZY_KEY_CHARS and cut == WHOLE_VALUES:
                    cut = FUZZY_PREFIX
        mark = event_mark(e, cache)
        watch = self.watch
        if "effect" in e:
            # watch.changes already counts this call if it changed something
            seq, upto = watch.call_seq, watch.changes
            chg = upto - 1 if watch.changed else upto
        else:
            seq, chg, upto = -1, 0, 0
        entry = _Entry(self.idx, ts, nkey, rawh, result, mark, cut, seq, chg, upto, self.brk)
        if lazy:
            entry.src = self.raw_now
        elif self.lazy:
            self._normalise_pending(result)  # earlier calls that returned this result
        win.append(entry)
        self.counts[nkey] = self.counts.get(nkey, 0) + 1
        by_result = self.by_result
        same_results = 0
        if by_result is not None:
            same_results = by_result[result] = by_result.get(result, 0) + 1
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
            elif by_result is not None and same_results < spec.count and spec.cycles is None:
                # fuzzy keys under one result: too few calls in the window returned this
                # one (what _count would find going through the window)
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
        # with ``breaks``, an event between two repeats matters while any is in the window
        return self.ep is not None or bool(self.eps) or (
            self.spec.breaks is not None and bool(self.win))

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
        ep.facts["changes_between"] = 0
        ep.facts["breaks_between"] = 0
        ep.facts["between_calls"] = ""
        ep.data["between"] = {}  # (name, effect) -> calls between the repeats
        ep.facts["compared_on"] = WHOLE_VALUES
        for m in members:
            self._grow(ep, m)
        if period > 1:
            ep.facts["cycle"] = True
        return self.start(ep)

    def _grow(self, ep: Episode, m: _Entry) -> None:
        ep.add_mark(m.mark, m.ts)
        note_kind(ep, m.mark[2], m.mark[3])
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
        f["key"] = short_key(raw_key_text(self.raw_now))
        if self.spec.result_key is not None:
            f["distinct_results"] = len(results)
            identical = len(results) <= (period if period > 1 else 1)
            f["results_identical"] = identical
            f["results_changed"] = not identical

    def _streak(self, ep: Episode, m: _Entry) -> None:
        """The facts on what happened between the repeats.

        ``between`` counts the other calls (events of the rule's types that are not
        repeats) made between the first repeat and this one; ``changes_between`` those of
        them that may change what the repeated call sees (effect ``write`` or
        ``unknown``, engine.calls), and ``between_calls`` names them with their effects:
        an edit between two runs of the same test makes them iteration, a ``think()`` or a
        ``cat`` does not. Where effects are not known (no ``effects:`` loaded) every call
        between counts as a change. ``streak`` is the longest run of repeats with no
        change between them and the same result, and never shrinks: three identical calls
        in a row stay a fact whatever follows. A cycle's rounds are back to back by
        construction, so there it counts the repetitions. ``compared_on`` says what
        identity was judged on (whole values, or a prefix when the source served no more:
        the finding is then capped at ``low``).
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
            breaks = m.brk - last.brk
            gap = m.idx - last.idx - 1 - breaks
            changes = gap
            if gap > 0:
                f["between"] = f["between"] + gap
                if m.seq >= 0 and last.seq >= 0:
                    changes = m.chg - last.upto
                    self._name_between(ep, last.seq, m.seq)
                f["changes_between"] = f["changes_between"] + max(changes, 0)
            if breaks > 0:
                f["breaks_between"] = f["breaks_between"] + breaks
            run = run + 1 if changes <= 0 and breaks == 0 and m.result == last.result else 1
        ep.data["run"] = run
        ep.data["last"] = m
        if run > f["streak"]:
            f["streak"] = run

    def _name_between(self, ep: Episode, after: int, before: int) -> None:
        """Add the calls between two repeats to the episode's ``between_calls``."""
        seen: dict[tuple[str, str], int] = ep.data["between"]
        for k, n in self.watch.calls_between(after, before).items():
            if k in seen or len(seen) < BETWEEN_NAMES:
                seen[k] = seen.get(k, 0) + n
        parts = [(f"{label(name)} x{n}" if n > 1 else label(name)) + f" ({EFFECT_WORDS[eff]})"
                 for (name, eff), n in seen.items()]
        ep.facts["between_calls"] = "; ".join(parts)


def result_hash(value: Any) -> int:
    """A hash of a result key's value, to compare results by. A list of texts (the
    usual ``[result, error]``) is hashed as a tuple: each text's hash is kept by the
    text (the key's raw parts hashed it already), where joining them first copied and
    hashed whole outputs again on every call."""
    if type(value) is list:
        for x in value:
            if x is not None and type(x) is not str:
                break
        else:
            return hash(tuple(value))
    return hash(key_text(value))


def raw_key_text(raw: Any) -> str:
    """A raw key as text: a field-by-field key's raw key is the tuple of its fields'
    texts (see ``RepeatState._read_key``), joined here only when a finding shows it."""
    return raw if type(raw) is str else "\x1f".join(raw)


def build(v: dict[str, Any]) -> RepeatSpec | Problem:
    key: CompiledPath = v["key"]
    rkey: CompiledPath | None = v["result_key"]
    count: int = v["count"]
    window: Window = v["window"]
    if window.events is not None and window.events < count:
        return Problem(("window",),
                       f"window of {window.events} events can never hold {count} repeats",
                       "make window.events >= count")
    sim = v["similarity"]
    cycles = v["cycles"]
    spec = RepeatSpec(
        key, count, window, rkey, float(sim) if sim is not None else None,
        tuple(v["normalise"]),
        (cycles["max_period"], cycles["min_repeats"]) if cycles is not None else None,
        v["consecutive"], v["same_result"],
        id_fields=tuple(sorted(key.fields | (rkey.fields if rkey else set()))),
        breaks=v["breaks"])
    spec.state_keys()  # made now, shared by every sample's state
    return spec


KIND = Kind(
    name="repeat", drive=EVENT, facts=REPEAT_FACTS, build=build,
    doc="`count` matching events with the same (or a similar) key within `window`; also "
        "cycles of 2-4 calls.",
    params=Table("detect.repeat", "repeat", params=(
        Param("key", PATH, "JMESPath of what must repeat, e.g. \"[function, arguments]\".",
              required=True),
        Param("result_key", PATH, "JMESPath of the result: facts on whether results changed."),
        Param("count", INT, "Repeats that make a finding.", required=True, lo=2, hi=10_000),
        Param("window", WINDOW, "How far back repeats count.", required=True),
        Param("similarity", NUMBER, "Fuzzy keys: the least rapidfuzz ratio (50-100).",
              lo=50, hi=100, stop=True,
              message="similarity is a rapidfuzz ratio between 50 and 100",
              hint="100 means identical after normalisation; 90 is a good start"),
        Param("normalise", NAMES, "Normalisers applied to the key, in order.", default=(),
              choices=NORMALISERS, stop=True, message="unknown normaliser {value!r}",
              hint="one of: " + ", ".join(NORMALISERS)),
        Param("cycles", TABLE, "Also find cycles (true, or max_period and min_repeats).",
              stop=True, true_is_empty=True, table=Table("cycles", "cycles", params=(
                  Param("max_period", INT, "Longest cycle, in calls.", default=4, lo=2, hi=4),
                  Param("min_repeats", INT, "Rounds a cycle needs.", default=3, lo=2,
                        hi=100),
              ))),
        Param("consecutive", BOOL, "Only back-to-back repeats count.", default=False,
              stop=True),
        Param("breaks", PRED, "Events between two repeats that end a streak (e.g. a user's "
              "reply with new content: the next variant may be what they asked for)."),
        Param("same_result", BOOL, "Calls count toward one another only with equal results.",
              default=False, stop=True, requires=(
                  "result_key", "same_result compares result keys, and this repeat has none",
                  "add a result_key (e.g. \"[result, error]\") or drop same_result")),
    )),
)
