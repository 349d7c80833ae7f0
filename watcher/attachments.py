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
must not raise ``RecursionError``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

ATTACHMENT_PROTOCOL = "attachment://"
_LEGACY_PROTOCOL = "tc://"
# Hashes are 32 hex chars (mm3); the chunked log format numbers them instead.
_REF = re.compile(r"attachment://([0-9A-Za-z]+)")
_HASH_LEN = 32


def resolve_attachments(
    obj: Any, attachments: Mapping[str, str], unknown: set[str] | None = None
) -> Any:
    """A copy of ``obj`` (nested dicts/lists/strings) with attachment refs resolved.

    Containers are rebuilt, so the result never shares mutable state with
    ``obj``; non-container leaves are returned as-is. Keys of ``unknown``
    references (not in ``attachments``) are added to ``unknown`` when given.
    """
    if isinstance(obj, str):
        return resolve_text(obj, attachments, unknown)
    if not isinstance(obj, dict | list | tuple):
        return obj
    root: Any = {} if isinstance(obj, dict) else [None] * len(obj)
    # an explicit stack: depth is the input's choice, and Python's recursion limit is not
    stack: list[tuple[Any, Any]] = [(obj, root)]
    while stack:
        src, dst = stack.pop()
        for k, v in (src.items() if isinstance(src, dict) else enumerate(src)):
            if isinstance(v, str):
                out: Any = resolve_text(v, attachments, unknown)
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
    text: str, attachments: Mapping[str, str], unknown: set[str] | None = None
) -> str:
    """One string with every attachment reference in it replaced."""
    if text.startswith(_LEGACY_PROTOCOL):
        key = text[len(_LEGACY_PROTOCOL):]
        if key in attachments:
            return attachments[key]
    if ATTACHMENT_PROTOCOL not in text:
        return text
    if text.startswith(ATTACHMENT_PROTOCOL):  # the common whole-string case
        key = text[len(ATTACHMENT_PROTOCOL):]
        if key in attachments:
            return attachments[key]

    def replace(match: re.Match[str]) -> str:
        key = match.group(1)
        if key in attachments:
            return attachments[key]
        # an embedded hash may run straight into following alphanumeric text
        if len(key) > _HASH_LEN and key[:_HASH_LEN] in attachments:
            return attachments[key[:_HASH_LEN]] + key[_HASH_LEN:]
        if unknown is not None:
            unknown.add(key[:_HASH_LEN] if len(key) > _HASH_LEN else key)
        return match.group(0)

    return _REF.sub(replace, text)


def find_refs(obj: Any) -> set[str]:
    """Keys of every ``attachment://`` reference left anywhere in ``obj``."""
    found: set[str] = set()
    stack: list[Any] = [obj]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            if ATTACHMENT_PROTOCOL in value:
                found.update(m.group(1) for m in _REF.finditer(value))
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list | tuple):
            stack.extend(value)
    return found
