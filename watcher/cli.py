"""The ``inspect-watch`` command line: click declarations over the library.

Each command parses its options and hands them to the library: ``watch`` and
``replay`` to :func:`watcher.app.run` (as :class:`~watcher.app.WatchOptions`), ``demo``
to :mod:`watcher.demo`, ``record`` to :mod:`watcher.record`, ``report`` to the
reporters, ``rules`` (:mod:`watcher.rules_cli`) to the engine. Nothing here imports
inspect_ai at module level, and the library itself only when a command runs:
``--help`` and a live watch must start fast. Exit codes:
:class:`watcher.exit_codes.ExitCode`.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, NoReturn

import click

from watcher import __version__, sessions_cli
from watcher.act import MAX_ACTIONS, MAX_PER_TASK
from watcher.arena import one_malloc_arena
from watcher.engine import COMPILED
from watcher.exit_codes import ExitCode
from watcher.limits import READ_TIMEOUT
from watcher.rules_cli import rules as rules_group

if TYPE_CHECKING:
    from watcher.app import OptionsError
    from watcher.events import Tier

LEVELS = click.Choice(["low", "medium", "high"])


class ReporterChoice(click.ParamType):
    """A reporter for ``command`` (``watch`` or ``report``): a built-in one, or one
    another package registers (:mod:`watcher.reporters.registry`). The registry is
    imported when a value is checked or the help is shown, not for every command."""

    name = "format"

    def __init__(self, command: str) -> None:
        self.command = command

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        from watcher.reporters.registry import builtin_names

        return "[" + "|".join(builtin_names(self.command)) + "]"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> str:
        from watcher.reporters.registry import ReporterError, builtin_commands, get_reporter

        name = str(value)
        if self.command not in builtin_commands(name):
            try:
                get_reporter(name, self.command)
            except ReporterError as e:
                self.fail(str(e), param, ctx)
        return name


def _rule_options(f: Any) -> Any:
    f = click.option("--rules", "rules", multiple=True, type=click.Path(),
                     help="Extra rule file or directory (repeatable); "
                     "same ids replace built-ins.")(f)
    f = click.option("--disable", multiple=True, metavar="ID", help="Disable a rule id.")(f)
    f = click.option("--only", multiple=True, metavar="ID|CATEGORY",
                     help="Run only these rule ids or categories.")(f)
    f = click.option("--needs", "needs_max", type=click.Choice(["metadata", "content", "full"]),
                     default=None, help="Run only rules that read at most this much agent text "
                     "(metadata = never read agent-controlled text).")(f)
    f = click.option("--no-builtin", is_flag=True, help="Do not load the built-in rule pack.")(f)
    f = click.option("--suppress", "suppress", type=click.Path(exists=True, dir_okay=False),
                     default=None, help="A suppress file for this run: "
                     "`suppress: [{rule, field, op, value, reason}]`.")(f)
    return f


def _shard(value: str | None) -> tuple[int, int] | None:
    """``--shard K/N`` as ``(k, n)``; a usage error otherwise."""
    if value is None:
        return None
    from watcher.shard import parse_shard

    try:
        return parse_shard(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from e


def _bad_input(e: OptionsError) -> NoReturn:
    """Options the library refused: a usage error naming the option, else exit 2."""
    if e.option:
        raise click.BadParameter(str(e), param_hint=e.option) from e
    click.echo(f"inspect-watch: {e}", err=True)
    sys.exit(ExitCode.BAD_INPUT)


def _run(**options: Any) -> NoReturn:
    """Run a watch with these :class:`~watcher.app.WatchOptions`; exit with its code."""
    from watcher import app

    try:
        code = app.run(app.WatchOptions(**options))
    except app.OptionsError as e:
        _bad_input(e)
    sys.exit(code)


def _check(*checks: tuple[str | None, str]) -> None:
    """Outputs that must be writable (and the limits) before a command starts."""
    from watcher import app

    try:
        for path, option in checks:
            app.check_output(path, option)
        app.check_limits()
    except app.OptionsError as e:
        _bad_input(e)


EXIT_CODES = """\b
Exit codes (the same in every command; README "Exit codes"):
  0    ended normally (also: no running eval, no logs in --log-dir)
  1    a finding at or above --fail-on (or a `rules test` case failed)
  2    bad input: rules, options, state file, an output that cannot be written
  3    a source, or part of the input, could not be read; findings not written
  4    nothing matched: TASK, SAMPLE_ID or EPOCH named no task or sample
  5    an eval was starting but its control channel was not up in time
       (watch again, or use --wait SECONDS)
  130  interrupted (SIGINT/SIGTERM): outputs flushed, state saved
  141  the reader of the output went away (a closed pipe)"""


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_CODES)
@click.version_option(
    __version__, prog_name="inspect-watch",
    message="%(prog)s %(version)s (rule engine: "
            + ("compiled" if COMPILED else "pure Python") + ")")
def main() -> None:
    """Watch live Inspect AI evals (or their logs) with YAML rules.

    Finds submit loops, repeated tool calls, shortcut patterns, stalls and error
    storms, each with an honest confidence level and what you can do about it.
    By default the watcher only observes: it never cancels or changes an eval
    (`watch --act` turns on its watchdog).
    """
    one_malloc_arena()  # before any reader thread starts (watcher/arena.py)


rules_group.epilog = EXIT_CODES  # `rules test` exits 1 for a failed case, 2 for bad rules
main.add_command(rules_group, name="rules")
for _cmd, _name in ((sessions_cli.launch, "launch"), (sessions_cli.sessions, "sessions"),
                   (sessions_cli.release, "release")):
    _cmd.epilog = EXIT_CODES  # one meaning per code across commands
    main.add_command(_cmd, name=_name)


class WatchCommand(click.Command):
    """``watch``: ``--act=dry-run`` is ``--act --dry-run``. ``--act`` is a flag (takes
    no value otherwise), so ``watch --act TASK`` names a task, as without it."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        out: list[str] = []
        for i, arg in enumerate(args):
            if arg == "--":
                out += args[i:]
                break
            if arg.startswith("--act="):
                value = arg.split("=", 1)[1]
                if value != "dry-run":
                    raise click.BadParameter(f"{value!r}: the only value --act takes is "
                                             "=dry-run (the same as --act --dry-run)",
                                             param_hint="--act")
                out += ["--act", "--dry-run"]
                continue
            out.append(arg)
        return super().parse_args(ctx, out)


