"""Resolve ``attachment://<hash>`` references in logged events.

Inspect condenses a sample before writing it: long strings (prompts, model
completions, tool output, images) move into the sample's ``attachments`` map
and the events keep ``attachment://<hash>`` in their place. Inspect's own
resolver misses some fields (e.g. ``ModelOutput.completion`` on older logs),
and a rule matching text against ``attachment://…`` has silently lost its
input, so every event a log-backed source hands out goes through
:func:`resolve_attachments` first.

References are replaced wherever they occur: as a whole string (the usual
case) or embedded in a longer one. A reference whose key is not in the map is
left untouched and reported through ``unknown`` so the caller can say so
instead of pretending the text was there. The legacy ``tc://<hash>`` prefix is
honoured when the whole string is such a reference and its hash is known.

Logs are untrusted input: the walk is iterative (tool arguments nested 900 deep
must not raise ``RecursionError``), and an :class:`Expansion` budget bounds the
text references may add to one sample, all its events together (a 96 KB log of 40
events, each repeating one 100 KB attachment 16,000 times, peaked at 2.86 GB with a
budget per event). A reference past the
budget stays a reference, and the budget says so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from orjson import dumps as _dumps

ATTACHMENT_PROTOCOL = "attachment://"
LEGACY_PROTOCOL = "tc://"
# Hashes are 32 hex chars (mm3); the chunked log format numbers them instead.
_REF = re.compile(r"attachment://([0-9A-Za-z]+)")
_HASH_LEN = 32


class Expansion:
    """How many characters references may still add (one budget per sample).

    Every resolved reference counts its text's length, also when many references
    name the same attachment: sharing one string costs nothing here, but whatever
    serialises the event (tool arguments become text) pays for each copy.
    """

    __slots__ = ("left", "limit", "exceeded")

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.left = limit
        self.exceeded = 0  # references left unresolved for want of budget

    def take(self, text: str) -> bool:
        """Whether ``text`` still fits; if so, it is taken from the budget."""
        if len(text) > self.left:
            self.exceeded += 1
            return False
        self.left -= len(text)
        return True


def resolve_attachments(
    obj: Any, attachments: Mapping[str, str], unknown: set[str] | None = None,
    budget: Expansion | None = None,
) -> Any:
    """A copy of ``obj`` (nested dicts/lists/strings) with attachment refs resolved.

    Containers are rebuilt, so the result never shares mutable state with
    ``obj``; non-container leaves are returned as-is. Keys of ``unknown``
    references (not in ``attachments``) are added to ``unknown`` when given.
    With a ``budget``, references that no longer fit in it are left as they are.
    """
    if isinstance(obj, str):
        return resolve_text(obj, attachments, unknown, budget)
    if not isinstance(obj, dict | list | tuple):
        return obj
    root: Any = {} if isinstance(obj, dict) else [None] * len(obj)
    # an explicit stack: depth is the input's choice, and Python's recursion limit is not
    stack: list[tuple[Any, Any]] = [(obj, root)]
    while stack:
        src, dst = stack.pop()
        for k, v in (src.items() if isinstance(src, dict) else enumerate(src)):
            if isinstance(v, str):
                out: Any = resolve_text(v, attachments, unknown, budget)
            elif isinstance(v, dict):
                out = {}
                stack.append((v, out))
            elif isinstance(v, list | tuple):
                out = [None] * len(v)
                stack.append((v, out))
            else:
                out = v
            dst[k] = out
    return root


def resolve_text(
    text: str, attachments: Mapping[str, str], unknown: set[str] | None = None,
    budget: Expansion | None = None,
) -> str:
    """One string with every attachment reference in it replaced (within ``budget``)."""
    def fits(value: str) -> bool:
        return budget is None or budget.take(value)

    if text.startswith(LEGACY_PROTOCOL):
        key = text[len(LEGACY_PROTOCOL):]
        if key in attachments and fits(attachments[key]):
            return attachments[key]
    if ATTACHMENT_PROTOCOL not in text:
        return text
    if text.startswith(ATTACHMENT_PROTOCOL):  # the common whole-string case
        key = text[len(ATTACHMENT_PROTOCOL):]
        if key in attachments:
            return attachments[key] if fits(attachments[key]) else text

    def replace(match: re.Match[str]) -> str:
        key = match.group(1)
        if key in attachments:
            return attachments[key] if fits(attachments[key]) else match.group(0)
        # an embedded hash may run straight into following alphanumeric text
        if len(key) > _HASH_LEN and key[:_HASH_LEN] in attachments:
            value = attachments[key[:_HASH_LEN]]
            return value + key[_HASH_LEN:] if fits(value) else match.group(0)
        if unknown is not None:
            unknown.add(key[:_HASH_LEN] if len(key) > _HASH_LEN else key)
        return match.group(0)

    return _REF.sub(replace, text)


_LEGACY_JSON = re.compile(r'"tc://([0-9A-Za-z]+)"')


def resolve_json(text: str, attachments: Mapping[str, str]) -> str:
    """JSON text with the attachment references inside its strings resolved.

    Decoding the result gives what :func:`resolve_attachments` makes of the decoded
    ``text`` (no budget, unknown references left as they are), for the cost of one
    scan of the text instead of a walk of every value of the decoded event: a live
    sample's events are resolved as they are read, and the walk was a third of the
    watcher's CPU on real transcripts. A reference sits inside a JSON string as plain
    characters (a hash is alphanumeric), so replacing it with the attachment's text,
    JSON-escaped, keeps the document valid. (It would also resolve a reference in an
    object key, which the walk leaves alone; Inspect writes none there.)
    """
    if ATTACHMENT_PROTOCOL not in text and LEGACY_PROTOCOL not in text:
        return text

    def replace(match: re.Match[str]) -> str:
        key = match.group(1)
        if key in attachments:
            return _escaped(attachments[key])
        if len(key) > _HASH_LEN and key[:_HASH_LEN] in attachments:
            return _escaped(attachments[key[:_HASH_LEN]]) + key[_HASH_LEN:]
        return match.group(0)

    def legacy(match: re.Match[str]) -> str:  # only a whole string, as resolve_text
        key = match.group(1)
        return f'"{_escaped(attachments[key])}"' if key in attachments else match.group(0)

    if LEGACY_PROTOCOL in text:
        text = _LEGACY_JSON.sub(legacy, text)
    return _REF.sub(replace, text) if ATTACHMENT_PROTOCOL in text else text


def _escaped(value: str) -> str:
    """``value`` as the inside of a JSON string literal."""
    try:
        return _dumps(value).decode("utf-8")[1:-1]
    except TypeError:  # a lone surrogate, which orjson refuses and json escapes
        return json.dumps(value, ensure_ascii=False)[1:-1]


def _strings(obj: Any) -> Iterator[str]:
    """Every string in ``obj`` (nested dicts, lists and tuples), without recursion."""
    stack: list[Any] = [obj]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list | tuple):
            stack.extend(value)


def find_refs(obj: Any) -> set[str]:
    """Keys of every ``attachment://`` reference left anywhere in ``obj``."""
    found: set[str] = set()
    for value in _strings(obj):
        if ATTACHMENT_PROTOCOL in value:
            found.update(_REF.findall(value))
    return found


def attachment_hash(text: str) -> str:
    """The key Inspect files ``text`` under when it condenses a sample
    (``inspect_ai._util.hash.mm3_hash``: MurmurHash3's 128 bits of its UTF-8)."""
    import mmh3  # (an Inspect dependency; imported only when a reference is looked up)

    h1, h2 = mmh3.hash64(text.encode("utf-8", errors="backslashreplace"))
    return f"{h1 & 0xFFFFFFFFFFFFFFFF:016x}{h2 & 0xFFFFFFFFFFFFFFFF:016x}"


def texts_by_hash(obj: Any, wanted: set[str]) -> dict[str, str]:
    """The strings in ``obj`` (nested dicts and lists) that ``wanted`` references name,
    by key: a string is the attachment a reference names when it hashes to its key.

    A finished sample's events come condensed over the control channel (each string
    over 100 characters a reference), its messages with their text: the same strings,
    so the messages resolve the events' references, each checked by its hash.
    """
    found: dict[str, str] = {}
    if not wanted:
        return found
    for value in _strings(obj):
        if len(value) > 100 and ATTACHMENT_PROTOCOL not in value:
            key = attachment_hash(value)
            if key in wanted:
                found[key] = value
                if len(found) >= len(wanted):
                    break
    return found
