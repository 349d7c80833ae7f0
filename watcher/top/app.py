"""The screens of ``inspect-watch top`` (Textual).

The main screen is the fleet: a status line, a table of every task the watch reads
(model, samples done/running/total, tokens, the oldest idle sample, findings by
level) and the findings pane, newest first. Enter on a task drills in to its samples
(status, attempt, idle time, the last event and whether it is in flight, tokens, the
worst finding), sortable and filterable; Enter on a finding shows all of it (evidence,
reason, hand-off); ``e`` a sample's recent events; ``y`` copies the hand-off's
command. Keys are in the footer and in docs/top.md.

Every string on screen that came from an eval (names, ids, summaries, agent text)
passes through :mod:`watcher.sanitize` and is handed to Textual as a
:class:`rich.text.Text`, never as markup: ``[red]`` in a task name is shown, not
obeyed, and agent text is «quoted» and labelled untrusted.

``x`` cancels the selected finding's sample through its eval's control channel
(:mod:`watcher.top.actions`, :attr:`TopApp.actions`), only after a confirmation that names
the target and shows the server's own dry run; over finished logs it says there is
nothing to act on.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Protocol

from rich.cells import cell_len
from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.dom import NoScreen
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Footer, Static

from watcher.findings import CONFIDENCE_LEVELS, Finding, confidence_rank
from watcher.reporters.formatting import BADGES, fmt_clock, fmt_duration, one
from watcher.reporters.text import TextReporter, fit_segments
from watcher.sanitize import clean_text, neutralise_quotes, printable_command, visible_text
from watcher.top.model import (
    Filters,
    FindingRow,
    FleetRow,
    SampleRow,
    TopSink,
    View,
    finding_rows,
    fleet_rows,
    handoff_command,
    sample_rows,
)

LEVEL_STYLES = {"high": "bold white on red", "medium": "bold black on yellow",
                "low": "black on cyan"}
AGENT_STYLE = "italic"
NO_ACTIONS = "a finished run read from its logs: nothing to act on"
FINDINGS_TITLE = "findings, newest first (Enter: all of it)"
NO_EVALS = {"live": "no running eval yet: waiting for one (evals launched later are followed)",
            "logs": "no Inspect logs read yet"}
# the screen looks for news this often; it redraws only when the watch sent some
REFRESH_SECONDS = 0.25
# below NARROW columns, tables drop their less important columns; some need WIDE
NARROW = 80
WIDE = 100


def cell(value: object, style: str = "") -> Text:
    """A table cell: plain text (never markup), one line."""
    return Text(str(value), style=style, no_wrap=True, overflow="ellipsis", end="")


def level_cell(confidence: str | None) -> Text:
    if confidence is None:
        return cell("")
    return cell(f" {BADGES.get(confidence, one(confidence, 10).upper())} ",
                LEVEL_STYLES.get(confidence, ""))


def ident(value: object, limit: int = 60) -> str:
    """An id or name as every character of it looks (controls shown, not obeyed)."""
    return visible_text(value, limit)


def where(f: Finding) -> str:
    """``sample/epoch task``: the sample first, so a narrow column cuts the task."""
    s = f.sample
    return f"{ident(s.sample_id, 40)}/{s.epoch} {ident(s.task, 40)}"


def idle_text(seconds: float | None) -> str:
    return "" if seconds is None else fmt_duration(seconds)


def age_text(seconds: float) -> str:
    """``40s``, ``12m``, ``5h``, ``3d``: a column five cells wide."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def tokens_text(n: int | None) -> str:
    if n is None:
        return ""
    return f"{n / 1000:.1f}k" if n >= 10_000 else str(n)


class Actions(Protocol):
    """What the watchdog (issue 20) will give the screen: the actions a finding's
    sample allows, each confirmed by the person with its target named."""

    def available(self, finding: Finding) -> Sequence[str]: ...
    def target(self, finding: Finding, action: str) -> str: ...
    def run(self, finding: Finding, action: str) -> str: ...


# -- tables ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    width: int | None  # None: what the other columns leave
    narrow: bool = True  # kept below NARROW columns
    wide: bool = False  # shown only from WIDE columns on


