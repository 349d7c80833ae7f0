"""Formatting shared by the human-facing outputs (the reporters, and `--notify`): times,
durations, facts, badges, ids. Escaping is each output's own (sanitize.py)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from watcher.findings import Finding
from watcher.sanitize import clean_text, neutralise_quotes, visible_text

BADGES = {"high": "HIGH", "medium": "MEDIUM", "low": "LOW"}


def fmt_time(ts: float | None) -> str:
    """UTC wall-clock time (UTC so reports read the same on every host)."""
    if ts is None or not math.isfinite(ts) or ts <= 0:
        return "?"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def fmt_clock(ts: float | None) -> str:
    """UTC time of day only, for times within a finding's span."""
    if ts is None or not math.isfinite(ts) or ts <= 0:
        return "?"
    return datetime.fromtimestamp(ts, UTC).strftime("%H:%M:%SZ")


def fmt_duration(seconds: float | None) -> str:
    """Compact human duration: ``4.2s``, ``3m19s``, ``1h02m``."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f}s"
    s = int(round(seconds))
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def fmt_span(f: Finding) -> str:
    """``first → last (duration), N times`` for a finding."""
    span = f"{fmt_time(f.first_seen)}"
    if f.last_seen and f.last_seen != f.first_seen:
        span += f" → {fmt_clock(f.last_seen)} ({fmt_duration(f.last_seen - f.first_seen)})"
    times = "once" if f.count == 1 else f"{f.count} times"
    return f"{span}, {times}"


def fmt_event_times(timestamps: tuple[float, ...], limit: int) -> str:
    """``hh:mm:ssZ, …`` for the first ``limit`` evidence events, with the total if cut."""
    shown = ", ".join(fmt_clock(t) for t in timestamps[:limit])
    return shown + (f", … ({len(timestamps)} events)" if len(timestamps) > limit else "")


def detail_rows(f: Finding, times: int = 8) -> list[tuple[str, str, int]]:
    """``(label, plain text, max length)`` lines the Markdown and HTML reports show under a
    finding's heading, in order; each report escapes them its own way."""
    rows: list[tuple[str, str, int]] = []
    if f.summary:
        rows.append(("summary", f.summary, 500))
    if f.confidence_reason:
        rows.append((f"why {one(f.confidence, 20)}", f.confidence_reason, 500))
    ev = f.evidence
    if ev.timestamps:
        rows.append(("events at", fmt_event_times(ev.timestamps, times), 500))
    if ev.facts:
        rows.append(("evidence", fmt_facts(ev.facts), 1200))
    return rows


def fmt_number(v: Any) -> str:
    """Numbers for humans: ints plain, floats to 3 significant decimals."""
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return f"{v:.3g}" if math.isfinite(v) else str(v)
    return str(v)


# facts every report already shows on its own line ("seen: …", the quoted agent text);
# JSONL keeps them (a raw epoch such as first_seen=1.8e+09 tells a reader nothing)
SHOWN_ELSEWHERE = frozenset({"first_seen", "last_seen", "span", "excerpt"})


def fmt_facts(facts: Mapping[str, Any], limit: int = 8, value_len: int = 120) -> str:
    """``key=value`` pairs; string values are agent-derived, so cleaned and «quoted»."""
    parts: list[str] = []
    facts = {k: v for k, v in facts.items() if k not in SHOWN_ELSEWHERE}
    for i, (k, v) in enumerate(facts.items()):
        if i >= limit:
            parts.append(f"+{len(facts) - limit} more")
            break
        key = clean_text(k, 60, one_line=True)
        if isinstance(v, int | float | bool) or v is None:
            parts.append(f"{key}={fmt_number(v)}")
        else:
            val = v if isinstance(v, str) else repr(v)
            parts.append(f"{key}=«{neutralise_quotes(clean_text(val, value_len, one_line=True))}»")
    return ", ".join(parts)


def one(v: object, max_len: int = 200) -> str:
    """Cleaned single-line text (for names, ids and the watcher's own prose)."""
    return clean_text(v, max_len, one_line=True)


_PLAIN_ID = re.compile(r"[\w.:/@+-]{1,200}")


def fmt_id(v: object) -> str:
    """A name or id as is when plain, else «quoted» so spaces and ';' cannot blur the line.

    Controls are shown, not removed (:func:`~watcher.sanitize.visible_text`): an id full
    of escape sequences, cleaned like prose, read as a bare plain id.
    """
    text = visible_text(v)
    if _PLAIN_ID.fullmatch(text) and not text.startswith("-"):
        return text
    return f"«{neutralise_quotes(text)}»"


def where(f: Finding) -> str:
    """``task · model · sample · epoch · attempt`` (values cleaned, odd ones quoted)."""
    s = f.sample
    return (f"task {fmt_id(s.task)}  model {fmt_id(s.model)}  sample {fmt_id(s.sample_id)}  "
            f"epoch {s.epoch}  attempt {s.attempt}")
