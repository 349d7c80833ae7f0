"""A finding's facts in words: one table, used by the text, Markdown and HTML reports.

A detector's facts are the numbers a rule judges on (``near_identical=2,
window_count=2, window=12 events``); a person reads them as ``2 near-identical, 2 in
a window of 12 events``. :data:`PHRASES` maps each fact name to its words;
:func:`fact_phrases` leaves out what says nothing (a ``period`` of 1, a ``cycle`` that
is false, ``compared_on`` whole values, an empty ``error``) and what a report shows on
its own line (:data:`SHOWN_ELSEWHERE`). A fact the table does not know is shown as
``name: value``. Values the agent wrote (a call's key, a submitted answer, an error, a
tool's name) are cleaned, «quoted» and counted in :attr:`Phrases.agent`, so a report
can say whose words they are; every other word here is ours.

JSONL keeps the facts as they are (docs/findings.md).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from watcher.findings import SPEND_FACTS, SPEND_NOT_COUNTED
from watcher.sanitize import clean_text, neutralise_quotes


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



# facts every report already shows on its own line ("seen: …", the quoted agent text,
# "spent since …")
SHOWN_ELSEWHERE = frozenset({"first_seen", "last_seen", "span", "excerpt", "count", "rule",
                             "title", *SPEND_FACTS, SPEND_NOT_COUNTED})

# facts whose value the agent wrote (or chose: the name of the tool it called)
AGENT_FACTS = frozenset({"key", "value", "error", "tool", "function"})


def _n(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        return f"{v:,.0f}" if v == int(v) and abs(v) >= 1 else f"{v:.3g}"
    return str(v)


def _secs(v: Any) -> str:
    return fmt_duration(float(v)) if isinstance(v, int | float) else str(v)


def _plural(n: Any, one: str, many: str) -> str:
    return f"{_n(n)} {one if n == 1 else many}"


Phrase = Callable[[Any, Mapping[str, Any]], str | None]


def _if_true(words: str) -> Phrase:
    return lambda v, _f: words if v is True else None


def _count(one: str, many: str, *, zero: str | None = None) -> Phrase:
    def phrase(v: Any, _f: Mapping[str, Any]) -> str | None:
        if not isinstance(v, int | float) or isinstance(v, bool):
            return None
        if v == 0:
            return zero
        return _plural(v, one, many)
    return phrase


def _window_count(v: Any, f: Mapping[str, Any]) -> str | None:
    window = f.get("window")
    if isinstance(window, str) and window:
        return f"{_n(v)} in a window of {clean_text(window, 60, one_line=True)}"
    return f"{_n(v)} in the window"


def _similarity(v: Any, f: Mapping[str, Any]) -> str | None:
    if not isinstance(v, int | float) or v >= 100 or f.get("exact") is True:
        return None
    return f"at least {_n(v)}% alike"


def _results(v: Any, f: Mapping[str, Any]) -> str | None:
    if v is True:
        return "same result each time"
    if v is False:
        return "results differed"
    return None


def _distinct(v: Any, f: Mapping[str, Any]) -> str | None:
    if not isinstance(v, int) or v <= 1:
        return None
    return f"{_n(v)} different results"


def _outlier(v: Any, f: Mapping[str, Any]) -> str | None:
    if not isinstance(v, int | float):
        return None
    field = {"total_tokens": "tokens", "total_time": "time"}.get(str(f.get("outlier_field")),
                                                                 str(f.get("outlier_field")))
    median = f.get("median")
    of = f" ({_n(median)})" if isinstance(median, int | float) else ""
    n = f.get("compared_with")
    if isinstance(n, int):  # the siblings that had finished when it did
        return (f"{_n(v)}x the median {field}{of} of the "
                f"{_plural(n, 'sample', 'samples')} finished no later")
    return f"{_n(v)}x the task's median {field}{of}"


def _compared_on(v: Any, _f: Mapping[str, Any]) -> str | None:
    if not isinstance(v, str) or v == "whole values":
        return None
    return f"compared on the {clean_text(v, 80, one_line=True)} only"


def _waited(v: Any, f: Mapping[str, Any]) -> str | None:
    if f.get("at_end") is True:
        return f"not seen before the sample ended ({_plural(v, 'event', 'events')} after)"
    return f"not seen in the {_plural(v, 'event', 'events')} after"


def _kind(v: Any, _f: Mapping[str, Any]) -> str | None:
    words = {"tool": "waiting on a tool call", "model": "waiting on the model",
             "none": "nothing in flight"}
    return words.get(str(v), f"idle kind: {clean_text(v, 40, one_line=True)}")


def _status(v: Any, _f: Mapping[str, Any]) -> str | None:
    return None if v in (None, "", "completed", "success") else f"status {clean_text(v, 40)}"


def _limit(v: Any, _f: Mapping[str, Any]) -> str | None:
    return None if not v else f"stopped at its {clean_text(v, 40, one_line=True)} limit"


def _task_wide(v: Any, f: Mapping[str, Any]) -> str | None:
    return "task-wide" if v is True else None


def _samples(v: Any, f: Mapping[str, Any]) -> str | None:
    if not isinstance(v, int):
        return None
    return f"among {_plural(v, 'sample', 'samples')}"


def _episode(v: Any, _f: Mapping[str, Any]) -> str | None:
    return f"episode {_n(v)}" if isinstance(v, int) and v > 1 else None


def _period(v: Any, _f: Mapping[str, Any]) -> str | None:
    return f"a cycle of {_n(v)} calls" if isinstance(v, int) and v > 1 else None


def _event_type(v: Any, _f: Mapping[str, Any]) -> str | None:
    return None  # the title and summary say which events


def _between(v: Any, f: Mapping[str, Any]) -> str | None:
    if not isinstance(v, int):
        return None
    if v == 0:  # "N in a row" says it
        return None if isinstance(f.get("streak"), int) and f["streak"] > 1 else "back to back"
    return f"{_plural(v, 'other call', 'other calls')} between"


def _changes(v: Any, f: Mapping[str, Any]) -> str | None:
    if not isinstance(v, int) or not f.get("between"):
        return None  # nothing ran between: "back to back" says it
    if v == 0:
        return "nothing between that could change the result"
    return f"{_plural(v, 'call', 'calls')} between that may change state"


def _streak(v: Any, f: Mapping[str, Any]) -> str | None:
    if not isinstance(v, int) or v <= 1:
        return None
    return f"{_n(v)} in a row"


def _quoted(label: str) -> Phrase:
    def phrase(v: Any, _f: Mapping[str, Any]) -> str | None:
        if v in (None, ""):
            return None
        text = v if isinstance(v, str) else repr(v)
        body = neutralise_quotes(clean_text(text, 120, one_line=True))
        return f"{label} «{body}»" if label else f"«{body}»"
    return phrase


_PLAIN_NAME = re.compile(r"[A-Za-z_][\w.:-]{0,79}")


def _name(label: str) -> Phrase:
    """A tool's name: plain when it is an identifier (nothing in it can pass for our
    words), else «quoted» as agent text."""
    quoted = _quoted(label)

    def phrase(v: Any, f: Mapping[str, Any]) -> str | None:
        if isinstance(v, str) and _PLAIN_NAME.fullmatch(v):
            return f"{label} {v}"
        return quoted(v, f)
    return phrase


# fact name -> its words (None: says nothing for this value). Every fact a detector
# declares (watcher.engine.detectors.FACTS_OF) is here: tests/test_reporters.py checks it.
PHRASES: dict[str, Phrase] = {
    # every detector
    "tool": _name("tool"),
    "event_type": _event_type,
    "episode": _episode,
    # repeat
    "repetitions": lambda v, f: None if v == f.get("streak") else (
        _count("repetition", "repetitions")(v, f)),
    "streak": _streak,
    "between": _between,
    "changes_between": _changes,
    # agent-chosen names (programs, tools) with our words for their effects: quoted
    "between_calls": _quoted("between:"),
    "breaks_between": _count("reply between", "replies between"),
    "exact": lambda v, f: "identical calls" if v is True and f.get("period", 1) == 1 else None,
    "similarity": _similarity,
    "results_identical": _results,
    "results_changed": lambda v, f: None,  # results_identical says it
    "distinct_results": _distinct,
    "period": _period,
    "cycle": lambda v, f: None,  # period says it
    "key": _quoted("call"),
    "compared_on": _compared_on,
    "compared": lambda v, f: None,  # compared_on says it
    # threshold
    "window_count": _window_count,
    "window": lambda v, f: None if "window_count" in f else (
        f"window of {clean_text(v, 60, one_line=True)}"),
    "near_identical": _count("near-identical", "near-identical"),
    "unknown_prompts": _count("prompt not seen", "prompts not seen"),
    # sequence
    "steps": _count("step in order", "steps in order"),
    # absence
    "waited_events": _waited,
    "waited_seconds": lambda v, f: f"waited {_secs(v)}" if isinstance(v, int | float) else None,
    "at_end": lambda v, f: None,  # waited_events says it
    # idle
    "kind": _kind,
    "idle_seconds": lambda v, f: f"idle {_secs(v)}",
    "threshold_seconds": lambda v, f: f"limit {_secs(v)}" if v is not None else None,
    "function": lambda v, f: None if v in (None, "") or v == f.get("tool") else (
        _name("in")(v, f)),
    "polls": _count("poll without change", "polls without change"),
    "waiting": lambda v, f: None,  # sentences for a message (stalled-sample's says them)
    "basis": lambda v, f: None,
    "model": lambda v, f: None,  # waiting names it
    "learned": _if_true("judged by the task's own pace"),
    "calls": lambda v, f: (_plural(v, "call of its kind timed", "calls of its kind timed")
                           if isinstance(v, int) and f.get("learned") else None),
    "percentile": lambda v, f: None,  # percentile_seconds says it
    "percentile_seconds": lambda v, f: (
        f"p{_n(f.get('percentile'))} {_secs(v)}" if isinstance(v, int | float) else None),
    "longest_seconds": lambda v, f: (f"longest {_secs(v)}" if isinstance(v, int | float)
                                     else None),
    # sample
    "status": _status,
    "retries": _count("retry", "retries"),
    "error": _quoted("error"),
    "total_tokens": lambda v, f: _plural(v, "token", "tokens") if isinstance(v, int) else None,
    "total_time": lambda v, f: f"ran {_secs(v)}" if isinstance(v, int | float) else None,
    "limit": _limit,
    "message_count": _count("message", "messages"),
    "task_wide": _task_wide,
    "same_error_samples": _count("sample with the same error", "samples with the same error"),
    "errored_samples": _count("errored sample", "errored samples"),
    "samples": _samples,
    "outlier_ratio": _outlier,
    "outlier_field": lambda v, f: None,  # outlier_ratio says it
    "median": lambda v, f: None,  # outlier_ratio says it
    "compared_with": lambda v, f: None,  # outlier_ratio says it
    # unseen
    "value": _quoted("answer"),
    "searched": lambda v, f: (f"not in the {_plural(v, 'earlier output', 'earlier outputs')} "
                              "searched") if isinstance(v, int) else None,
}


@dataclass(frozen=True)
class Phrases:
    """A finding's facts as phrases, and whether any holds text the agent wrote."""

    parts: tuple[str, ...]
    agent: bool

    def text(self) -> str:
        """``2 near-identical, 2 in a window of 12 events``, with a note when some
        «quoted» value is the agent's."""
        out = ", ".join(self.parts)
        return out + (" («…»: agent text, untrusted)" if self.agent and out else "")


def fact_phrases(facts: Mapping[str, Any], limit: int = 10) -> Phrases:
    """The facts in words, in the order the detector set them (see the module)."""
    parts: list[str] = []
    agent = False
    for name, value in facts.items():
        if name in SHOWN_ELSEWHERE:
            continue
        phrase = PHRASES.get(name)
        try:
            said = _unknown(name, value) if phrase is None else phrase(value, facts)
        except (TypeError, ValueError):  # a fact of an unexpected type: said plainly
            said = _unknown(name, value)
        if not said:
            continue
        agent = agent or "«" in said and (name in AGENT_FACTS or phrase is None)
        parts.append(said)
    if len(parts) > limit:
        parts[limit:] = [f"+{len(parts) - limit} more"]
    return Phrases(tuple(parts), agent)


def _unknown(name: str, value: Any) -> str | None:
    label = clean_text(name, 60, one_line=True).replace("_", " ")
    if value is None:
        return None
    if isinstance(value, int | float | bool):
        return f"{label}: {_n(value)}"
    text = value if isinstance(value, str) else repr(value)
    return f"{label}: «{neutralise_quotes(clean_text(text, 120, one_line=True))}»"
