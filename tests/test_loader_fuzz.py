"""Fuzz the rule loader: any input loads or fails with located, coded errors.

``load_rules(paths=[file], builtin=False)`` must either return a rule set or raise
:class:`RuleLoadErrors` whose every error names the file and carries a stable
code. Anything else (a ``KeyError``, ``TypeError``, ``RecursionError``, a hang on a
catastrophic regex) is a loader bug.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from watcher.engine import ERROR_KINDS, RuleLoadErrors, load_rules
from watcher.engine.model import RULE_KEYS

pytestmark = pytest.mark.slow  # hypothesis over the rule loader

CODES = {k.code for k in ERROR_KINDS}
FUZZ = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

VALID: dict[str, Any] = {
    "id": "fuzz-rule",
    "title": "Fuzz rule",
    "category": "repeated_tool_call",
    "severity": "warning",
    "events": ["tool"],
    "needs": "content",
    "field": "arguments",
    "regex": "rm -rf",
    "detect": {"repeat": {"key": "[function, arguments]", "count": 3,
                          "window": {"events": 10}}},
    "confidence": {"base": "medium", "reason": "because"},
    "message": "{count} calls",
}


def _load(text: str) -> None:
    """Load ``text`` as a rule file; fail the test on anything but RuleLoadErrors."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "fuzz.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        try:
            load_rules(paths=[path], builtin=False, user_dir=False)
        except RuleLoadErrors as e:
            assert e.errors, "RuleLoadErrors raised with no errors"
            for err in e.errors:
                assert err.file == str(path), f"error not located in the file: {err.file!r}"
                assert err.code in CODES, f"unknown error code {err.code!r}"
                assert err.render()  # rendering never fails either


# Structured strategies keep to characters YAML accepts so they reach past the reader;
# test_random_text_any_characters and test_control_characters_are_a_located_error
# cover the characters the YAML reader refuses.
PRINTABLE = st.characters(exclude_categories=("Cc", "Cs", "Cn"), include_characters="\t\n\r")
texts = st.text(PRINTABLE, max_size=30)
scalars = (st.none() | st.booleans() | st.integers(-10**6, 10**6)
           | st.floats(allow_nan=False, allow_infinity=False) | texts)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(list(RULE_KEYS)) | st.text(PRINTABLE, max_size=8), inner,
                      max_size=4),
    max_leaves=12,
)
YAML_TOKENS = ["id:", "detect:", "repeat:", "regex:", " ", "\n", "  ", "- ", ": ", "{", "}",
               "[", "]", ",", "'", '"', "&a ", "*a", "!!python/object:os.system ", "---\n",
               "...\n", "#", "|", ">", "%YAML 1.2\n", "? ", "\t", "null", "~", "1e999",
               "<<: *a", "!!binary ", "\\u0000", "((a+)+$)", "{{count}}", "macro:", "lists:"]


@FUZZ
@given(st.text(PRINTABLE, max_size=300))
def test_random_text(text: str) -> None:
    _load(text)


@FUZZ
@given(st.text(max_size=200))
def test_random_text_any_characters(text: str) -> None:
    _load(text)


@FUZZ
@given(st.lists(st.sampled_from(YAML_TOKENS) | st.text(PRINTABLE, max_size=5), max_size=40))
def test_yamlish_token_soup(tokens: list[str]) -> None:
    _load("".join(tokens))


@FUZZ
@given(st.dictionaries(st.sampled_from(list(RULE_KEYS)) | st.text(PRINTABLE, max_size=10), values,
                       max_size=8))
def test_random_rule_dicts(doc: dict[Any, Any]) -> None:
    _load(yaml.safe_dump(doc, allow_unicode=True))


@FUZZ
@given(st.sampled_from(sorted(VALID)), values, st.booleans())
def test_mutated_valid_rule(key: str, value: Any, drop: bool) -> None:
    doc = dict(VALID)
    if drop:
        del doc[key]
    else:
        doc[key] = value
    _load(yaml.safe_dump(doc, allow_unicode=True))


@FUZZ
@given(st.lists(st.dictionaries(st.sampled_from(list(RULE_KEYS)), values, max_size=5),
                min_size=1, max_size=4))
def test_multi_document_files(docs: list[dict[str, Any]]) -> None:
    _load(yaml.safe_dump_all([{**VALID, "id": f"r{i}", **d} for i, d in enumerate(docs)]))


@pytest.mark.parametrize("text", ["\x08", "id: a\x00b\n", "title: \x1b[31m\n", "\ufffe"])
def test_control_characters_are_a_located_error(text: str) -> None:
    _load(text)


def test_the_valid_base_rule_loads(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(yaml.safe_dump(VALID))
    ruleset = load_rules(paths=[path], builtin=False, user_dir=False)
    assert [r.id for r in ruleset.rules] == ["fuzz-rule"]


@pytest.mark.parametrize("pattern", ["(a+)+$", "(.*)*x", "(a*)*b", "(x+x+)+y", "(\\w+\\s?)*$"])
def test_catastrophic_regexes_are_rejected_at_load(tmp_path: Path, pattern: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**VALID, "regex": pattern}))
    with pytest.raises(RuleLoadErrors) as info:
        load_rules(paths=[path], builtin=False, user_dir=False)
    codes = {e.code for e in info.value.errors}
    assert "W107" in codes, info.value.render()
    assert all(e.file == str(path) for e in info.value.errors)


def test_catastrophic_regex_in_an_exception_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    doc = {**VALID, "exceptions": [{"field": "arguments", "op": "regex", "value": "(a+)+$",
                                    "reason": "x"}]}
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(RuleLoadErrors) as info:
        load_rules(paths=[path], builtin=False, user_dir=False)
    assert "W107" in {e.code for e in info.value.errors}, info.value.render()
