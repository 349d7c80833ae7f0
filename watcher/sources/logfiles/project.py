"""A raw model or tool event (a log's, the sample buffer's) made the normalised event
of the content tier in one pass, resolving only the attachments that tier reads.

The same event as ``normalise(light(e), "content")`` (``logfiles.samples.light``, then
``events.normalise``, which passes an event made here as it is), key for key and in the
same key order (tests/test_project.py, over every model and tool event of the shared
corpus). Only the fields that event is made of are resolved: a model output's tool
calls and an event's other fields, which the two steps resolved and dropped, are not
read. The two steps built the light copy of each event only for ``normalise`` to read
a dozen fields of it: 0.24 s against 0.16 s here, compiled, for the 27,154 model and
tool events of the shared corpus's 375 SWE-bench runs. This module is compiled
(setup.py).

Anything this pass does not know how to make exactly (another event type, another
tier, an event whose shape ``normalise`` would read as compact) takes the two steps.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Any

from watcher.attachments import Expansion, resolve_attachments, resolve_text
from watcher.events import (
    PROMPT_KEY,
    WHOLE,
    Event,
    Tier,
    _display,
    _message_text,
    _timestamp,
    parse_args,
    to_text,
)
from watcher.sources.logfiles.messages import last_input, may_refer, message_content
from watcher.sources.logfiles.samples import light, light_prompt, resolved


def project(e: dict[str, Any], tier: Tier, pool: list[Any] | None,
            attachments: dict[str, str] | None, unknown: set[str] | None,
            budget: Expansion | None = None,
            prompt: dict[str, Any] | None = None) -> Event:
    """What a source hands the stream for raw event ``e``: ``light(e, pool, ...)``, or
    where this pass makes it, the event ``normalise`` makes of that (which ``normalise``
    then passes as it is). ``prompt`` (the message that prompted a model event,
    unresolved: the sample buffer's pool row) stands in for the one ``light`` finds in
    the event or ``pool``."""
    found = unknown if unknown is not None else set()
    att = attachments or {}
    etype = e.get("event")
    if tier != "content" or not plain_event(e, etype):
        out = light(e, pool, att, found, budget)
        if prompt is not None:
            out[PROMPT_KEY] = light_prompt(prompt, att, found)
        return out  # for the stream to normalise
    out = {"type": etype, "event": etype,
           "uuid": _value(e.get("uuid"), att, found, budget),
           "span_id": _value(e.get("span_id"), att, found, budget),
           "timestamp": _timestamp(_value(e.get("timestamp"), att, found, budget)),
           "pending": bool(e.get("pending"))}
    completed = _timestamp(_value(e.get("completed"), att, found, budget))
    if completed is not None:
        out["completed"] = completed
    whole: dict[str, str] = {}
    out[WHOLE] = whole
    if etype == "model":
        _model(out, whole, e, pool, att, found, budget, prompt)
    else:
        _tool(out, whole, e, att, found, budget)
    return out


def project_page(scanned: list[dict[str, Any]], wanted: AbstractSet[str] | None, tier: Tier,
                 pool: list[Any] | None, attachments: dict[str, str] | None,
                 unknown: set[str], budget: Expansion) -> tuple[list[Event], int]:
    """A page of raw events made as :func:`project` makes each (at the ``full`` tier:
    each raw event with its references resolved), those of a type outside ``wanted``
    (``None``: every type) left out; and how many of the events made left references
    unresolved for want of ``budget``. (A log's page loop, compiled: a scan passes every
    event of every sample through it.)"""
    out: list[Event] = []
    cut = 0
    full = tier == "full"
    for e in scanned:
        if wanted is None or e.get("event") in wanted:
            before = budget.exceeded
            out.append(resolved(e, attachments or {}, unknown, budget) if full else
                       project(e, tier, pool, attachments, unknown, budget))
            if budget.exceeded > before:
                cut += 1
    return out, cut


def plain_event(e: dict[str, Any], etype: Any) -> bool:
    """Whether ``normalise`` would read ``light(e)`` as a raw model or tool event, and
    nothing in ``e`` stands where ``light`` would put its own keys."""
    if "has_error" in e or PROMPT_KEY in e:
        return False
    if etype == "model":
        output = e.get("output", 0)
        return output is None or type(output) is dict
    if etype == "tool":
        return type(e.get("arguments")) is dict or ("result" in e and "function" in e)
    return False


def _value(v: Any, att: dict[str, str], found: set[str], budget: Expansion | None) -> Any:
    """One top-level value as ``light`` resolves it."""
    if type(v) is str:
        return resolve_text(v, att, found, budget) if may_refer(v) else v
    if type(v) is dict or type(v) is list:
        return resolve_attachments(v, att, found, budget) if v else v
    return v


def _text_of(content: Any, att: dict[str, str], found: set[str],
             budget: Expansion | None) -> str:
    """A message content's text, resolved (``_message_text`` of ``light``'s copy)."""
    return _message_text({"content": message_content(content, att, found, budget)})


def _model(out: Event, whole: dict[str, str], e: dict[str, Any], pool: list[Any] | None,
           att: dict[str, str], found: set[str], budget: Expansion | None,
           prompt: dict[str, Any] | None) -> None:
    output = e.get("output") or {}
    usage = output.get("usage") or {}
    out["model"] = _value(e.get("model"), att, found, budget)
    out["tokens"] = usage.get("total_tokens") if usage else None
    cost = usage.get("total_cost") if usage else None
    if isinstance(cost, (int, float)) and not isinstance(cost, bool):  # noqa: UP038
        out["cost"] = cost
    choices = output.get("choices")
    first: dict[str, Any] = {}
    if type(choices) is list and choices and type(choices[0]) is dict:
        first = choices[0]
    out["stop_reason"] = output.get("stop_reason") or first.get("stop_reason")
    error = _value(e.get("error"), att, found, budget)
    out["has_error"] = error is not None
    completion = output.get("completion")
    if type(completion) is str:
        if may_refer(completion):
            completion = resolve_text(completion, att, found, budget)
    else:
        completion = None
    if completion:
        text = completion
    else:
        message = first.get("message")
        text = _text_of(message.get("content"), att, found, budget) \
            if type(message) is dict else ""
    _display(out, whole, "completion", to_text(text), "content")
    out["error"] = error
    asked = prompt if prompt is not None else last_input(e, pool or [])
    if asked is not None:
        out["prompt_role"] = asked.get("role")
        _display(out, whole, "prompt", _text_of(asked.get("content"), att, found, budget),
                 "content")


def _tool(out: Event, whole: dict[str, str], e: dict[str, Any], att: dict[str, str],
          found: set[str], budget: Expansion | None) -> None:
    out["id"] = _value(e.get("id"), att, found, budget)
    out["function"] = _value(e.get("function"), att, found, budget)
    error = _value(e.get("error"), att, found, budget)
    out["has_error"] = error is not None
    value = e.get("arguments")
    if type(value) is dict:
        args: Any = {}
        for k, v in value.items():  # one level, as light resolves a tool's arguments
            if type(v) is str:
                args[k] = resolve_text(v, att, found, budget) if may_refer(v) else v
            elif type(v) is dict or type(v) is list:
                args[k] = resolve_attachments(v, att, found, budget)
            else:
                args[k] = v
    else:
        args = _value(value, att, found, budget)
    _display(out, whole, "arguments", to_text(args), "content")
    out["args"] = args if isinstance(args, dict) else parse_args(
        whole.get("arguments", out["arguments"]))
    _display(out, whole, "result", to_text(_value(e.get("result"), att, found, budget)),
             "content")
    out["error"] = error.get("message") if isinstance(error, dict) else error
