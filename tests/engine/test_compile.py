"""Load-time compilation: fast JMESPath getters, regex safety, templates, text tests."""

from __future__ import annotations

from pathlib import Path

import jmespath
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.engine.util import load_text, model, run
from watcher.engine.lang.ctx import Ctx
from watcher.engine.lang.paths import compile_path
from watcher.engine.lang.regex import compile_regex
from watcher.engine.lang.templates import compile_template
from watcher.engine.yamlsrc import Doc

EXPRS = [
    "a", "a.b", "[a, b]", "a == 'x'", "a != `1`", "a && b", "a || b", "!a",
    "a >= `3`", "a < b", "a > 'm'", "a == `true`", "a.b == `null`", "`1`", "@", "a.[b, b]",
]
values = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(-5, 5),
                   st.sampled_from(["", "x", "m", "z"]), st.just([]), st.just({}))
docs = st.fixed_dictionaries({"a": st.one_of(values, st.fixed_dictionaries({"b": values})),
                              "b": values})


def ctx(errors: list) -> Ctx:
    return Ctx(Doc(data={}, file="t.yaml", lines=[""]), errors)


@pytest.mark.parametrize("expr", EXPRS)
def test_expressions_take_the_fast_path(expr: str) -> None:
    cp = compile_path(expr, ctx([]), ())
    assert cp is not None and cp.fast


@settings(max_examples=300, deadline=None)
@given(docs, st.sampled_from(EXPRS))
def test_fast_getter_agrees_with_jmespath(doc: dict, expr: str) -> None:
    cp = compile_path(expr, ctx([]), ())
    assert cp is not None
    try:
        want = jmespath.search(expr, doc)
    except TypeError:  # jmespath raises on e.g. 1 < 'x'; we answer null
        want = None
    assert cp.get(doc) == want


@pytest.mark.parametrize("root", [None, 3, "x", [1], {"a": 1}, {}])
def test_fast_field_list_agrees_with_jmespath_on_any_root(root: object) -> None:
    cp = compile_path("[a, b]", ctx([]), ())
    assert cp is not None and cp.get(root) == jmespath.search("[a, b]", root)


@pytest.mark.parametrize("pattern", [
    r"final answer", r"\bsubmit(?:ting)?\b", r"(ab)+", r"a{2,3}b+", r"[a-z]+\d*",
    r"(?:foo|bar)+", r"^\s*#.*$", r"(\d+\.)?\d+",
])
def test_safe_regexes_are_accepted(pattern: str) -> None:
    errors: list = []
    assert compile_regex(pattern, ctx(errors), ()) is not None and not errors


@pytest.mark.parametrize("pattern", [
    r"(a+)+$", r"(a*)*b", r"(.*)*x", r"(x+x+)+y", r"(a|aa)+$", r"(a|ab)*c", r"(\w+\s?)+$",
])
def test_backtracking_shapes_are_rejected(pattern: str) -> None:
    errors: list = []
    assert compile_regex(pattern, ctx(errors), ()) is None
    assert errors[0].code == "W107"


@pytest.mark.parametrize("pattern", [
    # what Python's parser accepts and only compiling refuses, and what parsing refuses
    r"(?<=a+)b", r"(?<=a|bc)d", r"a{2,1}", r"(?P<x>a)(?P<x>b)", r"\8",
])
def test_what_python_cannot_compile_is_a_bad_regex(pattern: str) -> None:
    errors: list = []
    assert compile_regex(pattern, ctx(errors), ()) is None
    assert errors[0].code == "W106"
    # a regex's parse is remembered for the process: a second load says the same
    again: list = []
    assert compile_regex(pattern, ctx(again), ()) is None and again[0].code == "W106"


def test_template_renders_only_named_facts() -> None:
    errors: list = []
    t = compile_template("{tool} x{count} {{literal}} {excerpt}", ctx(errors), (),
                         {"tool", "count", "excerpt"})
    assert t is not None and not errors
    out = t.render({"tool": "bash", "count": 3, "excerpt": "a\nb " * 100})
    assert out.startswith("bash x3 {literal} a b a b") and len(out) < 260
    for bad in ("{tool.__class__}", "{tool[0]}", "{tool!r}", "{count:>10}", "{nope}"):
        errs: list = []
        assert compile_template(bad, ctx(errs), (), {"tool", "count"}) is None
        assert errs and errs[0].code == "W113"


RULE = """
id: t
title: t
category: shortcut
severity: info
events: [model]
needs: content
field: completion
{test}
detect: match
"""


def test_contains_list_means_all_and_any_of_means_any(tmp_path: Path) -> None:
    all_rule = load_text(tmp_path, RULE.format(test="contains: [a1, b2, c3, d4, e5]"))
    assert run(all_rule, [model("a1 b2 c3 d4")]) == []
    assert run(all_rule, [model("a1 b2 c3 d4 e5")]) != []
    any_rule = load_text(tmp_path, RULE.format(test="any_of: [a1, b2, c3, d4, e5]"), "b.yaml")
    assert run(any_rule, [model("zz e5")]) != []
    assert run(any_rule, [model("zz")]) == []


def test_regex_list_and_ignore_case(tmp_path: Path) -> None:
    rules = load_text(tmp_path, RULE.format(
        test="regex: ['final\\s+answer', '(?P<x>submit)\\(']\nignore_case: true"))
    assert run(rules, [model("FINAL   Answer")]) != []
    assert run(rules, [model("call SUBMIT(42)")]) != []
    assert run(rules, [model("no claim here")]) == []


@pytest.mark.parametrize(("text", "read"), [
    ("abc…", "abc..."), ("…", "..."), ("", ""), ("a…b", "a…b"), ("abc", "abc"), ("x…\n", "x…\n"),
])
def test_unmark_reads_only_a_final_cut_mark(text: str, read: str) -> None:
    from watcher.engine.text import unmark

    assert unmark(text) == read
