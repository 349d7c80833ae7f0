"""Property tests: invariants of repeat and threshold over generated event streams."""

from __future__ import annotations

import functools
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.engine.util import REF, load_text
from watcher.engine import Engine, Rule, load_rules, materialise
from watcher.findings import Finding

_DIR = Path(tempfile.mkdtemp(prefix="engine-props-"))

REPEAT = load_text(_DIR, """
id: rep
title: repeat
category: repeated_tool_call
severity: warning
events: [tool]
needs: content
detect:
  repeat: {key: "[function, arguments]", count: 3, window: {events: 5}}
""", name="rep.yaml", library=False)

THRESHOLD = load_text(_DIR, """
id: thr
title: threshold
category: error_storm
severity: warning
events: [tool]
needs: metadata
where: has_error
detect:
  threshold: {count: 3, window: {seconds: 1000}}
""", name="thr.yaml", library=False)

calls = st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=60)


def feed_all(rules: object, items: list[dict]) -> list[Finding]:
    watch = Engine(rules).open_sample(REF)  # type: ignore[arg-type]
    out: list[Finding] = []
    for i, it in enumerate(items):
        out += watch.feed(materialise(i, it))
    return out + watch.finalize(10_000.0)


def max_in_window(seq: list[str], size: int) -> int:
    best = 0
    for end in range(1, len(seq) + 1):
        best = max(best, max(Counter(seq[max(0, end - size):end]).values()))
    return best


@settings(max_examples=150, deadline=None)
@given(calls)
def test_repeat_never_fires_below_count(seq: list[str]) -> None:
    found = feed_all(REPEAT, [{"function": "bash", "arguments": a} for a in seq])
    if max_in_window(seq, 5) < 3:
        assert found == []
    else:
        assert found  # and it does fire when some window holds 3 equal calls


@settings(max_examples=150, deadline=None)
@given(calls)
def test_repeat_each_episode_opens_once_and_ends_once(seq: list[str]) -> None:
    found = feed_all(REPEAT, [{"function": "bash", "arguments": a} for a in seq])
    by_id: dict[str, list[str]] = {}
    for f in found:
        by_id.setdefault(f.id, []).append(f.status)
    for statuses in by_id.values():
        assert statuses[0] == "open" and statuses.count("open") == 1
        assert statuses[-1] == "ended" and statuses.count("ended") == 1
    counts = [f.count for f in found if f.status == "ended"]
    assert all(c >= 3 for c in counts)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.booleans(), max_size=30), st.randoms(use_true_random=False))
def test_threshold_in_one_time_window_is_order_independent(flags: list[bool], rnd: object) -> None:
    """All events inside one time window: firing depends on how many, not on order."""
    items = [{"function": "bash", "error": "x" if f else None} for f in flags]
    shuffled = list(items)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    a = feed_all(THRESHOLD, items)
    b = feed_all(THRESHOLD, shuffled)
    assert bool(a) == bool(b) == (sum(flags) >= 3)
    if a:
        assert a[-1].count == b[-1].count == sum(flags)


# --- generated `where` predicates agree with JMESPath itself

_WHERE_EXPRS = [
    "function == 'submit'", "function != 'submit'", "stop_reason != 'tool_calls' && !has_error",
    "has_error", "!has_error", "a.b == `1`", "a.b != `true`", "n == `0`", "n == `false`",
    "x || y", "x && y", "!(x || y)", "a.b", "a.b.c == 'v'", "tokens > `100`",
    "[x, y]", "x == y", "a == `{\"k\": 1}`", "@.x", "a.b || !x",
    # the shapes FieldTests runs natively: &&-joined field tests
    "tokens >= `1`", "tokens < `0`", "n <= `1.5`", "`0` < n", "'submit' == function",
    "function == 'submit' && !has_error && tokens > `-1`", "x && !y && n != 'v'",
    "n >= `true`", "function == `1`", "!(function == 'submit')",
    # ||-joined alternatives (the generated expression; not FieldTests)
    "function != '' || has_error", "function == 'submit' || function == 'v'",
    "x || y && !n", "n == 'v' || x && y || !tokens", "(x || y) && n",
]
_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.sampled_from(
    ["", "submit", "tool_calls", "v", "0"]), st.just([]), st.just({}), st.just({"k": 1}))