@main.command(cls=WatchCommand, epilog=EXIT_CODES)
@click.argument("task", required=False)
@click.argument("sample_id", required=False)
@click.argument("epoch", required=False, type=int)
@click.option("--log-dir", help="Read finished (or flushed) logs here instead of live evals "
              "(a directory, a file, or a URL such as s3://bucket/logs).")
@_rule_options
@click.option("--poll", type=float, default=1.0, show_default=True, help="Seconds between polls.")
@click.option("--format", "format", type=ReporterChoice("watch"), default="text",
              show_default=True, help="How findings are written: text, jsonl, or a reporter "
              "another package registers (entry point group inspect_watch.reporters).")
@click.option("--output", "-o", help="Write findings here (appended) instead of stdout.")
@click.option("--min-confidence", type=LEVELS, default="low", show_default=True)
@click.option("--once", is_flag=True, help="Read what is there now, report, exit.")
@click.option("--state", "state_path", type=click.Path(dir_okay=False),
              help="Persist reported findings: a restart or the next --once reports only "
              "what is new. Saved as findings are written; one watcher per state (locked).")
@click.option("--evals-from", metavar="DIR", help="Live: only the evals whose logs are "
              "written under DIR (a directory or URL), e.g. the evals you launched with "
              "--log-dir DIR; with --act, the only evals it may act on.")
@click.option("--read-timeout", type=click.FloatRange(min=0, min_open=True),
              default=READ_TIMEOUT, show_default=True, metavar="SECONDS",
              help="How long one read of an eval's control socket waits for an answer "
              "(raise it for an eval too busy to answer in time; running samples' events "
              "are read from its sample buffer meanwhile).")
