"""Message templates at load time: literal text and ``{fact}`` fields, nothing else.

A template names facts of the rule's detector; anything that could evaluate code or
reach into objects (``{x.attr}``, ``{x[0]}``, conversions, format specs) is refused
when the rule loads (W113), so a message can only ever show a fact's value.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from watcher.engine.errors import BadTemplateError
from watcher.engine.lang.ctx import Ctx
from watcher.engine.rule import Template
from watcher.engine.yamlsrc import Path_

_TEMPLATE_TOKEN = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}|\{[^}]*\}?|\}")

def compile_template(source: Any, ctx: Ctx, path: Path_, known: set[str]) -> Template | None:
    """Parse a safe template; unknown fields and stray braces are W113 errors."""
    if not ctx.expect(source, str, path, "message"):
        return None
    parts: list[tuple[bool, str]] = []
    pos = 0
    ok = True
    for m in _TEMPLATE_TOKEN.finditer(source):
        if m.start() > pos:
            parts.append((False, source[pos:m.start()]))
        tok = m.group(0)
        if tok == "{{":
            parts.append((False, "{"))
        elif tok == "}}":
            parts.append((False, "}"))
        elif m.group(1):
            name = m.group(1)
            if name not in known:
                close = difflib.get_close_matches(name, sorted(known), n=1)
                ctx.error(BadTemplateError, path, f"unknown template field {{{name}}}",
                          f"did you mean {{{close[0]}}}?" if close else
                          "available: " + ", ".join("{" + k + "}" for k in sorted(known)))
                ok = False
            parts.append((True, name))
        else:
            ctx.error(BadTemplateError, path, f"unsupported template syntax {tok!r}",
                      "only {name} fields; write {{ and }} for literal braces")
            ok = False
        pos = m.end()
    if pos < len(source):
        parts.append((False, source[pos:]))
    return Template(source, tuple(parts)) if ok else None
