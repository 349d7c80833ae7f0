"""A logged sample's events: parsed, projected and with attachments resolved.

:func:`parse_sample_json` (a stored sample document) and :func:`parse_sample` (a
sample from Inspect's reader, pooled inputs expanded) give a :class:`ParsedSample`:
the raw event dumps, the attachments and the message pool. The log source pages
them, and per event either resolves every attachment reference (:func:`resolved`,
the ``full`` tier) or builds the light projection (:func:`light`: what the content
tier reads, resolved, without the whole conversation a model event carries), each
event's expansion bounded by :data:`~watcher.limits.EXPANSION_SIZE`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orjson import dumps

from watcher.attachments import Expansion, resolve_attachments, resolve_text
from watcher.events import PROMPT_KEY
from watcher.sources.logfiles.messages import last_input, may_refer, message_content


def attempt_nonce(uuid: str | None, sample_id: Any, epoch: int, attempts: int) -> str:
    """The server's nonce for one attempt of a sample (see ``_attempt_nonce`` in inspect)."""
    return f"{uuid or f'{sample_id}:{epoch}'}:{attempts}"


@dataclass


class ParsedSample:
    """A sample's unresolved event dumps plus what resolving and paging them needs."""

    nonce: str
    events: list[dict[str, Any]]
    attachments: dict[str, str]
    # the sample's message pool (``events_data.messages``): model events of current logs
    # name their input by ranges into it (``input_refs``) and hold no input themselves
    pool: list[Any] = field(default_factory=list)
    # what attachment references may still add to this sample's events (one budget for
    # the whole sample, over every page read of it: watcher.limits.EXPANSION_SIZE)
    budget: Expansion | None = None


def parse_sample_json(data: dict[str, Any], epoch: int) -> ParsedSample:
    """:func:`parse_sample` for a sample's stored JSON (pooled inputs stay refs)."""
    nonce = attempt_nonce(data.get("uuid"), data.get("id"), epoch,
                          len(data.get("error_retries") or []))
    events = [e for e in data["events"] if isinstance(e, dict)]
    pools = data.get("events_data")
    pool = pools.get("messages") if isinstance(pools, dict) else None
    return ParsedSample(nonce=nonce, events=events,
                         attachments=dict(data.get("attachments") or {}),
                         pool=pool if isinstance(pool, list) else [])


def parse_sample(sample: Any, epoch: int) -> ParsedSample:
    """Dump a sample's events (pooled inputs expanded), keeping attachments for paging."""
    events = list(sample.events)
    pools = sample.events_data or {}
    if pools:
        try:
            from inspect_ai.event._pool import (
                resolve_model_event_calls,
                resolve_model_event_inputs,
            )

            events = resolve_model_event_inputs(events, pools.get("messages") or [])
            events = resolve_model_event_calls(events, pools.get("calls") or [])
        except ImportError:  # pooled refs stay refs; the raw event still names them
            pass
    nonce = attempt_nonce(sample.uuid, sample.id, epoch, len(sample.error_retries or []))
    return ParsedSample(nonce=nonce, events=[e.model_dump(mode="json") for e in events],
                         attachments=dict(sample.attachments or {}))

# what only the ``full`` tier shows (the whole conversation, tool definitions, the raw
# API call, a tool's sub-events and view): neither resolved nor projected below it
HEAVY_KEYS = {"model": frozenset({"input", "input_refs", "call", "config", "tools"}),
               "tool": frozenset({"events", "view"})}


def resolved(e: dict[str, Any], attachments: dict[str, str],
              unknown: set[str], budget: Expansion | None = None) -> dict[str, Any]:
    """``resolve_attachments(e)``, skipped for an event that holds no reference.

    Walking an event in Python costs far more than serialising it in C and looking
    for the prefix, and most events hold none. Events are read-only downstream
    (``normalise`` builds new dicts), so one without references is passed as is.
    """
    try:
        blob = dumps(e)
    except TypeError:  # not plain JSON data: walk it
        blob = b"attachment://"
    if b"attachment://" not in blob and b"tc://" not in blob:
        return e
    return resolve_attachments(e, attachments, unknown, budget)  # type: ignore[no-any-return]