# a width of None takes what the others leave (at least MIN_FLEX cells)
FLEET_COLUMNS = (Column("task", "task", None), Column("model", "model", 12, narrow=False),
                 Column("samples", "done/run/n", 10), Column("tokens", "tokens", 6, False),
                 Column("idle", "oldest idle", 11), Column("findings", "H/M/L", 8))
SAMPLE_COLUMNS = (Column("sample", "sample", None),
                  Column("task", "task", 14, narrow=False, wide=True),
                  Column("status", "status", 7), Column("attempt", "try", 3, narrow=False),
                  Column("idle", "idle", 6), Column("last", "last event", 11),
                  Column("tokens", "tokens", 6, narrow=False), Column("worst", "worst", 14))
FINDING_COLUMNS = (Column("level", "level", 8), Column("title", "finding", None),
                   Column("sample", "sample/epoch task", 22), Column("count", "n", 4),
                   Column("age", "age", 4, narrow=False))
MIN_FLEX = 8
# the listing's sample statuses, in the status column's seven cells
STATUS_WORDS = {"completed": "done", "cancelled": "cancel", "running": "running",
                "error": "error"}


class Table:
    """Keeps a :class:`DataTable` in step with a list of rows, touching only what
    changed: a redraw of 300 samples whose idle times moved updates those cells, and
    the cursor stays on the row it was on."""

    def __init__(self, widget: DataTable[Text], columns: Sequence[Column]) -> None:
        self.widget = widget
        self.all_columns = tuple(columns)
        self.columns: tuple[Column, ...] = ()
        self.width = 0
        self.keys: list[str] = []
        self.cells: dict[str, tuple[Text, ...]] = {}

    def set_width(self, width: int) -> None:
        wanted = tuple(c for c in self.all_columns
                       if (width >= NARROW or c.narrow) and (width >= WIDE or not c.wide))
        if wanted == self.columns and width == self.width:
            return
        self.width = width
        self.columns = wanted
        self.widget.clear(columns=True)
        # each column is padded by a cell on both sides; the scroll bar takes two
        fixed = sum(c.width or 0 for c in wanted) + 2 * len(wanted) + 2
        flex = [c for c in wanted if c.width is None]
        share = max(MIN_FLEX, (width - fixed) // len(flex)) if flex else 0
        for c in wanted:
            self.widget.add_column(c.label, key=c.key, width=c.width or share)
        self.keys, self.cells = [], {}

    def fill(self, rows: Sequence[tuple[str, dict[str, Text]]]) -> None:
        keys = [k for k, _ in rows]
        shown = {k: tuple(values[c.key] for c in self.columns) for k, values in rows}
        w = self.widget
        if keys == self.keys:
            for k in keys:
                old, new = self.cells.get(k), shown[k]
                if old == new:
                    continue
                for c, before, after in zip(self.columns, old or (), new, strict=False):
                    if before != after:
                        w.update_cell(k, c.key, after)
            self.cells = shown
            return
        current = self.current()
        w.clear()
        for k in keys:
            w.add_row(*shown[k], key=k)
        self.keys, self.cells = keys, shown
        if current in shown:
            w.move_cursor(row=keys.index(current), animate=False)

    def current(self) -> str | None:
        """The key of the row under the cursor."""
        w = self.widget
        if not self.keys or w.cursor_row < 0 or w.cursor_row >= len(self.keys):
            return None
        return self.keys[w.cursor_row]


def fleet_cells(r: FleetRow) -> dict[str, Text]:
    of = "?" if r.total is None else str(r.total)
    levels = "/".join(str(r.by_level.get(lvl, 0)) for lvl in reversed(CONFIDENCE_LEVELS))
    style = LEVEL_STYLES["high"] if r.by_level.get("high") else ""
    idle = f"{idle_text(r.idle)} {ident(r.idle_sample or '', 30)}" if r.idle is not None else ""
    name = ident(r.task) + (" ✓" if r.finished else "")
    return {"task": cell(name), "model": cell(ident(r.model)),
            "samples": cell(f"{r.done}/{r.running}/{of}" + (f" {r.errored}E" if r.errored else "")),
            "tokens": cell(tokens_text(r.tokens)), "idle": cell(idle),
            "findings": cell(levels, "bold" if style else "")}


def sample_cells(r: SampleRow) -> dict[str, Text]:
    last = r.last_event + (" …" if r.in_flight else "")
    worst = (f"{BADGES.get(r.worst.confidence, '?')} {one(r.worst.rule, 60)}"
             + (f" +{r.findings - 1}" if r.findings > 1 else "")) if r.worst else ""
    return {"sample": cell(f"{ident(r.sample_id, 40)}/{r.epoch}"), "task": cell(ident(r.task)),
            "status": cell(STATUS_WORDS.get(r.status, one(r.status, 20))),
            "attempt": cell(r.attempt),
            "idle": cell(idle_text(r.idle)), "last": cell(ident(last, 40)),
            "tokens": cell(tokens_text(r.tokens)),
            "worst": cell(worst, LEVEL_STYLES.get(r.worst.confidence, "") if r.worst else "")}


def finding_cells(r: FindingRow) -> dict[str, Text]:
    f = r.finding
    title = one(f.title, 120) + (" (ended)" if f.status == "ended" else "")
    return {"level": level_cell(f.confidence), "title": cell(title), "sample": cell(where(f)),
            "count": cell(f.count), "age": cell(age_text(r.age))}


# -- the whole finding, a sample's events ---------------------------------------------------


def finding_text(f: Finding) -> Text:
    """All of a finding, as the text reporter's --verbose block writes it (one place for
    what a finding says), agent text styled apart, and what ``y`` copies."""
    block = TextReporter(io.StringIO(), color=False, quiet=True).finding_block(f, f.status)
    out = Text(no_wrap=False, end="")
    out.append(f" {BADGES.get(f.confidence, '?')} ", LEVEL_STYLES.get(f.confidence, ""))
    out.append(f" {one(f.summary or f.title, 500)}\n")
    command = handoff_command(f)  # first: the screen may be shorter than the finding
    out.append(f"y copies: {command}" if command else "nothing to copy for this finding",
               "bold")
    out.append("\nx: cancel this sample (confirmed first; live evals only)\n\n", "dim")
    for line in block.splitlines():
        agent = "agent text (untrusted)" in line or "«" in line and "evidence:" in line
        out.append(line + "\n", AGENT_STYLE if agent else "")
    return out


def hang(text: Text, width: int, console: Any) -> Text:
    """``text`` wrapped to ``width``, every continuation row starting ``    ┊ ``: a row
    wrapped from agent text must not start where our own lines start (a fake ``HIGH``
    line would), so no row of it reaches the left edge. Returned unwrappable (the rows
    already fit)."""
    out = Text(no_wrap=True, overflow="crop", end="")
    for line in text.split("\n"):
        for i, piece in enumerate(line.wrap(console, max(10, width - 10))):
            if i:
                out.append("    ┊ ", "dim")
            out.append_text(piece)
            out.append("\n")
    return out


def _quoted(value: object, limit: int = 160) -> str:
    return "«" + neutralise_quotes(clean_text(value, limit, one_line=True)) + "»"


def event_line(e: dict[str, Any]) -> Text:
    """One recent event: when, what, and the agent's text «quoted» and labelled."""
    ts = e.get("timestamp")
    kind = one(e.get("type") or "?", 20)
    out = Text(no_wrap=True, overflow="ellipsis", end="")
    out.append(f"{fmt_clock(ts) if isinstance(ts, int | float) else '?':9} ")
    head = kind
    if kind == "tool" and e.get("function"):
        head += " " + ident(e["function"], 40)
    elif kind == "model" and e.get("tokens"):
        head += f" {tokens_text(e['tokens'])} tok"
    if e.get("has_error"):
        head += " error"
    out.append(f"{head:18} ", "bold")
    texts = [(name, e[name]) for name in ("arguments", "completion", "result", "error", "data")
             if e.get(name)]
    if texts:
        out.append("agent text (untrusted): ", "dim")
        out.append(" → ".join(_quoted(v) for _, v in texts), AGENT_STYLE)
    return out


class ConfirmScreen(ModalScreen[bool]):
    """``y`` does what the text names; anything else leaves it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes, do it"),
        Binding("n", "answer(False)", "No"),
        Binding("escape", "answer(False)", "No"),
    ]

    def __init__(self, target: str) -> None:
        super().__init__()
        self.target = target

    def compose(self) -> ComposeResult:
        text = Text(no_wrap=False, end="")
        text.append("Act on this sample?\n\n", "bold")
        text.append(self.target)  # plain text: the server's words are data, not markup
        text.append("\n\ny: yes, do it · n or Escape: leave it", "bold")
        yield Static(text, id="confirm")
        yield Footer()

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class FindingScreen(ModalScreen[None]):
    """The whole finding; ``y`` copies its hand-off command."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "Back"),
        Binding("y", "app.copy_handoff", "Copy command"),
        Binding("x", "app.act", "Act"),
    ]

    def __init__(self, finding: Finding) -> None:
        super().__init__()
        self.finding = finding

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="detail"):
            yield Static(Text(""), id="finding-text")
        yield Footer()

    def on_mount(self) -> None:
        self.redraw()

    def on_resize(self, event: events.Resize) -> None:
        self.redraw(event.size.width)  # the app's size is still the old one here

    def redraw(self, width: int | None = None) -> None:
        self.query_one("#finding-text", Static).update(
            hang(finding_text(self.finding), width or self.app.size.width, self.app.console))


