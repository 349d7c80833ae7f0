"""Reading a JSON Lines file another process may be appending to.

The watcher writes each line with one ``write(2)`` on an ``O_APPEND`` descriptor, but
Linux grows a regular file's size page by page while a write copies in: a reader racing
a write can see the first part of the line (CI saw a record cut at a page boundary). A
line is whole once its newline is there, as every tailer assumes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def complete_records(path: Path) -> list[dict[str, Any]]:
    """The records of the lines written whole so far (none if the file is not there)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    whole = text[:text.rfind("\n") + 1]
    return [json.loads(line) for line in whole.splitlines() if line.strip()]
