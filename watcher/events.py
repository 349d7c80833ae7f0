"""The normalised event: one shape for rules, whatever source the event came from.

The control channel serves three projections of a transcript event (metadata,
truncated content, raw ``full``); ``.eval`` logs hold raw events. Rules must
not care which they got, so every source passes its events through
:func:`normalise`, which produces a plain ``dict`` with:

common
    ``type`` (``model``, ``tool``, ``error`` …), ``uuid``, ``span_id``,
    ``timestamp`` (unix seconds, float), ``pending`` (bool); a model or tool event
    projected from a raw one (a log, the sample buffer, the ``full`` tier) also
    ``completed`` (unix seconds) once it has completed: the control channel's compact
    projection carries no such field.
model
    ``model``, ``tokens``, ``stop_reason``, ``has_error``, ``cost`` (dollars, from a
    raw event whose usage Inspect priced; the control channel serves none), and at the
    content tier ``completion`` and ``error``, and (where the source has the model's
    input) ``prompt_role`` and ``prompt``: the role and text of the input's last
    message, what the model was answering (a tool result, the harness's continue
    message, a user's reply); at the ``full`` tier also ``tool_calls``
    (``[{"function", "arguments"}]``) and ``tools`` (names offered).
tool
    ``id``, ``function``, ``has_error``; at the content tier ``arguments``
    (text), ``args`` (parsed object, or ``None`` when only truncated text was
    served or it is not JSON), ``result`` and ``error`` (message).
error
    at the content tier ``error`` (message).
info
    ``source``; at the content tier ``data``.

Whole values. Content-tier text fields are cut to :data:`CONTENT_WIDTH` characters
(newlines flattened), as the control channel serves them, so that rules read the
same text whatever the source. Whether two calls or results are *the same* is
judged on whole values, never on that prefix: an event normalised from a raw one
(a log, the sample buffer, the ``full`` tier) carries ``whole``, a dict holding the
whole text of each field whose display text differs from it (empty when none
does). An event without ``whole`` came from the control channel's truncated
content tier: there only a text shorter than the width is known whole
(:func:`is_cut`).

Any other field the server sent passes through untouched, and so do event types
we do not know. An event normalised already (it carries ``whole``: a source made it
from a raw event itself, ``sources/logfiles/project.py``) is returned as it is.
Text fields are agent-controlled: treat them as untrusted.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Final, Literal

from orjson import dumps as _dumps

Event = dict[str, Any]
Tier = Literal["metadata", "content", "full"]
TIERS: tuple[Tier, ...] = ("metadata", "content", "full")

# Width the control channel truncates content-tier text to; the log source
# applies the same so a live watch and a post-hoc read see the same text.
CONTENT_WIDTH = 256
WHOLE = "whole"  # the whole texts of a raw event's truncated fields (see the docstring)
# the last message of a model event's input, attached by a source that keeps inputs in a
# pool (a log's ``events_data``, the sample buffer's ``message_pool``): the event's own
# ``input`` is then empty
PROMPT_KEY = "_watch_prompt"


def tier_rank(tier: Tier) -> int:
    """Order of tiers: a rule needing ``content`` is satisfied by ``full``."""
    return TIERS.index(tier)


_fromiso: Final = datetime.fromisoformat
# ``json.dumps(value, default=str)`` without building an encoder per call (a tool's
# arguments are serialised for every call read: 3.5 us each, 2.0 with one encoder)
_encode: Final = json.JSONEncoder(default=str).encode
# the encoder's own quoting of a string (C), for the mappings _flat_json writes itself
_quote_json: Final = json.encoder.encode_basestring_ascii


def _quote(s: str) -> str:
    """``json.dumps(s)``: orjson's text for ASCII without DEL (the same text: tests keep
    it so; about four times as fast on a call's arguments, which cost the 375-run scan
    1.2 % of its instructions), the encoder's own quoting for any other string (orjson
    leaves DEL and what is not ASCII unescaped)."""
    if s.isascii() and "\x7f" not in s:
        return _dumps(s).decode()
    return _quote_json(s)


def truncate(text: str, width: int = CONTENT_WIDTH) -> str:
    """The control channel's content-tier truncation (newlines flattened); a long text is
    cut before it is flattened (the same text: flattening keeps the length)."""
    if len(text) <= width:
        return text.replace("\n", " ")
    return text[: width - 1].replace("\n", " ") + "…"


def is_cut(text: object) -> bool:
    """Whether a content-tier text from the control channel was truncated: cut texts
    are exactly :data:`CONTENT_WIDTH` long and end in "…" (an uncut text of that length
    ending in "…" reads as cut: identity is then not claimed, which is the safe side)."""
    return type(text) is str and len(text) == CONTENT_WIDTH and text[-1] == "…"


def _display(out: Event, whole: dict[str, str], name: str, full: str, tier: Tier) -> None:
    """Set field ``name`` to its display text, remembering the whole text if they differ."""
    if tier == "full":
        out[name] = full
        return
    shown = truncate(full)
    out[name] = shown
    if shown != full:
        whole[name] = full


def to_text(value: Any) -> str:
    """Serialise a tool argument/result/data value the way the server does."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if type(value) is dict:
        flat = _flat_json(value)
        if flat is not None:
            return flat
    try:
        return _encode(value)  # type: ignore[no-any-return]
    except (TypeError, ValueError):
        return str(value)