class EventsScreen(ModalScreen[None]):
    """A sample's last events as the watch read them, redrawn while open."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,e", "dismiss", "Back")]

    def __init__(self, row: SampleRow, read: Callable[[str, str, int], list[dict[str, Any]]]
                 ) -> None:
        super().__init__()
        self.row = row
        self.read = read
        self._shown: list[dict[str, Any]] | None = None
        self._width: int | None = None

    def compose(self) -> ComposeResult:
        r = self.row
        title = Text(f"recent events of {ident(r.task)}/{ident(r.sample_id)}/{r.epoch}, "
                     "oldest first; «…» is agent text (untrusted), shown cleaned", "bold")
        yield Static(title, id="events-title")
        with VerticalScroll(id="events"):
            yield Static(Text(""), id="events-text")
        yield Footer()

    def on_mount(self) -> None:
        self.redraw()
        self.set_interval(1.0, self.redraw)

    def on_resize(self, event: events.Resize) -> None:
        self._width = event.size.width  # the app's size is still the old one here
        self.redraw(force=True)

    def redraw(self, force: bool = False) -> None:
        recent = self.read(self.row.eval_id, self.row.sample_id, self.row.epoch)
        if recent == self._shown and not force:
            return
        self._shown = recent
        text = Text(end="")
        for e in recent:
            text.append_text(event_line(e))
            text.append("\n")
        if not recent:
            text.append("no events read yet (the watch keeps each sample's last ones)")
        self.query_one("#events-text", Static).update(
            hang(text, self._width or self.app.size.width, self.app.console))


class SamplesScreen(Screen[None]):
    """Drilled in: every sample of one task (or of all), and their findings."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.up", "Back"),
        Binding("e", "app.events", "Events"),
        Binding("s", "app.sort", "Sort"),
        Binding("t", "app.next_task", "Task"),
        Binding("c", "app.confidence", "Confidence"),
        Binding("f", "app.only_findings", "Findings only"),
        Binding("y", "app.copy_handoff", "Copy"),
        Binding("x", "app.act", "Act"),
    ]

    def compose(self) -> ComposeResult:
        yield Static(Text(""), id="status", classes="status")
        yield Static(Text(""), id="filters", classes="filters")
        yield DataTable(id="samples", cursor_type="row", zebra_stripes=True)
        yield Static(Text(FINDINGS_TITLE), classes="pane-title")
        yield DataTable(id="task-findings", cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        app = self.app
        if isinstance(app, TopApp):
            app.samples_mounted(self)


class TopApp(App[None]):
    """``inspect-watch top``; see the module. ``read_events`` reads a sample's recent
    events (``WatchHandle.recent_events``); ``actions`` is the watchdog's (none yet)."""

    TITLE = "inspect-watch top"
    CSS = """
    Screen { layout: vertical; }
    .status { height: 1; background: $panel; color: $text; }
    .filters { height: 1; color: $text-muted; }
    .pane-title { height: 1; color: $text-muted; }
    #fleet { height: auto; max-height: 40%; }
    #findings { height: 1fr; }
    #samples { height: 1fr; }
    #task-findings { height: 35%; }
    #detail, #events { height: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
        Binding("a", "all_samples", "All samples"),
        Binding("c", "confidence", "Confidence"),
        Binding("t", "next_task", "Task"),
        Binding("y", "copy_handoff", "Copy"),
        Binding("x", "act", "Act"),
    ]

    def __init__(self, sink: TopSink, *, mode: str = "live",
                 read_events: Callable[[str, str, int], list[dict[str, Any]]] | None = None,
                 filters: Filters | None = None, actions: Actions | None = None,
                 trace: str | None = None) -> None:
        super().__init__()
        self.sink = sink
        self.mode = mode  # "live" or "logs"
        self.read_events = read_events or (lambda eval_id, sample_id, epoch: [])
        self.filters = filters or Filters()
        self.actions = actions
        self.view: View = sink.view()
        self.stop_requested = False  # set from a signal handler; the next tick exits
        self._drawn = -1
        self._tables: dict[str, Table] = {}
        self._trace = trace or os.environ.get("INSPECT_WATCH_TOP_TRACE")
        self._traced: set[str] = set()
        self._width: int | None = None

    # -- layout ---------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(Text(""), id="status", classes="status")
        yield DataTable(id="fleet", cursor_type="row")
        yield Static(Text(FINDINGS_TITLE), classes="pane-title", id="findings-title")
        yield DataTable(id="findings", cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        self._bind_tables(self.screen)
        self.query_one("#fleet", DataTable).focus()
        self.redraw(force=True)
        self.set_interval(REFRESH_SECONDS, self.tick)

    def _bind_tables(self, screen: Screen[Any]) -> None:
        width = self.cells_wide()
        for table_id, columns in (("fleet", FLEET_COLUMNS), ("findings", FINDING_COLUMNS),
                                  ("samples", SAMPLE_COLUMNS),
                                  ("task-findings", FINDING_COLUMNS)):
            found = screen.query(f"#{table_id}")
            if found:
                table = Table(found.first(DataTable), columns)
                table.set_width(width)
                self._tables[table_id] = table

    def cells_wide(self) -> int:
        """The terminal's width: the last Resize event's (``self.size`` is still the old
        one while it is handled), else the app's."""
        return self._width or self.size.width

    def on_resize(self, event: events.Resize) -> None:
        self._width = event.size.width
        for table in self._tables.values():
            table.set_width(self._width)
        self.redraw(force=True)

    # -- drawing ----------------------------------------------------------------------------

    def tick(self) -> None:
        if self.stop_requested:
            self.exit()
            return
        self.redraw()

    def redraw(self, force: bool = False) -> None:
        if not force and self.sink.version == self._drawn:
            return
        view = self.view = self.sink.view()
        self._drawn = view.version
        now = time.time()
        for status in self.screen.query(".status"):
            if isinstance(status, Static):
                status.update(self.status_text(view, now))
        for filters in self.screen.query(".filters"):
            if isinstance(filters, Static):
                tasks = view.snapshot.tasks if view.snapshot else ()
                filters.update(Text(self.filters.describe(tasks)))
        tables = self._tables
        for title in self.screen.query("#findings-title"):
            if isinstance(title, Static):
                empty = view.snapshot is None or not view.snapshot.tasks
                title.update(Text(NO_EVALS.get(self.mode, "") if empty else FINDINGS_TITLE))
        if "fleet" in tables and self._showing(tables["fleet"]):
            tables["fleet"].fill([(r.key, fleet_cells(r)) for r in fleet_rows(view, self.filters)])
        main = replace(self.filters, eval_id=None) if self.screen_is_main() else self.filters
        for table_id in ("findings", "task-findings"):
            table = tables.get(table_id)
            if table is not None and self._showing(table):
                table.fill([(r.key, finding_cells(r))
                            for r in finding_rows(view, main, now)])
        table = tables.get("samples")
        if table is not None and self._showing(table):
            table.fill([(r.key, sample_cells(r)) for r in sample_rows(view, self.filters)])
        if self._trace:
            self._write_trace(view, now)

    def _showing(self, table: Table) -> bool:
        """Whether ``table`` is on the screen in front (a popped screen's are on none)."""
        try:
            return table.widget.screen is self.screen
        except NoScreen:
            return False

    def screen_is_main(self) -> bool:
        return not isinstance(self.screen, SamplesScreen)

    def status_text(self, view: View, now: float) -> Text:
        snap = view.snapshot
        where = "logs" if self.mode == "logs" else "live"
        if snap is None:
            return Text(f"inspect-watch top · {where} · starting")
        levels = {lvl: 0 for lvl in CONFIDENCE_LEVELS}
        floor = self.filters.min_confidence
        for f in view.findings:
            if confidence_rank(f.confidence) >= confidence_rank(floor):
                levels[f.confidence] += 1
        counts = ", ".join(f"{levels[lvl]} {lvl}" for lvl in reversed(CONFIDENCE_LEVELS))
        running = sum(t.running for t in snap.tasks)
        done = sum(t.done for t in snap.tasks)
        if view.ended:
            state = "read to the end" if self.mode == "logs" else "watch ended"
        elif snap.tasks:
            ago = snap.since_last_poll
            state = "first poll under way" if ago is None else f"polled {fmt_duration(ago)} ago"
        else:
            state = "waiting for evals"
        width = max(20, self.cells_wide())
        found = f"findings ≥{floor}: {counts}"
        # the count of findings whole, whatever is left out around it
        head = next((h for h in (f"inspect-watch top · {where} · {found}",
                                 f"inspect-watch top · {found}") if cell_len(h) <= width), found)
        segments = [head, state, f"{len(snap.tasks)} tasks, {running} running, {done} done"]
        return Text(fit_segments(segments, width), no_wrap=True)

    def _write_trace(self, view: View, now: float) -> None:
        """For benchmarks/bench_top.py: when each finding was first drawn, beside when
        the sink received it (``INSPECT_WATCH_TOP_TRACE=FILE``)."""
        new = [f for f in view.findings if f.id not in self._traced]
        if not new or self._trace is None:
            return
        drawn = time.time()
        with open(self._trace, "a", encoding="utf-8") as out:
            for f in new:
                self._traced.add(f.id)
                out.write(f"{f.id} {view.received.get(f.id, now):.3f} {drawn:.3f}\n")

    # -- choosing -------------------------------------------------------------------------------

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        table_id = event.data_table.id
        key = event.row_key.value
        if table_id == "fleet" and key is not None:
            self.drill_in(str(key))
        elif table_id in ("findings", "task-findings") and key is not None:
            f = self._finding(str(key))
            if f is not None:
                self.push_screen(FindingScreen(f))
        elif table_id == "samples":
            self.action_events()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        by_column = {"sample": "sample", "idle": "idle", "tokens": "tokens", "worst": "worst"}
        sort = by_column.get(str(event.column_key.value))
        if event.data_table.id == "samples" and sort is not None:
            self.filters = replace(self.filters, sort=sort)
            self.redraw(force=True)

    def drill_in(self, eval_id: str | None) -> None:
        self.filters = replace(self.filters, eval_id=eval_id)
        self.push_screen(SamplesScreen())

    def samples_mounted(self, screen: SamplesScreen) -> None:
        self._bind_tables(screen)
        screen.query_one("#samples", DataTable).focus()
        self.redraw(force=True)

    def _back_to_main(self) -> None:
        self.filters = replace(self.filters, eval_id=None)
        for key in ("samples", "task-findings"):
            self._tables.pop(key, None)
        self.redraw(force=True)

    def _finding(self, finding_id: str) -> Finding | None:
        return next((f for f in self.view.findings if f.id == finding_id), None)

    def selected_finding(self) -> Finding | None:
        """The finding the cursor is on: a findings row, or a sample's worst finding."""
        if isinstance(self.screen, FindingScreen):
            return self.screen.finding
        focused = self.focused
        for table_id in ("findings", "task-findings", "samples"):
            table = self._tables.get(table_id)
            if table is None or table.widget is not focused:
                continue
            key = table.current()
            if key is None:
                return None
            if table_id == "samples":
                row = self.selected_sample()
                return row.worst if row else None
            return self._finding(key)
        return None

    def selected_sample(self) -> SampleRow | None:
        table = self._tables.get("samples")
        if table is None:
            return None
        key = table.current()
        rows = {r.key: r for r in sample_rows(self.view, self.filters)}
        return rows.get(key) if key is not None else None

    # -- actions ------------------------------------------------------------------------------

    def action_up(self) -> None:
        if isinstance(self.screen, SamplesScreen):
            # pop_screen drops a push_screen callback without calling it: forget the
            # drilled-in tables here, or the next redraw reaches a removed widget
            self.pop_screen()
            self._back_to_main()

    def action_all_samples(self) -> None:
        if not isinstance(self.screen, SamplesScreen):
            self.drill_in(None)

    def action_sort(self) -> None:
        self.filters = self.filters.next_sort()
        self.redraw(force=True)

    def action_confidence(self) -> None:
        self.filters = self.filters.next_confidence()
        self.redraw(force=True)

    def action_only_findings(self) -> None:
        self.filters = replace(self.filters, only_findings=not self.filters.only_findings)
        self.redraw(force=True)

    def action_next_task(self) -> None:
        tasks = [r.key for r in fleet_rows(self.view, self.filters)]
        if not isinstance(self.screen, SamplesScreen):
            if tasks:
                self.drill_in(tasks[0])
            return
        order: list[str | None] = [None, *tasks]
        i = order.index(self.filters.eval_id) if self.filters.eval_id in order else 0
        self.filters = replace(self.filters, eval_id=order[(i + 1) % len(order)])
        self.redraw(force=True)

    def action_events(self) -> None:
        row = self.selected_sample()
        if row is not None and isinstance(self.screen, SamplesScreen):
            self.push_screen(EventsScreen(row, self.read_events))

    def action_copy_handoff(self) -> None:
        f = self.selected_finding()
        command = handoff_command(f) if f is not None else None
        if command is None:
            self.notify("no finding with a command to copy here", severity="warning",
                        markup=False)
            return
        # an id's control characters never reach the terminal, the toast or the
        # clipboard: the command is re-quoted printable ($'\x1b'), and every toast is
        # plain text (a `[/x]` in an id is not markup)
        command = printable_command(command)
        self.copy_to_clipboard(command)
        self.notify(f"copied: {visible_text(command, 2000)}", title="hand-off", markup=False)

    def action_act(self) -> None:
        """Cancel the selected finding's sample (``score``), after a confirmation that
        names the target and shows the server's dry run; only where its eval serves a
        control channel with the route (never over logs)."""
        if self.actions is None:
            self.notify(NO_ACTIONS, title="act", severity="warning", markup=False)
            return
        f = self.selected_finding()
        available = self.actions.available(f) if f is not None else ()
        if f is None or not available:
            self.notify("no action for this sample: its eval does not serve a control "
                        "channel here (finished, or on another machine)", severity="warning",
                        markup=False)
            return
        action = available[0]
        actions = self.actions

        def done(confirmed: bool | None) -> None:
            if confirmed:  # the server's words: plain text, every character visible
                self.notify(visible_text(actions.run(f, action), 1000), title="act",
                            markup=False)
            else:
                self.notify("nothing was done", title="act", markup=False)

        self.push_screen(ConfirmScreen(actions.target(f, action)), done)