_DOCS = st.fixed_dictionaries({}, optional={
    k: _VALUES for k in ("function", "stop_reason", "has_error", "n", "x", "y", "tokens")
} | {"a": st.one_of(_VALUES, st.fixed_dictionaries({}, optional={
    "b": st.one_of(_VALUES, st.fixed_dictionaries({}, optional={"c": _VALUES}))}))})


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_WHERE_EXPRS), _DOCS)
def test_generated_where_matches_jmespath_truthiness(expr: str, doc: dict) -> None:
    import jmespath

    from watcher.engine.lang.ctx import Ctx
    from watcher.engine.lang.paths import compile_path, truthy
    from watcher.engine.yamlsrc import Doc

    cp = compile_path(expr, Ctx(Doc.__new__(Doc), []), (), "where")
    assert cp is not None and cp.test is not None
    try:
        want = truthy(jmespath.search(expr, doc))
    except (jmespath.exceptions.JMESPathError, TypeError, ValueError):
        want = False
    assert cp.test(doc) is want, (expr, doc)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_VALUES, st.floats(), st.integers(), st.text(max_size=3),
                 st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=2),
                                                                      st.integers(), max_size=2)))
def test_truthy_is_jmespath_truthiness(value: Any) -> None:
    import jmespath

    from watcher.engine.lang.paths import truthy

    assert truthy(value) is (not jmespath.search("!x", {"x": value}))


@pytest.mark.parametrize("expr", [
    "has_error", "!has_error", "function == 'submit'", "stop_reason != 'tool_calls' && !has_error",
    "tokens >= `150000`", "`3` > n && x",
])
def test_field_test_wheres_run_as_one_native_call(expr: str) -> None:
    """Compiled, the common ``where`` shapes skip the generated (interpreted) lambda;
    interpreted, the lambda is the cheaper of the two and is kept."""
    import jmespath

    from watcher.engine.lang.ctx import Ctx
    from watcher.engine.lang.paths import COMPILED_HERE, FieldTests, _field_tests, compile_path
    from watcher.engine.yamlsrc import Doc

    cp = compile_path(expr, Ctx(Doc.__new__(Doc), []), (), "where")
    assert cp is not None and isinstance(cp.test, FieldTests) is COMPILED_HERE
    assert isinstance(_field_tests(jmespath.compile(expr).parsed), FieldTests)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_WHERE_EXPRS), _DOCS)
def test_field_tests_match_jmespath_truthiness(expr: str, doc: dict) -> None:
    """FieldTests itself, whichever path compile_path takes in this build."""
    import jmespath

    from watcher.engine.lang.paths import _field_tests, truthy

    tests = _field_tests(jmespath.compile(expr).parsed)
    if tests is None:  # not a conjunction of field tests
        return
    try:
        want = truthy(jmespath.search(expr, doc))
    except (jmespath.exceptions.JMESPathError, TypeError, ValueError):
        want = False
    assert tests(doc) is want, (expr, doc)


def test_generated_where_keeps_jmespath_equality_of_bools_and_numbers() -> None:
    """Python says 0 == False and 1 == True; JMESPath does not."""
    from watcher.engine.lang.ctx import Ctx
    from watcher.engine.lang.paths import compile_path
    from watcher.engine.yamlsrc import Doc

    def test(expr: str, doc: dict) -> bool:
        cp = compile_path(expr, Ctx(Doc.__new__(Doc), []), (), "where")
        assert cp is not None and cp.test is not None
        return cp.test(doc)

    assert test("n == `false`", {"n": 0}) is False
    assert test("n == `1`", {"n": True}) is False
    assert test("n != `0`", {"n": False}) is True
    assert test("n == `1`", {"n": 1.0}) is True
    assert test("function == 'submit'", {"function": "submit"}) is True
    assert test("a.b == 'x'", {"a": "not a dict"}) is False