def _flat_json(d: dict[Any, Any]) -> str | None:
    """``json.dumps(d)`` for a mapping of strings to strings (a tool call's usual
    arguments), written directly with the encoder's own string quoting; ``None`` for any
    other mapping. Serialised through the encoder, a call's arguments cost 20,000
    instructions, most of them setting the encoder up."""
    parts: list[str] = []
    for k, v in d.items():
        if type(k) is not str or type(v) is not str:
            return None
        parts.append(_quote(k) + ": " + _quote(v))
    return "{" + ", ".join(parts) + "}"


def parse_args(text: Any) -> Any:
    """Tool arguments as an object when the text is complete JSON, else ``None``."""
    if isinstance(text, dict):
        return text
    if not isinstance(text, str) or not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _timestamp(value: Any) -> float | None:
    # (a tuple, not ``int | float``: compiled, the union was built anew on every call)
    if isinstance(value, (int, float)):  # noqa: UP038
        return float(value)
    if isinstance(value, str):
        return _iso_seconds(value)
    return None


# the epoch second of each minute an ISO timestamp named, by its first 16 characters
_MINUTES: dict[str, int] = {}
# the minute the last timestamp named, and its epoch second: an event's timestamps, and
# the next event's, are mostly of one minute (one tuple, replaced whole: a reader in
# another thread sees a key with its own second); at first a key longer than any
# value read here, so that no value starts with it
_LAST_MINUTE: Final[list[tuple[str, int]]] = [("\0" * 33, 0)]
# microseconds a float holds exactly (to the year 2255): within them dividing the float
# gives the quotient rounded once, as datetime's integer division does
_EXACT: Final = 2 ** 53


def _digits(value: str, start: int, end: int) -> int:
    """``value[start:end]`` as a decimal number, or -1 where a character of it is not an
    ASCII digit (what ``isascii() and isdigit()`` allow, without a string per field)."""
    n = 0
    for i in range(start, end):
        d = ord(value[i]) - 48
        if d < 0 or d > 9:
            return -1
        n = n * 10 + d
    return n


def _iso_seconds(value: str) -> float | None:
    """``datetime.fromisoformat(value).timestamp()``, or ``None`` where it refuses.

    Inspect writes every timestamp as ``2026-12-01T07:11:43.859891+00:00``: for that
    form the minute's epoch second is looked up (computed once per minute; the last
    minute's kept aside) and the seconds and microseconds added as integers, then
    divided once, as ``timestamp()`` divides (the same float). Parsing each one whole
    was 3,100 instructions, the minute table's lookup with ``int()`` of each field
    4,650 (compiled, callgrind), for two timestamps of every event a rule reads."""
    if (len(value) == 32 and value[16] == ":" and value[19] == "."
            and value.endswith("+00:00")):
        ss = _digits(value, 17, 19)
        us = _digits(value, 20, 26)
        if 0 <= ss < 60 and us >= 0:
            last = _LAST_MINUTE[0]
            if value.startswith(last[0]):
                base = last[1]
            else:
                key = value[:16]
                got = _MINUTES.get(key)
                if got is None:
                    try:
                        got = int(_fromiso(key + ":00+00:00").timestamp())
                    except ValueError:
                        return None  # (the whole value has the same date and minute)
                    if len(_MINUTES) >= 4096:
                        _MINUTES.clear()
                    _MINUTES[key] = got
                base = got
                _LAST_MINUTE[0] = (key, got)
            micros = base * 1_000_000 + ss * 1_000_000 + us
            if -_EXACT < micros < _EXACT:  # (compiled, the division is a float's)
                return micros / 1_000_000
    try:
        return _fromiso(value).timestamp()
    except ValueError:
        return None


