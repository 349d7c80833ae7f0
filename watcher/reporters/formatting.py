"""Formatting shared by the human-facing outputs (the reporters, and `--notify`): times,
durations, facts, badges, ids. Escaping is each output's own (sanitize.py)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from watcher.findings import SPEND_FACTS, SPEND_NOT_COUNTED, Action, Finding
from watcher.reporters.facts import fact_phrases, fmt_duration
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
        said = fact_phrases(ev.facts).text()
        if said:
            rows.append(("evidence", said, 1200))
    spent = fmt_spend(ev.facts)
    if spent:
        rows.append(("spent since", spent, 300))
    return rows


def fmt_spend(facts: Mapping[str, Any]) -> str | None:
    """What the sample spent after the finding was first seen (and after it became
    high), from the spend facts the watch attaches (watcher/run/spend.py)."""
    since, since_high, cost = (facts.get(k) for k in SPEND_FACTS)
    why = facts.get(SPEND_NOT_COUNTED)
    if type(since) is not int:
        return f"first seen: not counted ({why})" if isinstance(why, str) and why else None
    text = f"first seen: {since:,} tokens"
    if isinstance(cost, int | float) and not isinstance(cost, bool) and math.isfinite(cost):
        text += f" (${cost:,.4f})"
    if type(since_high) is int:
        text += f"; since it was high: {since_high:,} tokens"
    if isinstance(why, str) and why:
        text += f" ({why})"
    return text


def action_head(a: Action) -> str:
    """``cancel_sample (action=score): requested`` for an action record (plain text;
    each report escapes it)."""
    args = ", ".join(f"{k}={v}" for k, v in sorted(a.args.items()))
    head = a.verb + (f" ({args})" if args else "")
    outcome = a.outcome.replace("_", "-")
    if a.reason and a.outcome not in ("requested", "confirmed", "dry_run"):
        outcome += f" [{a.reason}]"
    return f"{head}: {outcome}"


def action_target(a: Action) -> str:
    """What an action was aimed at: the task, and the sample attempt for a sample's."""
    s = a.sample
    if s is None:
        return ""
    if a.scope in ("task", "run"):
        return f"task {fmt_id(s.task)}" + (f" (pid {s.pid})" if a.scope == "run" and s.pid
                                          else "")
    return (f"task {fmt_id(s.task)}  sample {fmt_id(s.sample_id)}  epoch {s.epoch}  "
            f"attempt {s.attempt}")


def fmt_number(v: Any) -> str:
    """Numbers for humans: ints plain, floats to 3 significant decimals."""
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return f"{v:.3g}" if math.isfinite(v) else str(v)
    return str(v)


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