@click.option("--transport", type=click.Choice(["auto", "http", "cli"]), default="auto",
              show_default=True, help="auto: HTTP over the control socket, with running "
              "samples' events read from the eval's sample buffer (no load on a busy eval), "
              "and `inspect ctl` for servers newer than this watcher; http: the control "
              "socket only.")
@click.option("--fail-on", type=LEVELS, help="Exit 1 if a finding at or above this level "
              "was reported (for CI).")
@click.option("--follow", is_flag=True, help="Keep watching for evals launched later.")
@click.option("--wait", "wait_for_evals", type=click.FloatRange(min=0), default=0.0,
              metavar="SECONDS", help="Wait up to SECONDS for a first eval to watch (an "
              "`inspect eval` started at the same time binds its control channel seconds "
              "later); then watch as without it. Default: do not wait.")
@click.option("--quiet", "-q", is_flag=True, help="Findings only: no banner or status.")
@click.option("--verbose", "-v", is_flag=True, help="text: under each finding's first line, "
              "its evidence and what to do (the hand-off), once per finding.")
@click.option("--no-color", is_flag=True, help="No colour (NO_COLOR is honoured too).")
@click.option("--summary", "summary_md", type=click.Path(dir_okay=False),
              help="Write a Markdown summary here at the end.")
@click.option("--html", "summary_html", type=click.Path(dir_okay=False),
              help="Write a self-contained HTML report here at the end.")
@click.option("--full-evidence", is_flag=True, help="JSONL: evidence in full, not shortened.")
@click.option("--on-finding", metavar="CMD", help="Run CMD for each new or escalated finding "
              "with its JSON on stdin, one at a time beside the watch (time-limited; "
              "failures and drops are reported, never fatal).")
@click.option("--on-finding-timeout", type=click.FloatRange(min=0, min_open=True), default=10.0,
              show_default=True, metavar="SECONDS", help="How long one run of CMD may take.")
@click.option("--notify", multiple=True, metavar="URL", help="Send findings to this Apprise "
              "URL (repeatable): slack://…, msteams://…, discord://…, mailto://…, ntfy://…, "
              "json://host/path … Needs pip install \"inspect-watch[notify]\".")
@click.option("--notify-min-confidence", type=LEVELS, default="high", show_default=True,
              help="Notify findings at or above this level (once per finding episode).")
@click.option("--notify-rate", type=click.IntRange(min=1), default=5, show_default=True,
              metavar="N", help="At most N notifications a minute; the rest go out as one "
              "digest when the minute allows, or at the end.")
@click.option("--alert-queue", type=click.IntRange(min=1), default=100, show_default=True,
              metavar="N", help="Findings waiting for --on-finding / --notify; beyond it "
              "they are dropped, counted and reported.")
@click.option("--alert-drain", type=click.FloatRange(min=0), default=10.0, show_default=True,
              metavar="SECONDS", help="At the end, how long to wait for queued alerts.")
@click.option("--jobs", "-j", type=int, default=None,
              help="With --log-dir and --once: scan samples in this many processes "
              "(0: one per CPU). Default: one per CPU for local logs of 8 MB or more, "
              "else one.")
@click.option("--shard", callback=lambda ctx, param, value: _shard(value), metavar="K/N",
              help="With --log-dir: read only the logs whose name hashes to share K of N "
              "(K from 0), so N watchers (a Kubernetes Indexed Job, a CI matrix, a Slurm "
              "array) scan a log store in parallel; `report` merges their JSONL.")
@click.option("--act", is_flag=True, help="Turn on the watchdog: act on live findings "
              "through the eval's control channel as the action policy says (built in: "
              "cancel a sample in a high submit loop or repeated tool call, with score). "
              "Off by default; every action it tries is an `action` record in the outputs. "
              "Never on logs. --act=dry-run is --act --dry-run.")
