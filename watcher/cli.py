"""The ``inspect-watch`` command line: thin click commands wiring the library together.

Commands parse options and connect sources, the engine and reporters; all
formatting lives in :mod:`watcher.reporters`. Nothing here imports inspect_ai at
module level: ``--help`` and a live watch must start fast.

Exit codes: :class:`watcher.exit_codes.ExitCode`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from watcher import __version__
from watcher.engine import COMPILED
from watcher.exit_codes import ExitCode

if TYPE_CHECKING:
    from watcher.events import Tier

LEVELS = click.Choice(["low", "medium", "high"])


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


def load_engine(rules: tuple[str, ...], disable: tuple[str, ...], only: tuple[str, ...],
                needs_max: str | None, no_builtin: bool = False,
                suppress: str | None = None) -> Any:
    """Load and compile the rules, or exit 2 with every error located."""
    from watcher.engine import Engine, RuleLoadErrors, load_rules, load_suppressions

    try:
        ruleset = load_rules(paths=list(rules), builtin=not no_builtin, disable=list(disable),
                             only=list(only), needs_max=needs_max)
        suppressions = load_suppressions(suppress) if suppress else []
    except RuleLoadErrors as e:
        click.echo(e.render() if hasattr(e, "render") else str(e), err=True)
        click.echo("inspect-watch: refusing to start with invalid rules", err=True)
        sys.exit(ExitCode.BAD_INPUT)
    engine = Engine(ruleset, suppressions)
    # what is loaded by now (modules, the compiled rules) lives as long as the watch: out
    # of the collector's way, a scan that decodes thousands of transcripts runs 4 % faster
    import gc

    gc.freeze()
    return engine


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    __version__, prog_name="inspect-watch",
    message="%(prog)s %(version)s (rule engine: "
            + ("compiled" if COMPILED else "pure Python") + ")")
def main() -> None:
    """Watch live Inspect AI evals (or their logs) with YAML rules.

    Finds submit loops, repeated tool calls, shortcut patterns, stalls and error
    storms, each with an honest confidence level and what you can do about it.
    The watcher only observes: it never cancels or changes an eval.
    """


def _sinks(fmt: str, output: str | None, quiet: bool, no_color: bool, min_confidence: str,
           full_evidence: bool) -> list[Any]:
    from watcher.reporters import JsonlReporter, TextReporter

    sinks: list[Any] = []
    if fmt == "jsonl":
        from watcher.reporters.remote import RemoteJsonlReporter, is_url

        if output and is_url(output):
            sinks.append(RemoteJsonlReporter(output, full_evidence=full_evidence))
        elif output:
            sinks.append(JsonlReporter(output, full_evidence=full_evidence))
        else:
            sinks.append(JsonlReporter(stream=sys.stdout, full_evidence=full_evidence))
    else:
        stream = sys.stdout
        if output:
            stream = open(output, "a", encoding="utf-8")  # noqa: SIM115 - closed at stop
        sinks.append(TextReporter(stream, quiet=quiet, color=False if no_color else None,
                                  min_confidence=min_confidence))
    return sinks


def _local(path: str | None) -> Path | None:
    """A plain path or ``file://`` URL as a local path; ``None`` for none or another URL."""
    from watcher.reporters.remote import is_url

    if not path or is_url(path):
        return None
    return Path(path.removeprefix("file://")).expanduser()


def _check_output(path: str | None, hint: str) -> None:
    """A local output path the watch can write, checked before it starts: a report that
    failed at the end would cost the whole watch (remote URLs are checked by writing)."""
    target = _local(path)
    if target is None:
        return
    # a symlink is written through: what matters is where it points (a dangling one is
    # created there, as `> PATH` would; its directory must exist)
    real = Path(os.path.realpath(target))
    via = f" (where the symlink {path} points)" if real != target.absolute() else ""
    if real.is_symlink():
        raise click.BadParameter(f"{path} is a symlink loop", param_hint=hint)
    if target.is_dir():
        raise click.BadParameter(f"{path} is a directory", param_hint=hint)
    if not real.parent.is_dir():
        raise click.BadParameter(f"directory {real.parent} does not exist{via}",
                                 param_hint=hint)
    if not os.access(real.parent, os.W_OK) or real.exists() and not os.access(real, os.W_OK):
        raise click.BadParameter(f"{path} is not writable", param_hint=hint)


