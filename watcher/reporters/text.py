"""Human-readable live output: one line per finding event, notices, and a status area.

Each new, escalated or ended finding is one line (level, rule, count, task, sample and
epoch, the summary), so a fleet's findings can be read as they scroll; ``verbose``
adds a finding's evidence and hand-off under its first line, once (``report`` and
``top`` show them too). On a TTY the status area is redrawn in place at the bottom and
the lines print above it; the area puts the findings count first, so a narrow
terminal cuts the task names, not the number that matters. Without a TTY (CI logs,
pipes) output is plain lines only: no cursor movement, no colour, and status lines
appear at most every ``status_every`` seconds. All agent-controlled text passes
through :mod:`watcher.sanitize` first.

Why hand-written ANSI and not ``rich`` (which inspect-ai installs, and whose
``rich.cells`` this module uses for cell widths): the whole of the styling is seven
SGR codes (:data:`STYLES`) and the status area two sequences (up N rows, erase below),
written from the one routing thread; ``rich.live.Live`` would own the terminal instead
(a refresh thread, stdout and stderr redirected) while finding lines must stay in the
scrollback. The bytes are pinned by tests/golden/text_tty.txt and text_plain.txt, which
rich's rendering (its wrapping, highlighting and style codes, varying with the rich
version inspect-ai pins) would change. A ``rich.Console`` interprets markup and
highlights text unless told not to on every call: one forgotten ``markup=False`` would
put agent text in charge of the terminal. And ``import rich.console`` costs about
200 ms of start-up (measured on the 2-core development machine; ``rich.cells`` 40 ms),
paid by every ``--once`` run in CI.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
from typing import TextIO

from watcher.files import open_append
from watcher.findings import CONFIDENCE_LEVELS, Action, Finding, Notice, confidence_rank
from watcher.handoff import finding_handoff
from watcher.reporters.base import OutputOptions, Reporter
from watcher.reporters.facts import fact_phrases
from watcher.reporters.formatting import (
    BADGES,
    action_head,
    action_target,
    fmt_clock,
    fmt_duration,
    fmt_event_times,
    fmt_id,
    fmt_span,
    fmt_spend,
    fmt_time,
    one,
    where,
)
from watcher.sanitize import clean_text, quote_agent_text, visible_text
from watcher.summary import (
    ReportContext,
    RunSummary,
    StatusSnapshot,
    TaskStatus,
    actions_of,
    loop_spend,
)

RESET = "\x1b[0m"
STYLES = {
    "high": "\x1b[1;97;41m",  # bold white on red
    "medium": "\x1b[1;30;43m",  # bold black on yellow
    "low": "\x1b[30;46m",  # black on cyan
    "title": "\x1b[1m",
    "dim": "\x1b[2m",
    "notice": "\x1b[35m",
    "action": "\x1b[1;34m",  # bold blue
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


# the status area shows at most this many task lines (the busiest first); the rest are
# summed on one line, so a fleet of tasks does not push the findings off the screen
MAX_TASK_LINES = 5


def fit_segments(segments: list[str], width: int, sep: str = " · ") -> str:
    """As many of ``segments`` (most important first) as fit ``width`` cells whole; the
    first is always kept (cut if it must be)."""
    from rich.cells import cell_len

    out = segments[0]
    for seg in segments[1:]:
        if cell_len(out + sep + seg) <= width:
            out += sep + seg
    return fit_cells(out, width)


def findings_words(counts: dict[str, int]) -> str:
    return ", ".join(f"{counts.get(lvl, 0)} {lvl}" for lvl in reversed(CONFIDENCE_LEVELS))


def where_short(f: Finding) -> str:
    """``task/sample/epoch`` (``demo/7/1``), and the attempt past the first; an id that
    holds a ``/`` (or anything odd) is «quoted», so the three parts stay apart."""
    s = f.sample

    def part(v: str) -> str:
        shown = fmt_id(v)
        return f"«{shown}»" if "/" in shown and not shown.startswith("«") else shown

    out = f"{part(s.task)}/{part(s.sample_id)}/{s.epoch}"
    return out + (f" (attempt {s.attempt})" if s.attempt > 1 else "")


class TextReporter(Reporter):
    """Finding lines and status for people watching a terminal or reading a log.

    ``quiet`` drops banners and status (findings and notices still print);
    ``verbose`` adds each finding's evidence and hand-off, once, under its first line;
    ``color`` forces colour on/off (default: auto, honouring ``NO_COLOR``);
    ``tty`` forces in-place status on/off (default: ``stream.isatty()``);
    ``min_confidence`` hides lower findings; ``width`` overrides the terminal width.
    """

    name = "text"
    commands = frozenset({"watch"})

    @classmethod
    def open(cls, output: str | None, options: OutputOptions) -> TextReporter:
        """To standard output, or appended to the file ``output`` (closed at ``stop``)."""
        # (a FIFO nobody reads is said at once, not waited for: watcher.files.open_append)
        stream = os.fdopen(open_append(output), "a", encoding="utf-8") if output else None
        rep = cls(stream, quiet=options.quiet, color=options.color,
                  min_confidence=options.min_confidence, verbose=options.verbose)
        rep._owned = stream is not None
        return rep

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        quiet: bool = False,
        verbose: bool = False,
        color: bool | None = None,
        tty: bool | None = None,
        min_confidence: str = "low",
        status_every: float = 60.0,
        max_excerpts: int = 3,
        width: int | None = None,
    ) -> None:
        self.stream: TextIO = stream if stream is not None else sys.stdout
        self.quiet = quiet
        self.verbose = verbose
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
        lines = self.status_lines(self._last_status, width)
        self._status_drawn = len(lines)
        head, *rest = lines
        return "".join([self._style("dim", head) + "\n", *(ln + "\n" for ln in rest)])

    def _emit_above_status(self, text: str) -> None:
        """Print ``text`` (ending in newline) above the status area, then redraw it."""
        with self._lock:
            self._write(self._clear_status() + text + self._draw_status())

    # --- rendering ----------------------------------------------------------------

    def status_lines(self, snap: StatusSnapshot, width: int | None = None) -> list[str]:
        """The status area as plain lines (no colour), first line a headline; each fits
        ``width`` cells when given, the findings count first so it is never cut."""
        fit = width or 10_000
        running = sum(t.running for t in snap.tasks)
        done = sum(t.done for t in snap.tasks)
        errored = sum(t.errored for t in snap.tasks)
        totals = [t.total for t in snap.tasks]
        of = f" of {sum(t or 0 for t in totals)}" if totals and None not in totals else ""
        ago = snap.since_last_poll
        if ago is None:
            poll = "first poll under way" if snap.tasks else "no eval yet"
        else:
            poll = f"{snap.polls} polls, last {fmt_duration(ago)} ago"
        segments = [f"inspect-watch · findings: {findings_words(snap.findings_by_confidence)}",
                    f"{running} running, {done} done{of}"
                    + (f", {errored} errored" if errored else ""), poll]
        if snap.notices:
            segments.append(f"notices: {snap.notices}")
        lines = [fit_segments(segments, fit)]
        if not snap.tasks:
            return [*lines, fit_cells("  (no tasks yet)", fit)]
        # the busiest tasks first: unfinished, most findings, most running
        ranked = sorted(snap.tasks, key=lambda t: (
            t.finished, -sum(t.findings_by_confidence.values()), -t.running))
        shown = ranked if len(ranked) <= MAX_TASK_LINES else ranked[:MAX_TASK_LINES - 1]
        lines += [fit_cells(self._task_line(t), fit) for t in shown]
        rest = ranked[len(shown):]
        if rest:
            lines.append(fit_cells(
                f"  … {len(rest)} more tasks: {sum(t.running for t in rest)} running, "
                f"{sum(t.done for t in rest)} done, {sum(t.finished for t in rest)} finished",
                fit))
        return lines

    @staticmethod
    def _task_line(t: TaskStatus) -> str:
        """Counts first, the names last: a narrow terminal cuts the names."""
        of = f" of {t.total}" if t.total is not None else ""
        parts = [f"{t.running} running", f"{t.done} done{of}"]
        if t.errored:
            parts.append(f"{t.errored} errored")
        found = [f"{n} {lvl}" for lvl in reversed(CONFIDENCE_LEVELS)
                 if (n := t.findings_by_confidence.get(lvl, 0))]
        if found:
            parts.append(", ".join(found))
        if t.finished:
            parts.append("finished")
        return f"  {'  '.join(parts)}  {visible_text(t.task, 60)} ({visible_text(t.model, 60)})"

    def finding_line(self, f: Finding, label: str, prev: Finding | None = None) -> str:
        """One finding event as one line (no newline): when, level, what changed, rule,
        count, where, and the summary (or, for an end, its title and how long it lasted).
        On a TTY it is cut to the terminal's width: the count and where come first."""
        badge = BADGES.get(f.confidence, one(f.confidence, 20).upper())
        plain_head = f"{fmt_clock(f.last_seen)} [{badge}]"
        what = f"{one(f.rule, 100)} {f.count}× {where_short(f)}"
        if label == "ended":
            span = fmt_duration(f.last_seen - f.first_seen)
            rest = f" ended {what}: {one(f.title, 200)}, over {span}"
        elif label == "escalated":
            was = f" from {one(prev.confidence, 20)}" if prev is not None else ""
            rest = f" escalated{was} {what}: {one(f.summary or f.title, 300)}"
        else:
            rest = f" {what}: {one(f.summary or f.title, 300)}"
        if self.tty:  # cut as plain text, then styled: no escape sequence is cut in two
            rest = fit_cells(plain_head + rest, max(20, self._term_width() - 1))[
                len(plain_head):]
        return f"{fmt_clock(f.last_seen)} {self._badge(f.confidence)}{rest}"

    def finding_block(self, f: Finding, label: str) -> str:
        """A finding's evidence and hand-off, indented (ends with a newline): with
        ``verbose``, once per finding, under its first line."""
        lines = [f"  {self._style('title', one(f.title, 200))} ({one(f.rule, 100)}, {label})",
                 f"  {where(f)}",
                 f"  seen: {fmt_span(f)}"]
        ev = f.evidence
        if ev.timestamps:
            lines.append(f"  events at: {fmt_event_times(ev.timestamps, 5)}")
        said = fact_phrases(ev.facts).text()
        if said:
            lines.append(f"  evidence: {said}")
        spent = fmt_spend(ev.facts)
        if spent:
            lines.append(f"  spent since {spent}")
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
        more = "" if self.verbose else (
            "; --verbose shows each finding's evidence and what to do")
        mode = {"act": "--act: acts on findings as its policy says; every action is "
                       "reported",
                "dry-run": "--act --dry-run: says what it would do; changes nothing"}.get(
                    context.acting, "observes only; changes nothing")
        if context.acting and context.sources == ("live",):
            mode += (f"; only {one(context.scope, 300)}" if context.scope else
                     "; on every eval of yours on this host, whoever started it (narrow it "
                     "with a TASK or --evals-from DIR)")
        self._emit_above_status(f"inspect-watch{version}: watching {what} ({mode}{more})\n")

    def finding(self, f: Finding) -> None:
        if confidence_rank(f.confidence) < self.min_rank:
            return
        prev = self._shown.get(f.id)
        if prev is None:
            label = "new" if f.status != "ended" else "ended"
        elif confidence_rank(f.confidence) > confidence_rank(prev.confidence):
            label = "escalated"
        elif f.status == "ended" and prev.status != "ended":
            label = "ended"
        else:
            self._shown[f.id] = f
            return
        self._shown[f.id] = f
        text = self.finding_line(f, label, prev) + "\n"
        if self.verbose and prev is None:  # evidence and hand-off once per finding
            text += self.finding_block(f, label)
        self._emit_above_status(text)

    def notice(self, n: Notice) -> None:
        if isinstance(n, Action):
            self._emit_above_status(self.action_line(n) + "\n")
            return
        kind = one(n.kind, 40)
        text = f"notice [{kind}] {one(n.message, 500)}"
        if n.sample is not None:
            s = n.sample
            text += f" (task {fmt_id(s.task)}, sample {fmt_id(s.sample_id)}, epoch {s.epoch})"
        if n.at:
            text = f"{fmt_clock(n.at)} {text}"
        self._emit_above_status(self._style("notice", "! " + text) + "\n")

    def action_line(self, a: Action) -> str:
        """One action record: what was asked of the server, and what it answered."""
        text = f"action {one(action_head(a), 200)}: {one(a.message, 600)}"
        target = action_target(a)
        if target:
            text += f" ({target})"
        if a.at:
            text = f"{fmt_clock(a.at)} {text}"
        return self._style("action", "» " + text)

    @property
    def takes_status(self) -> bool:  # type: ignore[override]
        return not self.quiet

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
            key = (tuple(t.counts for t in snapshot.tasks),
                   tuple(sorted(snapshot.findings_by_confidence.items())), snapshot.notices)
            last = self._last_status_line
            if last is not None and (snapshot.now - last[0] < self.status_every
                                     or last[1] == key):
                return
            self._last_status_line = (snapshot.now, key)
            self._write(line + "\n")

    def stop(self, summary: RunSummary | None = None) -> None:
        with self._lock:
            text = self._clear_status()
            if not self.quiet and self._last_status is not None:
                # The final status (every task as it ended): on a TTY left on screen as
                # ordinary lines; in a log, one last status line whatever the throttle
                lines = self.status_lines(self._last_status)
                text += ("\n".join(lines) if self.tty else
                         "status: " + " | ".join(ln.strip() for ln in lines)) + "\n"
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
        actions = actions_of(summary.notices)
        notices = len(summary.notices) - len(actions)
        out = [f"inspect-watch: stopped. findings: {by}; notices: {notices}"]
        if actions:
            outcomes: dict[str, int] = {}
            for a in actions:
                outcomes[a.outcome] = outcomes.get(a.outcome, 0) + 1
            out[0] += "; actions: " + ", ".join(
                f"{n} {k.replace('_', '-')}" for k, n in sorted(outcomes.items()))
        if summary.ended_at:
            out[0] += f" (at {fmt_time(summary.ended_at)})"
        for spend in loop_spend(summary):
            share = f" ({spend.share:.0%} of the task's {spend.tokens_total:,})" if (
                spend.share is not None and spend.tokens_total) else ""
            out.append(f"  {one(spend.task, 100)}: {spend.tokens_after:,} tokens spent after "
                       f"the first high loop finding in {spend.samples} sample(s){share}")
        for d in summary.log_dirs:
            out.append(f"  logs: {one(d, 500)}")
        if summary.findings and not self.verbose:
            out.append("  (evidence and what to do: watch --verbose, inspect-watch report, "
                       "or inspect-watch top)")
        return "\n".join(out) + "\n"
