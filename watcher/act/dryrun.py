"""Step 5 of the watchdog: the dry run (``dry_run=true``), in which the server says what
would change; and the words for what a server's answer said it changed."""

from __future__ import annotations

from typing import Any

from watcher.act.verbs import said
from watcher.findings import Finding
from watcher.sources.http import ControlAnswer


def changed(ans: ControlAnswer) -> str:
    """``changed: true`` (and the server's reason, quoted) for a record."""
    body = ans.body if isinstance(ans.body, dict) else {}
    out = f"changed: {str(body.get('changed')).lower()}"
    if body.get("reason"):
        out += f"; it said {said(str(body['reason']))}"
    return out


def pick_tool_call(pending: list[Any], f: Finding) -> str | None:
    """Of several pending tool calls (a dry run's 409), the one the finding names (its
    ``function``), if exactly one is; else ``None`` (a mutation must not guess)."""
    function = f.evidence.facts.get("function")
    ids = [str(c.get("id")) for c in pending
           if isinstance(c, dict) and c.get("id") and function and c.get("function") == function]
    return ids[0] if len(ids) == 1 else None