@click.option("--dry-run", is_flag=True, help="With --act: every step but the last (the "
              "server's own dry run answers what would change); changes nothing.")
@click.option("--act-policy", type=click.Path(dir_okay=False), metavar="FILE",
              help="With --act: an action policy over the built-in one (add, override or "
              "turn off actions per rule or category; docs/watchdog.md).")
@click.option("--act-max", type=click.IntRange(min=1), default=MAX_ACTIONS, show_default=True,
              metavar="N", help="With --act: at most N actions in this watch.")
@click.option("--act-max-task", type=click.IntRange(min=1), default=MAX_PER_TASK,
              show_default=True, metavar="N", help="With --act: at most N actions on one task.")
@click.option("--task-budget", type=click.IntRange(min=1), default=None, metavar="TOKENS",
              help="A run-wide budget: a finding (rule task-budget) when a task's samples "
              "have spent more than TOKENS tokens, as Inspect counts them. With --act the "
              "policy decides (built in: drain the task); without, its hand-off offers "
              "`inspect ctl task drain`. Every watch ends with a `spend` notice: tokens per "
              "task and in all, and the share spent in loops.")
@click.option("--release-when-done", is_flag=True, help="Release each eval process kept "
              "alive (--ctl-server=keep) once its tasks are over and read to the end, so "
              "nothing is left parked (never cancels a running eval).")
def watch(task: str | None, sample_id: str | None, epoch: int | None,
          **options: Any) -> None:
    """Watch running evals: all of them, one TASK, or one SAMPLE_ID [EPOCH] of it."""
    from watcher.run.values import Selector

    _run(selector=Selector(task, sample_id, epoch), **options)


@main.command(epilog=EXIT_CODES)
@click.argument("task", required=False)
@click.option("--log-dir", help="Browse finished logs here (a directory, a file, or a URL) "
              "instead of live evals.")
@_rule_options
@click.option("--poll", type=float, default=1.0, show_default=True, help="Seconds between polls.")
@click.option("--min-confidence", type=LEVELS, default="low", show_default=True,
              help="Show findings at or above this level at first (`c` changes it).")
@click.option("--transport", type=click.Choice(["auto", "http", "cli"]), default="auto",
              show_default=True, help="As for watch.")
def top(task: str | None, min_confidence: str, **options: Any) -> None:
    """A live fleet view: every running eval and sample, and their findings (q quits).

    Runs the same watch as `watch` (following evals launched later), in a terminal
    screen; `top --log-dir DIR` browses finished logs the same way. Keys: docs/top.md.
    """
    from watcher import app
    from watcher.run.values import Selector
    from watcher.top.run import run_top

    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        # a screen written into a pipe or a file is unreadable escape codes
        click.echo("inspect-watch: top needs a terminal (stdin and stdout); "
                   "off one, use `inspect-watch watch` (one line per finding)", err=True)
        sys.exit(ExitCode.BAD_INPUT)
    try:
        code = run_top(app.WatchOptions(selector=Selector(task), **options),
                       min_confidence=min_confidence)
    except app.OptionsError as e:
        _bad_input(e)
    sys.exit(code)


@main.command(epilog=EXIT_CODES)
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@_rule_options
@click.option("--format", "format", type=ReporterChoice("watch"), default="text")
@click.option("--output", "-o")
@click.option("--min-confidence", type=LEVELS, default="low")
@click.option("--fail-on", type=LEVELS)
def replay(files: tuple[str, ...], **options: Any) -> None:
    """Run the rules over recorded event pages (JSONL from `record`)."""
    from watcher.sources.base import SourceError
    from watcher.sources.replay import read_recordings

    _check((options["output"], "--output"))
    for f in files:  # a file that is no recording is bad input, located, before any rule runs
        try:
            read_recordings(f)
        except SourceError as e:
            click.echo(f"inspect-watch replay: {e}", err=True)
            sys.exit(ExitCode.BAD_INPUT)
    _run(replay=files, quiet=True, poll=0.05, **options)


