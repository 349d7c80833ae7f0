"""What a raw model event's messages give the content tier: the message that prompted it,
and a message's content with its attachment references resolved.

Compiled (setup.py): :mod:`~watcher.sources.logfiles.project` asks both of every model
event a scan reads (13,745 in the shared corpus's 375 SWE-bench runs), and from compiled
code a call into an interpreted module cost more than the work; ``samples.light`` asks
the same of the events it makes the general way.
"""

from __future__ import annotations

from typing import Any, Final

from watcher.attachments import (
    ATTACHMENT_PROTOCOL,
    LEGACY_PROTOCOL,
    Expansion,
    resolve_attachments,
    resolve_text,
)

# (module constants of a compiled module: read without a lookup in another's globals,
# which cost the scan 54 M instructions more than literals)
_PROTOCOL: Final = ATTACHMENT_PROTOCOL
_LEGACY: Final = LEGACY_PROTOCOL


def may_refer(v: str) -> bool:
    """Whether :func:`~watcher.attachments.resolve_text` could change ``v``: it holds a
    reference, or is a legacy one. (Looking for the whole protocol skips further through
    a long output than looking for ``://``: 0.6x the time over the corpus's tool
    outputs; and a URL is no reference.)"""
    return _PROTOCOL in v or v.startswith(_LEGACY)


def last_input(e: dict[str, Any], pool: list[Any]) -> dict[str, Any] | None:
    """The last input message of a raw model event: from its ``input``, or, when the
    input is pooled, the pool entry its last ``input_refs`` range ends at."""
    messages = e.get("input")
    if isinstance(messages, list) and messages:
        last = messages[-1]
        return last if isinstance(last, dict) else None
    refs = e.get("input_refs")
    if isinstance(refs, list) and refs and isinstance(refs[-1], (list, tuple)) and len(  # noqa: UP038
            refs[-1]) == 2:
        end = refs[-1][1]
        if isinstance(end, int) and 0 < end <= len(pool) and isinstance(pool[end - 1], dict):
            return pool[end - 1]  # type: ignore[no-any-return]
    return None


def message_content(v: Any, att: dict[str, str], found: set[str],
                    budget: Expansion | None) -> Any:
    """A message's content (a string, or a list of parts), resolved."""
    if type(v) is str:
        return resolve_text(v, att, found, budget) if may_refer(v) else v
    return resolve_attachments(v, att, found, budget) if v else v