def test_three_step_paths_follow_every_step() -> None:
    """JMESPath parses a.b.c as one node with three children; the fast getters once
    stopped after the second."""
    from watcher.engine.lang.ctx import Ctx
    from watcher.engine.lang.paths import compile_path
    from watcher.engine.yamlsrc import Doc

    cp = compile_path("a.b.c", Ctx(Doc.__new__(Doc), []), (), "field")
    assert cp is not None
    assert cp.get({"a": {"b": {"c": 7}}}) == 7
    assert cp.get({"a": {"b": "v"}}) is None
    assert cp.test is not None and cp.test({"a": {"b": "v"}}) is False


FUZZY = load_text(_DIR, """
id: fuzzy
title: fuzzy repeat
category: repeated_tool_call
severity: info
events: [tool]
needs: content
detect:
  repeat: {key: "[function, arguments]", count: 3, window: {events: 6}, similarity: 85}
""", name="fuzzy.yaml", library=False)

# commands of close and far lengths: the length bound must only skip impossible pairs
fuzzy_calls = st.lists(st.sampled_from(
    ["ls -la /srv", "ls -la /srv/", "ls  -la /srv", "ls -la /srv/app", "cat /srv/a.txt",
     "ls -la /srv/app/out/x", "LS -la /srv", "ls -l /srv"]), max_size=40)


@settings(max_examples=150, deadline=None)
@given(fuzzy_calls)
def test_fuzzy_length_bound_changes_no_finding(seq: list[str]) -> None:
    """Skipping comparisons (keys equal to the new one, keys whose length rules out the
    similarity, the rest once the count is reached or out of reach) finds what comparing
    every key does."""
    from rapidfuzz import fuzz, process

    from watcher.engine.detectors import repeat as detectors

    def brute(self: detectors.RepeatState, nkey: str) -> int:
        keys = [x.nkey for x in self.win if x.nkey is not None]
        return len(process.extract(nkey, keys, scorer=fuzz.ratio,
                                   score_cutoff=self.spec.similarity, limit=None))

    items = [{"function": "bash", "arguments": a} for a in seq]
    fast, slow = _with_count(FUZZY, items, brute)
    assert fast == slow


def _with_count(rules: object, items: list[dict], count: Any) -> tuple[list, list]:
    """The findings of ``items`` as the engine counts repeats, and with ``count`` in
    place of ``RepeatState._count``: ``(status, count, event uuids)`` of each."""
    from watcher.engine.detectors import repeat as detectors

    def findings() -> list[tuple[Any, ...]]:
        return [(f.status, f.count, f.evidence.event_uuids) for f in feed_all(rules, items)]

    fast = findings()
    original = detectors.RepeatState._count
    detectors.RepeatState._count = count  # type: ignore[method-assign]
    try:
        slow = findings()
    finally:
        detectors.RepeatState._count = original  # type: ignore[method-assign]
    return fast, slow


FUZZY_SR = load_text(_DIR, """
id: fuzzy-sr
title: fuzzy repeat of one result
category: repeated_tool_call
severity: info
events: [tool]
needs: content
detect:
  repeat: {key: "[function, arguments]", result_key: result, count: 3, window: {events: 6},
           similarity: 85, same_result: true}
""", name="fuzzy-sr.yaml", library=False)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(
    ["ls -la /srv", "ls -la /srv/", "ls  -la /srv", "ls -la /srv/app", "cat /srv/a.txt",
     "LS -la /srv"]), st.sampled_from(["a", "b"])), max_size=40))
def test_fuzzy_same_result_skips_change_no_finding(seq: list[tuple[str, str]]) -> None:
    """Under ``same_result`` the fuzzy count skips other results' keys before any length
    test or comparison; it finds what comparing every same-result key does."""
    from rapidfuzz import fuzz

    from watcher.engine.detectors import repeat as detectors

    def brute(self: detectors.RepeatState, nkey: tuple[int, str]) -> int:
        return sum(1 for x in self.win if x.nkey is not None and x.nkey[0] == nkey[0]
                   and fuzz.ratio(nkey[1], x.nkey[1]) >= self.spec.similarity)

    items = [{"function": "bash", "arguments": a, "result": r} for a, r in seq]
    fast, slow = _with_count(FUZZY_SR, items, brute)
    assert fast == slow