@main.command(name="mcp", epilog=EXIT_CODES)
@_rule_options
@click.option("--poll", type=float, default=1.0, show_default=True, help="Seconds between polls.")
@click.option("--transport", type=click.Choice(["auto", "http"]), default="auto",
              show_default=True, help="As for watch.")
@click.option("--output", "-o", help="Also write what the watch reports here, as JSONL.")
@click.option("--act", is_flag=True, help="Offer the acting tools (launch, release, act on a "
              "finding) and run the watchdog, as `watch --act` (its policy and audit).")
@click.option("--dry-run", is_flag=True, help="With --act: the watchdog's dry runs only.")
@click.option("--act-policy", type=click.Path(dir_okay=False), metavar="FILE",
              help="With --act: an action policy over the built-in one.")
@click.option("--act-max", type=click.IntRange(min=1), default=MAX_ACTIONS, show_default=True,
              metavar="N", help="With --act: at most N actions.")
@click.option("--act-max-task", type=click.IntRange(min=1), default=MAX_PER_TASK,
              show_default=True, metavar="N", help="With --act: at most N actions on one task.")
def mcp_cmd(output: str | None, **options: Any) -> None:
    """A Model Context Protocol server (stdio) for coding agents that babysit evals.

    Tools: list_evals, list_samples, findings (since a cursor), get_finding,
    sample_events, sessions; with --act also launch, release, act_on_finding. Add it to
    an agent, e.g. `claude mcp add inspect-watch -- inspect-watch mcp`. docs/agents.md.
    """
    from watcher import app
    from watcher.mcp.server import main_error, missing_sdk, serve

    why = missing_sdk()
    if why is not None:
        main_error(why)
        sys.exit(ExitCode.BAD_INPUT)
    act = bool(options.get("act"))
    try:
        opts = app.WatchOptions(format="jsonl" if output else None, output=output, **options)
        app.check(opts)
    except app.OptionsError as e:
        _bad_input(e)
    sys.exit(serve(opts, act=act))


@main.command(name="ls", epilog=EXIT_CODES)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def ls_cmd(as_json: bool) -> None:
    """List running tasks: task, id, model, status, sample counts, pid, log."""
    from watcher.discovery import list_servers
    from watcher.sanitize import visible_text
    from watcher.sources.base import SourceError
    from watcher.sources.http import HttpSource

    rows: list[dict[str, Any]] = []
    for server in list_servers():
        src = HttpSource(server, retries=1)
        try:
            for t in src.tasks():
                rows.append({"task": t.task, "task_id": t.task_id, "eval_id": t.eval_id,
                             "model": t.model, "status": t.status, "samples": t.counts,
                             "pid": server.pid, "api_version": server.api_version,
                             "log_location": t.log_location})
        except SourceError as e:
            rows.append({"pid": server.pid, "error": str(e)})
        finally:
            src.close()
    if as_json:
        click.echo(json.dumps({"tasks": rows}, indent=2))
        return
    if not rows:
        click.echo("no running Inspect evals")
        return
    for r in rows:
        # every field but the pid (ours, from the discovery file) is the server's word:
        # shown so that no character of it reaches the terminal as a control
        if "error" in r:
            click.echo(f"pid {r['pid']}: unreachable ({visible_text(r['error'], 500)})")
            continue
        c = r["samples"] if isinstance(r["samples"], dict) else {}
        v = visible_text
        click.echo(
            f"{v(r['task'])}  {v(r['task_id'])}  {v(r['model'])}  {v(r['status'], 40)}  "
            f"samples {v(c.get('completed', 0), 20)}/{v(c.get('total', '?'), 20)} done, "
            f"{v(c.get('in_flight', 0), 20)} running, {v(c.get('errored', 0), 20)} errored  "
            f"pid {r['pid']}  {v(r['log_location'], 500)}")


