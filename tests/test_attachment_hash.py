"""A reference is resolved by the string that hashes to its key, as Inspect keys it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from inspect_ai._util.hash import mm3_hash

from watcher.attachments import attachment_hash, resolve_attachments, texts_by_hash

LONG = "x = 1\n" * 40  # over 100 characters: Inspect condenses it


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_the_key_is_inspects_own(text: str) -> None:
    # (lone surrogates too: Inspect hashes their backslash escapes)
    assert attachment_hash(text) == mm3_hash(text)


def test_messages_resolve_the_references_of_condensed_events() -> None:
    code, output = LONG, "PASSED " * 30
    messages = [
        {"role": "assistant", "content": "short",
         "tool_calls": [{"id": "c1", "function": "python", "arguments": {"code": code}}]},
        {"role": "tool", "tool_call_id": "c1", "content": output},
        {"role": "user", "content": "y" * 101},
    ]
    wanted = {mm3_hash(code), mm3_hash(output), "0" * 32}
    known = texts_by_hash(messages, wanted)
    assert known == {mm3_hash(code): code, mm3_hash(output): output}
    event = {"event": "tool", "arguments": {"code": f"attachment://{mm3_hash(code)}"},
             "result": f"attachment://{mm3_hash(output)}",
             "error": f"attachment://{'0' * 32}"}
    unknown: set[str] = set()
    got = resolve_attachments(event, known, unknown)
    assert got["arguments"] == {"code": code} and got["result"] == output
    # a reference no message holds stays as it is, and is named
    assert got["error"] == f"attachment://{'0' * 32}" and unknown == {"0" * 32}


def test_a_string_that_only_looks_like_a_key_is_not_taken() -> None:
    # 100 characters or fewer are never condensed, and a string holding a reference is
    # not an attachment's text
    short, ref = "z" * 100, "attachment://" + "a" * 120
    assert texts_by_hash([short, ref], {mm3_hash(short), mm3_hash(ref)}) == {}