def _check_limits() -> None:
    """An override of a limit (``INSPECT_WATCH_MAX_…``, README "Limits") that is not a
    positive number is bad input, said before the watch starts."""
    from watcher.limits import LimitError, check

    try:
        check()
    except LimitError as e:
        click.echo(f"inspect-watch: {e}", err=True)
        sys.exit(ExitCode.BAD_INPUT)


# a post-hoc scan of local logs this large is split over every CPU unless --jobs says
# otherwise: forking costs tens of milliseconds, decoding 8 MB of logs about a second
AUTO_JOBS_BYTES = 8 * 1024 * 1024


def _local_log_bytes(log_dir: str | None, cap: int = AUTO_JOBS_BYTES) -> int:
    """The size of the local Inspect logs under ``log_dir`` (0 for a URL), counted until
    it reaches ``cap`` (a large directory is not walked to its end for this)."""
    local = _local(log_dir)
    if local is None:
        return 0
    if local.is_file():
        return local.stat().st_size
    total = 0
    for root, _dirs, files in os.walk(local):
        for name in files:
            if name.endswith((".eval", ".json")):
                try:
                    total += os.stat(os.path.join(root, name)).st_size
                except OSError:
                    continue
                if total >= cap:
                    return total
    return total


def _check_log_dir(log_dir: str | None) -> None:
    """A local ``--log-dir`` must exist: an empty scan of a mistyped path looks like a
    clean run."""
    local = _local(log_dir)
    if local is not None and not local.exists():
        raise click.BadParameter(f"{log_dir} does not exist", param_hint="--log-dir")