FUZZY_NEAR = load_text(_DIR, """
id: fuzzy-near
title: near-identical calls of one result, keys normalised when compared
category: repeated_tool_call
severity: info
events: [tool]
needs: content
detect:
  repeat: {key: "[function, arguments]", result_key: "[result, error]", count: 3,
           window: {events: 5}, similarity: 85, same_result: true,
           normalise: [whitespace, case, cosmetic]}
""", name="fuzzy-near.yaml", library=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(
    ["ls -la /srv", "ls -la '/srv/'", "LS  -la /srv", "ls -la /srv/app", "cat /srv/a.txt",
     "cat  /srv/a.txt;", "x" * 600, "x" * 599 + "y"]), st.sampled_from(["a", "b", "c", ""])),
    max_size=40))
def test_fuzzy_keys_normalised_when_compared_find_what_eager_keys_do(
        seq: list[tuple[str, str]]) -> None:
    """A fuzzy same-result key is normalised only once another kept call returned the
    same result (``RepeatState._normalise_pending``): every finding, fact and message is
    what normalising every key at once gives."""
    from watcher.engine.detectors import repeat as detectors

    items = [{"function": "bash", "arguments": a, "result": r} for a, r in seq]

    def findings() -> list[dict[str, Any]]:
        return [f.to_dict() for f in feed_all(FUZZY_NEAR, items)]

    lazy = findings()
    original = detectors.RepeatState._recent_result
    detectors.RepeatState._recent_result = (  # type: ignore[method-assign]
        lambda self, result: True)  # every key normalised as it comes
    try:
        eager = findings()
    finally:
        detectors.RepeatState._recent_result = original  # type: ignore[method-assign]
    assert lazy == eager


BOUNDARY = load_text(_DIR, """
id: boundary
title: fuzzy repeat on the threshold
category: repeated_tool_call
severity: info
events: [tool]
needs: content
detect:
  repeat: {key: arguments, count: 2, window: {events: 4}, similarity: 92}
""", name="boundary.yaml", library=False)


def test_a_pair_exactly_on_the_similarity_is_compared() -> None:
    """135 and 115 characters: rapidfuzz rates them 92.0, exactly the threshold, and the
    length bound must not skip them (in floats, (1 - 92/100) * 250 is below 20)."""
    from rapidfuzz import fuzz

    a, b = "x" * 135, "x" * 115
    assert fuzz.ratio(a, b, score_cutoff=92) == 92.0
    found = feed_all(BOUNDARY, [{"function": "bash", "arguments": a},
                                {"function": "bash", "arguments": b}])
    assert [(f.status, f.count) for f in found] == [("open", 2), ("ended", 2)]


def _excerpt_reference(e: dict) -> tuple[str, bool]:
    """The excerpt of a tool call formatted in full (what the shortcut must equal)."""
    from watcher.engine.detectors.base import EXCERPT_WIDTH as W

    args = e.get("arguments")
    text = f"{e.get('function')}({args if isinstance(args, str) else ''})"
    if len(text) > 4 * W:
        head = " ".join(text[: 4 * W].split())
        if len(head) > W:
            return head[: W - 1], True
    text = " ".join(text.split())
    return (text, False) if len(text) <= W else (text[: W - 1], True)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab \n\t", max_size=900), st.text(alphabet="fx ", max_size=60))
def test_long_tool_excerpt_formats_only_its_head(args: str, function: str) -> None:
    from watcher.engine.detectors.base import _excerpt_parts

    e = {"type": "tool", "function": function, "arguments": args}
    assert _excerpt_parts(e) == _excerpt_reference(e)


# texts around the prefix cut: runs of spaces and digits (which normalising shortens),
# decimals, a final sigma (lower-cased by what follows it) and dotted capitals
_NEAR_ALPHABET = st.sampled_from(["a", "B", " ", "  \t", "\n", "7", "12", ".", "3.5", "Σ",
                                  "İ", "x" * 40, " " * 300, "9" * 120])


