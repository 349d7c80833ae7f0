"""Human-readable live output: finding blocks, notices, and a status area.

On a TTY the status area is redrawn in place at the bottom and every new or
escalated finding is printed above it, so findings scroll up like a log while
the status stays put. Without a TTY (CI logs, pipes) output is plain lines
only: no cursor movement, no colour, a finding is a stable block of a few
lines, and status lines appear at most every ``status_every`` seconds.
All agent-controlled text passes through :mod:`watcher.sanitize` first.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
from typing import TextIO

from watcher.findings import CONFIDENCE_LEVELS, Finding, Notice, confidence_rank
from watcher.handoff import finding_handoff
from watcher.reporters.base import OutputOptions, Reporter
from watcher.reporters.formatting import (
    BADGES,
    fmt_clock,
    fmt_duration,
    fmt_event_times,
    fmt_facts,
    fmt_id,
    fmt_span,
    fmt_time,
    one,
    where,
)
from watcher.sanitize import clean_text, quote_agent_text, visible_text
from watcher.summary import ReportContext, RunSummary, StatusSnapshot

RESET = "\x1b[0m"
STYLES = {
    "high": "\x1b[1;97;41m",  # bold white on red
    "medium": "\x1b[1;30;43m",  # bold black on yellow
    "low": "\x1b[30;46m",  # black on cyan
    "title": "\x1b[1m",
    "dim": "\x1b[2m",
    "notice": "\x1b[35m",
}


def color_wanted(stream: TextIO, color: bool | None) -> bool:
    """Explicit choice wins; otherwise colour only on a TTY and when NO_COLOR is unset."""
    if color is not None:
        return color
    if os.environ.get("NO_COLOR"):
        return False
    return _isatty(stream)


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + ln for ln in text.split("\n"))


def fit_cells(line: str, width: int) -> str:
    """``line`` cut to ``width`` terminal cells, with "…" when cut.

    Cells, not characters: a double-width character (CJK, most emoji) takes two, so a
    line of ``width`` of them wraps onto a second row, and the status area, redrawn by
    moving the cursor up one row per line, left its stale rows on screen.
    """
    from rich.cells import cell_len, set_cell_size

    if cell_len(line) <= width:
        return line
    # (a wide character cut in half becomes a space: drop it with any trailing ones)
    return set_cell_size(line, width - 1).rstrip(" ") + "…"


class TextReporter(Reporter):
    """Finding blocks and status for people watching a terminal or reading a log.

    ``quiet`` drops banners and status (findings and notices still print);
    ``color`` forces colour on/off (default: auto, honouring ``NO_COLOR``);
    ``tty`` forces in-place status on/off (default: ``stream.isatty()``);
    ``min_confidence`` hides lower findings; ``width`` overrides the terminal width.
    """

    name = "text"
    commands = frozenset({"watch"})

    @classmethod
    def open(cls, output: str | None, options: OutputOptions) -> TextReporter:
        """To standard output, or appended to the file ``output`` (closed at ``stop``)."""
        stream = open(output, "a", encoding="utf-8") if output else None  # noqa: SIM115
        rep = cls(stream, quiet=options.quiet, color=options.color,
                  min_confidence=options.min_confidence)
        rep._owned = stream is not None
        return rep

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        quiet: bool = False,
        color: bool | None = None,
        tty: bool | None = None,
        min_confidence: str = "low",
        status_every: float = 60.0,
        max_excerpts: int = 3,
        width: int | None = None,
    ) -> None:
        self.stream: TextIO = stream if stream is not None else sys.stdout
        self.quiet = quiet
        self.color = color_wanted(self.stream, color)
        self.tty = _isatty(self.stream) if tty is None else tty
        self.min_rank = confidence_rank(min_confidence)
        self.status_every = status_every
        self.max_excerpts = max_excerpts
        self.width = width
        self._lock = threading.Lock()
        self._shown: dict[str, Finding] = {}  # last printed snapshot per id
        self._status_drawn = 0  # lines of status area currently on screen
        self._last_status: StatusSnapshot | None = None
        self._last_status_line: tuple[float, object] | None = None
        self._owned = False  # the stream was opened for it (and is closed at stop)

    # --- styling ----------------------------------------------------------------

    def _style(self, key: str, text: str) -> str:
        return f"{STYLES[key]}{text}{RESET}" if self.color else text

    def _badge(self, confidence: str) -> str:
        label = BADGES.get(confidence, one(confidence, 20).upper())
        if self.color and confidence in STYLES:
            return self._style(confidence, f" {label} ")
        return f"[{label}]"

    def _term_width(self) -> int:
        if self.width:
            return self.width
        try:
            return os.get_terminal_size(self.stream.fileno()).columns
        except (AttributeError, ValueError, OSError):
            return shutil.get_terminal_size((100, 24)).columns

    # --- output plumbing ----------------------------------------------------------

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def _clear_status(self) -> str:
        if not self.tty or not self._status_drawn:
            return ""
        n, self._status_drawn = self._status_drawn, 0
        return f"\r\x1b[{n}A\x1b[J"

    def _draw_status(self) -> str:
        if not self.tty or self.quiet or self._last_status is None:
            return ""
        width = max(20, self._term_width() - 1)
        lines = [fit_cells(ln, width) for ln in self.status_lines(self._last_status)]
        self._status_drawn = len(lines)
        head, *rest = lines
        return "".join([self._style("dim", head) + "\n", *(ln + "\n" for ln in rest)])

    def _emit_above_status(self, text: str) -> None:
        """Print ``text`` (ending in newline) above the status area, then redraw it."""
        with self._lock:
            self._write(self._clear_status() + text + self._draw_status())

    # --- rendering ----------------------------------------------------------------

    def status_lines(self, snap: StatusSnapshot) -> list[str]:
        """The status area as plain lines (no colour), first line a headline."""
        counts = ", ".join(f"{snap.findings_by_confidence.get(lvl, 0)} {lvl}"
                           for lvl in reversed(CONFIDENCE_LEVELS))
        ago = snap.since_last_poll
        poll = "no poll yet" if ago is None else f"last poll {fmt_duration(ago)} ago"
        head = f"inspect-watch · {snap.polls} polls · {poll} · findings: {counts}"
        if snap.notices:
            head += f" · notices: {snap.notices}"
        lines = [head]
        for t in snap.tasks:
            of = f" of {t.total}" if t.total is not None else ""
            state = "  finished" if t.finished else ""
            lines.append(
                f"  {visible_text(t.task, 60)} ({visible_text(t.model, 60)})"
                f"  running {t.running}  done {t.done}{of}  errored {t.errored}{state}"
            )
        if not snap.tasks:
            lines.append("  (no tasks yet)")
        return lines

    def finding_block(self, f: Finding, label: str) -> str:
        """A finding as a few stable lines (ends with a newline)."""
        title = one(f.title, 200)
        rule = one(f.rule, 100)
        lines = [f"{self._badge(f.confidence)} {self._style('title', title)}  ({rule}, {label})",
                 f"  {where(f)}",
                 f"  seen: {fmt_span(f)}"]
        if f.summary:
            lines.append(f"  summary: {one(f.summary, 500)}")
        ev = f.evidence
        if ev.timestamps:
            lines.append(f"  events at: {fmt_event_times(ev.timestamps, 5)}")
        if ev.facts:
            lines.append(f"  evidence: {fmt_facts(ev.facts)}")
        for ex in ev.excerpts[: self.max_excerpts]:
            lines.append("  " + quote_agent_text(ex, 300))
        if len(ev.excerpts) > self.max_excerpts:
            lines.append(f"  (+{len(ev.excerpts) - self.max_excerpts} more excerpts)")
        if f.confidence_reason:
            reason = one(f.confidence_reason, 500)
            lines.append(f"  why {f.confidence}: {reason}")
        handoff = clean_text(finding_handoff(f), 3000, max_line_len=500)
        if handoff:
            lines.append("  next: " + _indent(handoff, "        ").lstrip())
        return "\n".join(lines) + "\n"

    # --- lifecycle ------------------------------------------------------------------

    def start(self, context: ReportContext) -> None:
        if self.quiet:
            return
        what = ", ".join(one(s, 200) for s in context.sources) or "?"
        version = f" {context.version}" if context.version else ""
        self._emit_above_status(f"inspect-watch{version}: watching {what} "
                                f"(observes only; changes nothing)\n")

    def finding(self, f: Finding) -> None:
        if confidence_rank(f.confidence) < self.min_rank:
            return
        prev = self._shown.get(f.id)
        if prev is None:
            label = "new" if f.status != "ended" else "ended"
        elif confidence_rank(f.confidence) > confidence_rank(prev.confidence):
            label = "escalated"
        elif f.status == "ended" and prev.status != "ended":
            self._shown[f.id] = f
            sid = fmt_id(f.sample.sample_id)
            self._emit_above_status(
                f"{self._badge(f.confidence)} ended: {one(f.title, 200)}"
                f"  (sample {sid} epoch {f.sample.epoch}, {fmt_span(f)})\n")
            return
        else:
            self._shown[f.id] = f
            return
        self._shown[f.id] = f
        self._emit_above_status(self.finding_block(f, label))

    def notice(self, n: Notice) -> None:
        kind = one(n.kind, 40)
        text = f"notice [{kind}] {one(n.message, 500)}"
        if n.sample is not None:
            s = n.sample
            text += f" (task {fmt_id(s.task)}, sample {fmt_id(s.sample_id)}, epoch {s.epoch})"
        if n.at:
            text = f"{fmt_clock(n.at)} {text}"
        self._emit_above_status(self._style("notice", "! " + text) + "\n")

    def status(self, snapshot: StatusSnapshot) -> None:
        if self.quiet:
            return
        with self._lock:
            self._last_status = snapshot
            if self.tty:
                self._write(self._clear_status() + self._draw_status())
                return
            # Plain output: one line when it changed, at most every status_every seconds.
            line = "status: " + " | ".join(ln.strip() for ln in self.status_lines(snapshot))
            key = (snapshot.tasks, tuple(sorted(snapshot.findings_by_confidence.items())),
                   snapshot.notices)
            last = self._last_status_line
            if last is not None and (snapshot.now - last[0] < self.status_every
                                     or last[1] == key):
                return
            self._last_status_line = (snapshot.now, key)
            self._write(line + "\n")

    def stop(self, summary: RunSummary | None = None) -> None:
        with self._lock:
            text = self._clear_status()
            if self.tty and not self.quiet and self._last_status is not None:
                # Leave the final status on screen as ordinary lines.
                text += "\n".join(self.status_lines(self._last_status)) + "\n"
            if not self.quiet:
                if summary is not None:
                    text += self._summary_text(summary)
                else:
                    text += "inspect-watch: stopped.\n"
            self._write(text)
            if self._owned:
                self.stream.close()

    def _summary_text(self, summary: RunSummary) -> str:
        counts: dict[str, int] = {}
        for f in summary.findings:
            counts[f.confidence] = counts.get(f.confidence, 0) + 1
        by = ", ".join(f"{counts.get(lvl, 0)} {lvl}" for lvl in reversed(CONFIDENCE_LEVELS))
        out = [f"inspect-watch: stopped. findings: {by}; notices: {len(summary.notices)}"]
        if summary.ended_at:
            out[0] += f" (at {fmt_time(summary.ended_at)})"
        for d in summary.log_dirs:
            out.append(f"  logs: {one(d, 500)}")
        return "\n".join(out) + "\n"