def _quiet_closed_stdout() -> None:
    """Point a stdout whose reader has gone at /dev/null: what is still buffered for it
    can never arrive, and Python's flush at exit would print a BrokenPipeError."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def run_watch(engine: Any, *, selector: Any, log_dir: str | None = None,
              replay: list[str] | None = None, poll: float = 1.0, fmt: str = "text",
              output: str | None = None, min_confidence: str = "low", once: bool = False,
              state_path: str | None = None, transport: str = "auto",
              fail_on: str | None = None, follow: bool = False, quiet: bool = False,
              no_color: bool = False, summary_md: str | None = None,
              summary_html: str | None = None, full_evidence: bool = False,
              on_finding: str | None = None, wait_for_evals: float = 0.0,
              extra_sinks: list[Any] | None = None, jobs: int = 1,
              on_finding_timeout: float | None = None, notify: tuple[str, ...] = (),
              notify_min_confidence: str | None = None, notify_rate: int | None = None,
              alert_queue: int | None = None, alert_drain: float | None = None,
              log_hints: bool = True) -> ExitCode:
    """Run one watch with reporters; returns the exit code."""
    from watcher.state import StateError, WatchState

    try:
        # checked now (a state that cannot be saved would be lost at the end of the watch)
        state = WatchState.open(Path(state_path)) if state_path else WatchState()
    except StateError as e:
        click.echo(f"inspect-watch: {e}", err=True)
        return ExitCode.BAD_INPUT
    from watcher import alertqueue, hooks

    queue_size = alert_queue if alert_queue is not None else alertqueue.QUEUE_SIZE
    alerts: list[Any] = []
    if notify:  # before any output is opened: a usage error leaves nothing behind
        from watcher.notify import MIN_CONFIDENCE, PER_MINUTE, Notifier, NotifyError

        try:
            alerts.append(Notifier(notify, min_confidence=notify_min_confidence or MIN_CONFIDENCE,
                                   per_minute=notify_rate or PER_MINUTE, queue_size=queue_size))
        except NotifyError as e:
            click.echo(f"inspect-watch: {e}", err=True)
            return ExitCode.BAD_INPUT
    if on_finding:
        alerts.append(hooks.CommandHook(on_finding, timeout=on_finding_timeout or hooks.TIMEOUT,
                                        queue_size=queue_size))
    try:
        sinks = _sinks(fmt, output, quiet, no_color, min_confidence, full_evidence)
    except OSError as e:
        state.close()
        click.echo(f"inspect-watch: cannot write {output}: {e.strerror or e}", err=True)
        return ExitCode.BAD_INPUT
    try:
        return _run_watch(engine, state, sinks, alerts, selector=selector, log_dir=log_dir,
                          replay=replay, poll=poll, output=output,
                          min_confidence=min_confidence, once=once, transport=transport,
                          fail_on=fail_on, follow=follow, summary_md=summary_md,
                          summary_html=summary_html, wait_for_evals=wait_for_evals,
                          extra_sinks=extra_sinks, jobs=jobs, log_hints=log_hints,
                          alert_drain=alertqueue.DRAIN_SECONDS if alert_drain is None
                          else alert_drain)
    finally:
        state.close()


def _run_watch(engine: Any, state: Any, sinks: list[Any], alerts: list[Any], *, selector: Any,
               log_dir: str | None, replay: list[str] | None, poll: float, output: str | None,
               min_confidence: str, once: bool, transport: str, fail_on: str | None,
               follow: bool, summary_md: str | None, summary_html: str | None,
               wait_for_evals: float, extra_sinks: list[Any] | None, jobs: int,
               log_hints: bool, alert_drain: float) -> ExitCode:
    from watcher.reporters import HtmlReporter, MarkdownReporter, ReportContext
    from watcher.reporters.remote import OutputError
    from watcher.run.watch import Watch, WatchConfig

    sinks += extra_sinks or []
    config = WatchConfig(transport=transport, log_dir=log_dir, replay=replay or [],
                         follow=follow, once=once, poll=poll, selector=selector,
                         min_confidence=min_confidence, fail_on=fail_on,
                         wait_for_evals=wait_for_evals, jobs=jobs, log_hints=log_hints,
                         alert_drain=alert_drain)
    watch = Watch(engine, config, state, sinks, alerts=alerts)
    sinks = [*sinks, *alerts]
    context = ReportContext(started_at=watch.started_at,
                         sources=(log_dir,) if log_dir else tuple(replay or ()) or ("live",),
                         log_dirs=(log_dir,) if log_dir else (),
                         rules=tuple(r.id for r in engine.rules), version=__version__)
    try:
        for sink in sinks:
            sink.start(context)
    except OutputError as e:
        click.echo(f"inspect-watch: {e}", err=True)
        return ExitCode.BAD_INPUT
    except OSError as e:  # checked before; the path changed since
        click.echo(f"inspect-watch: cannot write {output}: {e.strerror or e}", err=True)
        return ExitCode.BAD_INPUT
    result = watch.run()
    summary = watch.summary()
    for sink in watch.router.sinks:  # less any whose reader went away during the watch
        sink.stop(summary)
    if result.output_closed:
        _quiet_closed_stdout()
    if result.write_error:
        click.echo(f"inspect-watch: cannot write findings ({result.write_error}); the watch "
                   "stopped and saved its state: the next run with the same --state reports "
                   "what was not written", err=True)
    if result.state_error:
        click.echo(f"inspect-watch: cannot save the state file {result.state_error}; the "
                   "watch stopped: what it could not remember it did not report, and the "
                   "next run with a state it can save reports it", err=True)
    # findings that did not reach a remote --output (kept locally; the reporter said where)
    lost = any(getattr(sink, "lost", False) for sink in sinks)
    code = result.exit_code or (ExitCode.SOURCE if lost else ExitCode.OK)
    for path, cls in ((summary_md, MarkdownReporter), (summary_html, HtmlReporter)):
        if not path:
            continue
        try:
            rep = cls(path)
            rep.start(context)
            rep.stop(summary)
        except OSError as e:  # checked at the start; the disk or directory changed since
            click.echo(f"inspect-watch: could not write the report {path}: "
                       f"{e.strerror or e}", err=True)
            code = code or ExitCode.SOURCE
    return code


@main.command()
@click.argument("task", required=False)
@click.argument("sample_id", required=False)
@click.argument("epoch", required=False, type=int)
@click.option("--log-dir", help="Read finished (or flushed) logs here instead of live evals "
              "(a directory, a file, or a URL such as s3://bucket/logs).")
@_rule_options
@click.option("--poll", type=float, default=1.0, show_default=True, help="Seconds between polls.")
@click.option("--format", "fmt", type=click.Choice(["text", "jsonl"]), default="text",
              show_default=True)
@click.option("--output", "-o", help="Write findings here (appended) instead of stdout.")
@click.option("--min-confidence", type=LEVELS, default="low", show_default=True)
@click.option("--once", is_flag=True, help="Read what is there now, report, exit.")
@click.option("--state", "state_path", type=click.Path(dir_okay=False),
              help="Persist reported findings: a restart or the next --once reports only "
              "what is new. Saved as findings are written; one watcher per state (locked).")
@click.option("--transport", type=click.Choice(["auto", "http", "cli"]), default="auto",
              show_default=True, help="auto: HTTP over the control socket, with running "
              "samples' events read from the eval's sample buffer (no load on a busy eval), "
              "and `inspect ctl` for servers newer than this watcher; http: the control "
              "socket only.")
@click.option("--fail-on", type=LEVELS, help="Exit 1 if a finding at or above this level "
              "was reported (for CI).")
@click.option("--follow", is_flag=True, help="Keep watching for evals launched later.")
@click.option("--quiet", "-q", is_flag=True, help="Findings only: no banner or status.")
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
def watch(task: str | None, sample_id: str | None, epoch: int | None, log_dir: str | None,
          rules: tuple[str, ...], disable: tuple[str, ...], only: tuple[str, ...],
          needs_max: str | None, no_builtin: bool, suppress: str | None, poll: float, fmt: str,
          output: str | None,
          min_confidence: str, once: bool, state_path: str | None, transport: str,
          fail_on: str | None, follow: bool, quiet: bool, no_color: bool,
          summary_md: str | None, summary_html: str | None, full_evidence: bool,
          on_finding: str | None, on_finding_timeout: float, notify: tuple[str, ...],
          notify_min_confidence: str, notify_rate: int, alert_queue: int, alert_drain: float,
          jobs: int | None) -> None:
    """Watch running evals: all of them, one TASK, or one SAMPLE_ID [EPOCH] of it."""
    import os

    from watcher.run.runner import Selector

    if poll <= 0:
        raise click.BadParameter("must be positive", param_hint="--poll")
    if jobs is not None and jobs < 0:
        raise click.BadParameter("must be 0 (one per CPU) or more", param_hint="--jobs")
    if jobs is None:  # the findings are the same either way; a large scan takes less time
        big = bool(log_dir and once) and _local_log_bytes(log_dir) >= AUTO_JOBS_BYTES
        jobs = 0 if big else 1
    jobs = jobs or os.cpu_count() or 1
    if jobs > 1 and not (log_dir and once):
        raise click.BadParameter("parallel scans read logs: use it with --log-dir and --once",
                                 param_hint="--jobs")
    _check_log_dir(log_dir)
    _check_limits()
    for path, hint in ((output, "--output"), (summary_md, "--summary"),
                       (summary_html, "--html")):
        _check_output(path, hint)
    engine = load_engine(rules, disable, only, needs_max, no_builtin, suppress)
    code = run_watch(engine, selector=Selector(task, sample_id, epoch), log_dir=log_dir,
                     poll=poll, fmt=fmt, output=output, min_confidence=min_confidence,
                     once=once, state_path=state_path, transport=transport, fail_on=fail_on,
                     follow=follow, quiet=quiet, no_color=no_color, summary_md=summary_md,
                     summary_html=summary_html, full_evidence=full_evidence,
                     on_finding=on_finding, jobs=jobs, on_finding_timeout=on_finding_timeout,
                     notify=notify, notify_min_confidence=notify_min_confidence,
                     notify_rate=notify_rate, alert_queue=alert_queue, alert_drain=alert_drain)
    sys.exit(code)


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@_rule_options
@click.option("--format", "fmt", type=click.Choice(["text", "jsonl"]), default="text")
@click.option("--output", "-o")
@click.option("--min-confidence", type=LEVELS, default="low")
@click.option("--fail-on", type=LEVELS)
def replay(files: tuple[str, ...], rules: tuple[str, ...], disable: tuple[str, ...],
           only: tuple[str, ...], needs_max: str | None, no_builtin: bool,
           suppress: str | None, fmt: str, output: str | None, min_confidence: str,
           fail_on: str | None) -> None:
    """Run the rules over recorded event pages (JSONL from `record`)."""
    from watcher.run.runner import Selector
    from watcher.sources.base import SourceError
    from watcher.sources.replay import read_recordings

    _check_output(output, "--output")
    for f in files:  # a file that is no recording is bad input, located, before any rule runs
        try:
            read_recordings(f)
        except SourceError as e:
            click.echo(f"inspect-watch replay: {e}", err=True)
            sys.exit(ExitCode.BAD_INPUT)
    engine = load_engine(rules, disable, only, needs_max, no_builtin, suppress)
    sys.exit(run_watch(engine, selector=Selector(), replay=list(files), fmt=fmt, output=output,
                       min_confidence=min_confidence, fail_on=fail_on, quiet=True, poll=0.05))


@main.command(name="ls")
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


@main.command()
@click.argument("task")
@click.argument("sample_id")
@click.argument("epoch", required=False, type=int, default=1)
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False))
@click.option("--tier", type=click.Choice(["metadata", "content", "full"]), default="content")
@click.option("--log-dir", help="Record from logs instead of a live eval.")
def record(task: str, sample_id: str, epoch: int, output: str, tier: Tier,
           log_dir: str | None) -> None:
    """Record one sample's event pages to a JSONL file (for fixtures and bug reports)."""
    from watcher.record import RecordError, record_sample

    _check_output(output, "--output")
    _check_limits()

    try:
        recorded = record_sample(task, sample_id, epoch, output, tier=tier, log_dir=log_dir)
    except RecordError as e:
        click.echo(f"inspect-watch record: {e}", err=True)
        sys.exit(ExitCode.SOURCE)
    if recorded.partial:
        click.echo(f"recorded {recorded.pages} pages to {output}: partial, the sample was "
                   "still running (replay reads it to its end)")
    else:
        click.echo(f"recorded {recorded.pages} pages to {output}")