@main.command(epilog=EXIT_CODES)
@click.argument("task")
@click.argument("sample_id")
@click.argument("epoch", required=False, type=int, default=1)
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False))
@click.option("--tier", type=click.Choice(["metadata", "content", "full"]), default="content")
@click.option("--log-dir", help="Record from logs instead of a live eval.")
def record(task: str, sample_id: str, epoch: int, output: str, tier: Tier,
           log_dir: str | None) -> None:
    """Record one sample's event pages to a JSONL file (for fixtures and bug reports)."""
    from watcher.record import NothingMatched, RecordError, record_sample

    _check((output, "--output"))
    try:
        recorded = record_sample(task, sample_id, epoch, output, tier=tier, log_dir=log_dir)
    except RecordError as e:
        click.echo(f"inspect-watch record: {e}", err=True)
        sys.exit(ExitCode.NO_MATCH if isinstance(e, NothingMatched) else ExitCode.SOURCE)
    if recorded.partial:
        click.echo(f"recorded {recorded.pages} pages to {output}: partial, the sample was "
                   "still running (replay reads it to its end)")
    else:
        click.echo(f"recorded {recorded.pages} pages to {output}")


@main.command(epilog=EXIT_CODES)
@click.argument("files", nargs=-1, required=True)
@click.option("--format", "fmt", type=ReporterChoice("report"), default="markdown")
@click.option("--output", "-o", help="Write the report here (default: stdout).")
@click.option("--logs/--no-logs", "read_logs", default=True, show_default=True,
              help="Read the header and sample summaries of the logs the findings name "
              "(sample counts, scores, errored samples, outliers).")
@click.option("--max-logs", type=click.IntRange(min=0), default=50, show_default=True,
              metavar="N", help="Read at most N logs; the report says which were not read.")
@click.option("--logs-from", "logs_from", multiple=True, metavar="SCHEME",
              help="Also read logs the findings name at URLs of this scheme (s3, gs, …; "
              "repeatable). Local log files are read, and the schemes of the findings "
              "files given; a findings file must not make the report fetch other URLs.")
def report(files: tuple[str, ...], fmt: str, output: str | None, read_logs: bool,
           max_logs: int, logs_from: tuple[str, ...]) -> None:
    """Summarise findings JSONL files (several watchers or hosts merge into one), with the
    sample counts and scores of the logs they name."""
    from watcher.logsummary import with_logs
    from watcher.reporters import OutputOptions, ReportContext, get_reporter
    from watcher.reporters.jsonl import summary_from_jsonl

    _check((output, "--output"))
    skipped: list[str] = []
    try:
        summary = summary_from_jsonl(list(files), skipped)
    except Exception as e:  # noqa: BLE001 - fsspec backends raise their own types
        what = getattr(e, "filename", None) or " ".join(files)
        click.echo(f"inspect-watch report: cannot read {what}: "
                   f"{getattr(e, 'strerror', None) or f'{type(e).__name__}: {e}'}", err=True)
        sys.exit(ExitCode.SOURCE)
    if skipped:  # the report shows the rest, and says so in its notices
        click.echo(f"inspect-watch report: skipped {len(skipped)} malformed record(s); "
                   f"first: {skipped[0]}", err=True)
    from watcher.logsummary import log_scheme

    schemes = {*logs_from, *(x for f in files if (x := log_scheme(f)) is not None)}
    summary = with_logs(summary, read=read_logs, max_logs=max_logs, schemes=schemes)
    rep = get_reporter(fmt, "report").open(output, OutputOptions())
    rep.start(ReportContext(sources=files, version=__version__))
    rep.stop(summary)


@main.command(epilog=EXIT_CODES)
@click.option("--keep-logs", type=click.Path(file_okay=False),
              help="Write the demo eval's logs here (default: a temporary directory).")
@click.option("--no-color", is_flag=True)
@click.option("--verbose", "-v", is_flag=True,
              help="Under each finding's first line, its evidence and what to do, once.")
def demo(keep_logs: str | None, no_color: bool, verbose: bool) -> None:
    """Launch the bundled example eval in the background and watch it live."""
    from watcher.demo import run_demo

    sys.exit(run_demo(keep_logs=keep_logs, no_color=no_color, verbose=verbose))


if __name__ == "__main__":
    main()