@settings(max_examples=400, deadline=None)
@given(st.lists(_NEAR_ALPHABET, max_size=400).map("".join))
def test_near_text_from_a_prefix_equals_the_whole_text(text: str) -> None:
    from watcher.engine.detectors.threshold import NEAR_CHARS, _near_norm, _near_text

    assert _near_text(text) == _near_norm(text)[:NEAR_CHARS]


@functools.cache
def _unseen_rule() -> Rule:
    return next(r for r in load_rules() if r.detect_kind == "unseen")


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40), st.lists(st.text(alphabet="ab\x00", max_size=6), max_size=120))
def test_unseen_keeps_exactly_the_last_texts(keep: int, texts: list[str]) -> None:
    """Texts joined in batches search the same string as joining each one as it comes."""
    from dataclasses import replace

    from watcher.engine.detectors.unseen import UnseenState

    rule = _unseen_rule()
    state = UnseenState(rule, Engine([rule]).open_sample(REF),
                        replace(rule.detector, keep=keep))
    for i, text in enumerate(texts):
        state.remember(text)
        assert len(state.fresh) < max(keep, 1) + 1  # waiting texts stay bounded by keep
        if i % 7 == 0:  # a check (a submission) joins what is waiting
            state._merge()
            kept = [t.replace("\x00", "") for t in texts[: i + 1]][-keep:]
            assert state.blob == "\x00".join(kept)
            assert state.lens == [len(t) for t in kept]


_key_part = st.one_of(st.none(), st.text(alphabet="aB \t\n\x1f…Σς/7", max_size=12))


@settings(max_examples=400, deadline=None)
@given(st.lists(_key_part, min_size=1, max_size=4),
       st.lists(st.sampled_from(["case", "paths", "numbers"]), max_size=3, unique=True))
def test_key_normalised_field_by_field_equals_the_joined_key(
        values: list[str | None], rest: list[str]) -> None:
    """A key of plain fields is normalised field by field (shared between rules); the
    text must be what normalising the joined key gives."""
    from watcher.engine.detectors.base import key_text
    from watcher.engine.detectors.keys import normalise_text, part_text

    steps = ("whitespace", *rest)
    names = [f"f{i}" for i in range(len(values))]
    event = dict(zip(names, values, strict=True))
    cache: dict = {}
    parts = [part_text(event, cache, n, steps) for n in names]
    assert " ".join(t for t in parts if t) == normalise_text(key_text(values), steps)


@settings(max_examples=600, deadline=None)
@given(st.text(alphabet=" a.\t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\u00a0\u2028\u3000é", max_size=30))
def test_collapse_ws_is_split_and_join(text: str) -> None:
    """The shortcut for already-collapsed text must never keep whitespace that
    ``str.split()`` would have removed (every ASCII and Unicode kind of it); text
    tests with ``normalize_whitespace`` read it as the regex ``\\s+`` folded and
    stripped."""
    import re

    from watcher.engine.text import collapse_ws

    assert collapse_ws(text) == " ".join(text.split())
    assert collapse_ws(text) == re.sub(r"\s+", " ", text).strip()


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="aZ 7\t\n\u0663\u00a0.Σ", max_size=40))
def test_near_norm_matches_its_regex_definition(text: str) -> None:
    """Near-identity texts: whitespace collapsed, lower-cased, numbers (any digits) as
    ``#``; the split()/join() form and its digit shortcut must mean exactly that."""
    import re

    from watcher.engine.detectors.keys import NUM as _NUM
    from watcher.engine.detectors.threshold import _near_norm

    assert _near_norm(text) == _NUM.sub("#", re.sub(r"\s+", " ", text).strip().lower())


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="aZΣσς \u0130İ\u1e9eß.", max_size=20))
def test_engine_lower_cases_as_cpython_does(text: str) -> None:
    """The compiled engine's lower-casing must be CPython's (mypyc's own ``str.lower``
    turns a final Σ into σ, not ς): repeat keys, near-identity texts and the text of
    case-insensitive tests all go through it."""
    from watcher.engine.detectors.keys import normalise_text
    from watcher.engine.text import lower

    assert lower(text) == text.lower()
    assert normalise_text(text, ("case",)) == text.lower().replace("…", "...")
    assert lower("ΟΔΟΣ Σ") == "οδος σ"