@main.command()
@click.argument("files", nargs=-1, required=True)
@click.option("--format", "fmt", type=click.Choice(["markdown", "html"]), default="markdown")
@click.option("--output", "-o", help="Write the report here (default: stdout).")
@click.option("--logs/--no-logs", "read_logs", default=True, show_default=True,
              help="Read the header and sample summaries of the logs the findings name "
              "(sample counts, scores, errored samples, outliers).")
@click.option("--max-logs", type=click.IntRange(min=0), default=50, show_default=True,
              metavar="N", help="Read at most N logs; the report says which were not read.")
def report(files: tuple[str, ...], fmt: str, output: str | None, read_logs: bool,
           max_logs: int) -> None:
    """Summarise findings JSONL files (several watchers or hosts merge into one), with the
    sample counts and scores of the logs they name."""
    from watcher.logsummary import with_logs
    from watcher.reporters import REPORTERS, ReportContext
    from watcher.reporters.jsonl import summary_from_jsonl

    _check_output(output, "--output")
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
    summary = with_logs(summary, read=read_logs, max_logs=max_logs)
    cls = REPORTERS[fmt]
    rep = cls(output) if output else cls(stream=sys.stdout)  # type: ignore[call-arg]
    rep.start(ReportContext(sources=files, version=__version__))
    rep.stop(summary)


@main.command()
@click.option("--keep-logs", type=click.Path(file_okay=False),
              help="Write the demo eval's logs here (default: a temporary directory).")
@click.option("--no-color", is_flag=True)
def demo(keep_logs: str | None, no_color: bool) -> None:
    """Launch the bundled example eval in the background and watch it live."""
    from watcher.demo import run_demo

    sys.exit(run_demo(keep_logs=keep_logs, no_color=no_color))


def _mount_rules() -> None:
    try:
        from watcher.rules_cli import rules as rules_group
    except ImportError:  # pragma: no cover - during development only
        return
    main.add_command(rules_group, name="rules")


_mount_rules()

if __name__ == "__main__":
    main()