def light(e: dict[str, Any], pool: list[Any] | None = None,
           attachments: dict[str, str] | None = None,
           unknown: set[str] | None = None, budget: Expansion | None = None) -> dict[str, Any]:
    """An event without what only the ``full`` tier shows, attachments resolved; a model
    event keeps the last message of its input (``events.PROMPT_KEY``: what the model was
    answering).

    Only what the content tier reads is resolved, each value looked at once: a string is
    a substring test, a tool's arguments one level of values. Walking every event's
    structure for references (or serialising it to look) cost half as much again as
    decoding the log.
    """
    event = e.get("event")
    heavy = HEAVY_KEYS.get(event)  # type: ignore[arg-type]
    found = unknown if unknown is not None else set()
    att = attachments or {}
    if heavy is None:
        return resolved(e, att, found, budget)
    out: dict[str, Any] = {}
    for k, v in e.items():
        if k in heavy:
            continue
        if type(v) is str:
            out[k] = resolve_text(v, att, found, budget) if may_refer(v) else v
        elif type(v) is dict:
            if k == "output":
                out[k] = _slim_output(v, att, found, budget)
            elif k == "arguments":
                out[k] = _values(v, att, found, budget)
            else:
                out[k] = resolve_attachments(v, att, found, budget) if v else v
        elif type(v) is list:
            out[k] = resolve_attachments(v, att, found, budget) if v else v
        else:
            out[k] = v
    if event == "model":
        prompt = last_input(e, pool or [])
        if prompt is not None:
            out[PROMPT_KEY] = light_prompt(prompt, att, found, budget)
    return out


def light_prompt(message: dict[str, Any], attachments: dict[str, str], unknown: set[str],
                 budget: Expansion | None = None) -> dict[str, Any]:
    """What a model event keeps of the message that prompted it (``events.PROMPT_KEY``):
    its role and its content, resolved."""
    return {"role": message.get("role"),
            "content": message_content(message.get("content"), attachments, unknown, budget)}


def _values(d: dict[str, Any], att: dict[str, str], found: set[str],
            budget: Expansion | None) -> dict[str, Any]:
    """A flat mapping (tool arguments), its string values resolved; deeper values walked."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if type(v) is str:
            out[k] = resolve_text(v, att, found, budget) if may_refer(v) else v
        elif type(v) is dict or type(v) is list:
            out[k] = resolve_attachments(v, att, found, budget)
        else:
            out[k] = v
    return out


def _slim_output(output: dict[str, Any], att: dict[str, str], found: set[str],
                 budget: Expansion | None) -> dict[str, Any]:
    """A model output with what the content tier reads of it, resolved: the first
    choice's message (its text and tool calls), the stop reason, the completion and the
    token usage. The rest (other choices, logprobs, provider metadata, a call's view) is
    not read below the ``full`` tier."""
    out: dict[str, Any] = {k: output[k] for k in ("model", "stop_reason", "usage")
                           if k in output}
    completion = output.get("completion")
    if type(completion) is str:
        out["completion"] = resolve_text(completion, att, found, budget) \
            if may_refer(completion) else completion
    choices = output.get("choices")
    if type(choices) is list and choices and type(choices[0]) is dict:
        first = choices[0]
        message = first.get("message")
        slim: dict[str, Any] = {"stop_reason": first.get("stop_reason")}
        if type(message) is dict:
            msg: dict[str, Any] = {"role": message.get("role"),
                                   "content": message_content(message.get("content"), att, found,
                                                       budget)}
            calls = message.get("tool_calls")
            if type(calls) is list:
                msg["tool_calls"] = [
                    {"function": c.get("function"),
                     "arguments": _values(c["arguments"], att, found, budget)
                     if type(c.get("arguments")) is dict else c.get("arguments")}
                    for c in calls if type(c) is dict]
            slim["message"] = msg
        out["choices"] = [slim]
    return out