def normalise(raw: dict[str, Any], tier: Tier = "content") -> Event:
    """Normalise one event as served (compact or ``full``) or as logged (raw).

    A compact event (has ``has_error`` or lacks raw payload keys) keeps its
    fields; a raw one is projected to the same compact fields, truncated as the
    server would at the ``content`` tier and kept whole at ``full``. The raw
    form stays available under ``raw`` at the ``full`` tier.
    """
    if type(raw.get(WHOLE)) is dict:
        return raw  # normalised already, by a source that projects raw events itself
    # ``event`` first: raw tool/sample_limit events carry their own ``type`` field
    # (``"function"``, ``"message"`` …), which is not the event type.
    etype = str(raw.get("event") or raw.get("type") or "unknown")
    is_raw = _looks_raw(etype, raw)
    out: Event = dict(raw) if not is_raw else {}
    if etype == "sample_limit" and raw.get("type") not in (None, etype):
        # a logged or ``full`` limit event's own ``type`` is the limit's kind (message,
        # token, time, working, cost, custom), which the event type takes the place of
        out["limit_type"] = raw["type"]
    out["type"] = etype
    out.setdefault("event", etype)
    out["uuid"] = raw.get("uuid")
    out["span_id"] = raw.get("span_id")
    out["timestamp"] = _timestamp(raw.get("timestamp"))
    out["pending"] = bool(raw.get("pending"))
    if is_raw:
        if etype == "model" or etype == "tool":
            # when the call completed (the compact projection has no such field): what
            # the idle rules learn a task's pace from (engine/pace.py)
            completed = _timestamp(raw.get("completed"))
            if completed is not None:
                out["completed"] = completed
        _project_raw(out, etype, raw, tier)
        if tier == "full":
            out["raw"] = raw
    elif etype == "tool":
        out["args"] = parse_args(out.get("arguments"))
    return out


def _looks_raw(etype: str, raw: dict[str, Any]) -> bool:
    if "has_error" in raw:
        return False
    if etype == "model":
        return "output" in raw or "input" in raw
    if etype == "tool":
        return isinstance(raw.get("arguments"), dict) or "result" in raw and "function" in raw
    if etype == "error":
        return isinstance(raw.get("error"), dict)
    if etype == "info":
        return "data" in raw and "source" in raw and not isinstance(raw.get("data"), str)
    return False


def _text(value: Any, tier: Tier) -> str:
    text = to_text(value)
    return text if tier == "full" else truncate(text)


def _project_raw(out: Event, etype: str, raw: dict[str, Any], tier: Tier) -> None:
    """Project a raw (logged or ``full``) event onto the compact field names."""
    content = tier != "metadata"
    whole: dict[str, str] = {}
    if content:
        out[WHOLE] = whole
    if etype == "model":
        output = raw.get("output") or {}
        usage = output.get("usage") or {}
        out["model"] = raw.get("model")
        out["tokens"] = usage.get("total_tokens") if usage else None
        cost = usage.get("total_cost") if usage else None
        if isinstance(cost, (int, float)) and not isinstance(cost, bool):  # noqa: UP038
            out["cost"] = cost  # where Inspect knows the model's price (raw events only)
        choices = output.get("choices") or []
        first = (choices[0] or {}) if choices else {}
        message = first.get("message", {}) or {}
        # ModelOutput.stop_reason is a property (choices[0].stop_reason): the live server
        # reads the property, a serialised event only has the choice's field
        out["stop_reason"] = output.get("stop_reason") or first.get("stop_reason")
        out["has_error"] = raw.get("error") is not None
        calls = message.get("tool_calls") or []
        if tier == "full":  # the compact projection has neither: keep tiers comparable
            out["tool_calls"] = [
                {"function": c.get("function"), "arguments": c.get("arguments")} for c in calls
            ]
            out["tools"] = [t.get("name") for t in raw.get("tools") or [] if isinstance(t, dict)]
        if content:
            _display(out, whole, "completion",
                     to_text(output.get("completion") or _message_text(message)), tier)
            out["error"] = raw.get("error")
            prompt = _prompt_message(raw)
            if prompt is not None:
                out["prompt_role"] = prompt.get("role")
                _display(out, whole, "prompt", _message_text(prompt), tier)
    elif etype == "tool":
        out["id"] = raw.get("id")
        out["function"] = raw.get("function")
        err = raw.get("error")
        out["has_error"] = err is not None
        if content:
            value = raw.get("arguments")
            _display(out, whole, "arguments", to_text(value), tier)
            out["args"] = value if isinstance(value, dict) else parse_args(
                whole.get("arguments", out["arguments"]))
            _display(out, whole, "result", to_text(raw.get("result")), tier)
            out["error"] = (err or {}).get("message") if isinstance(err, dict) else err
    elif etype == "error":
        if content:
            err = raw.get("error") or {}
            out["error"] = err.get("message") if isinstance(err, dict) else err
    elif etype == "info":
        out["source"] = raw.get("source")
        if content:
            out["data"] = _text(raw.get("data"), tier)
    else:
        for key, value in raw.items():
            out.setdefault(key, value)


def _prompt_message(raw: dict[str, Any]) -> dict[str, Any] | None:
    """The last message of a raw model event's input (or the one a source attached)."""
    attached = raw.get(PROMPT_KEY)
    if isinstance(attached, dict):
        return attached
    messages = raw.get("input")
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
        return messages[-1]
    return None


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", "")) for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""
