"""``inspect-watch launch``, ``sessions`` and ``release``: the click commands.

The work is in :mod:`watcher.launch` and :mod:`watcher.sessions`; this module parses
options and says what happened. Exit codes: 0 done, 2 refused (bad input, tmux
missing, a name taken), 3 the eval or its control socket failed.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from dataclasses import asdict
from typing import Any

import click

from watcher.exit_codes import ExitCode


@click.command(context_settings={"ignore_unknown_options": True,
                                 "allow_interspersed_args": False})
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option("--name", help="The tmux session's name (default: iw-TASK, made unique). A "
              "name already taken is refused.")
@click.option("--headless", is_flag=True, help="No terminal UI: Inspect's own --detach. "
              "Cancelling one sample is then `inspect ctl` or the watchdog's job.")
@click.option("--tmux-socket", metavar="NAME", help="Use the tmux server `tmux -L NAME` "
              "instead of your default one.")
@click.option("--again", metavar="ID|SESSION|PID", help="Run a launched run's recorded "
              "command once more, in its directory (an eval-set resumes from its log dir).")
@click.option("--wait", type=click.FloatRange(min=1), default=120.0, show_default=True,
              metavar="SECONDS", help="How long to wait for the eval's control endpoint.")
@click.option("--json", "as_json", is_flag=True, help="Print the launch record as JSON.")
def launch(command: tuple[str, ...], name: str | None, headless: bool,
           tmux_socket: str | None, again: str | None, wait: float, as_json: bool) -> None:
    """Start `inspect eval` or `inspect eval-set` for babysitting, and record it.

    \b
        inspect-watch launch -- inspect eval-set TASKS --model M --log-dir DIR
        inspect-watch launch --headless -- inspect eval TASK --model M

    Runs it in a detached tmux session with Inspect's full screen (attach to cancel a
    sample), keeping its control surface up after it finishes (--ctl-server=keep, or
    --keep-alive on older Inspect) until `inspect-watch release`; says it started once
    the control endpoint answers, and prints the commands to manage it.
    """
    from watcher import launch as lm
    from watcher.sessions import find_record

    cwd = None
    argv = list(command)
    if again is not None:
        if argv:
            raise click.UsageError("--again runs the recorded command: give no other")
        try:
            record = find_record(again)
        except KeyError:
            raise click.BadParameter(f"no launch record {again!r} (`inspect-watch "
                                     "sessions` lists them)", param_hint="--again") from None
        argv, cwd = lm.again(record), record.cwd
        if tmux_socket is None and not headless:
            tmux_socket = record.tmux_socket
    if not argv:
        raise click.UsageError("give the command after `--`: inspect-watch launch -- inspect "
                               "eval-set TASKS --model M --log-dir DIR")
    try:
        rec = lm.run(argv, name=name, headless=headless, socket=tmux_socket, wait=wait,
                     cwd=cwd)
    except lm.LaunchError as e:
        lm.main_error(e)
        sys.exit(ExitCode.SOURCE if isinstance(e, lm.LaunchFailed) else ExitCode.BAD_INPUT)
    if as_json:
        click.echo(json.dumps(asdict(rec), indent=2))
    else:
        click.echo(lm.describe(rec))


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--prune", is_flag=True, help="Forget the records of runs that are gone.")
def sessions(as_json: bool, prune: bool) -> None:
    """The runs `inspect-watch launch` started: status, pid, log dir, tmux session.

    Status: running; finished, kept alive (parked until `inspect-watch release`);
    finished (exiting); gone (the process has exited).
    """
    from watcher.discovery import list_servers
    from watcher.sanitize import visible_text
    from watcher.sessions import load_records, run_status

    servers = list_servers()
    rows: list[dict[str, Any]] = []
    for rec in load_records():
        st = run_status(rec, servers)
        if prune and st.status == "gone":
            for path in (rec.path, rec.exit_file):
                path.unlink(missing_ok=True)
            continue
        rows.append({"id": rec.id, "status": st.status, "pid": rec.pid, "mode": rec.mode,
                     "session": rec.session, "session_open": st.session_open,
                     "tmux_socket": rec.tmux_socket, "log_dir": rec.log_dir, "cwd": rec.cwd,
                     "started_at": rec.started_at, "exit_code": st.exit_code,
                     "command": rec.command,
                     "tasks": [{"task": t.task, "task_id": t.task_id, "status": t.status,
                                "samples": t.counts} for t in st.tasks]})
    if as_json:
        click.echo(json.dumps({"sessions": rows}, indent=2))
        return
    if not rows:
        click.echo("no launched runs (start one with `inspect-watch launch -- inspect eval "
                   "...`)" + (" ; forgot the gone ones" if prune else ""))
        return
    for r in rows:
        status = r["status"]
        if r["exit_code"] is not None:
            status += f" (exit {r['exit_code']})"
        if r["mode"] == "tmux":
            sock = f"-L {r['tmux_socket']} " if r["tmux_socket"] else ""
            where = f"tmux {sock}{r['session']}" + (
                "" if r["session_open"] is None else
                " (open)" if r["session_open"] else " (closed)")
        else:
            where = "headless"
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["started_at"]))
        tasks = ", ".join(f"{visible_text(t['task'], 60)} {visible_text(t['status'], 20)}"
                          for t in r["tasks"])
        click.echo(f"{r['id']}  {status}  pid {r['pid']}  {where}  started {started}")
        click.echo(f"    log dir {r['log_dir']}" + (f"  tasks: {tasks}" if tasks else ""))
        click.echo(f"    command {shlex.join(r['command'])}")


@click.command()
@click.argument("pid", required=False, type=int)
@click.option("--dry-run", is_flag=True, help="Say what would be released; send nothing.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def release(pid: int | None, dry_run: bool, as_json: bool) -> None:
    """Release finished evals kept alive (--ctl-server=keep), or the one with PID.

    Without PID: every eval process whose tasks are all over and that is parked; the
    running ones are left alone. With PID: that process (if its eval is still running, it
    will exit when done). Releasing never cancels an eval: it is `inspect ctl process
    release`.
    """
    from watcher.sessions import release_finished

    done, left = release_finished(pid, dry_run=dry_run)
    if pid is not None and not done:
        click.echo(f"inspect-watch release: no running Inspect eval has pid {pid}", err=True)
        sys.exit(ExitCode.BAD_INPUT)
    if as_json:
        click.echo(json.dumps({"released": [asdict(r) for r in done],
                               "left": [{"pid": s.server.pid, "status": s.status}
                                        for s in left]}, indent=2))
    else:
        for r in done:
            click.echo(r.message)
        running = [s for s in left if not s.finished]
        if not done:
            click.echo("nothing to release: no finished eval is kept alive"
                       + (f" ({len(running)} running, left alone)" if running else ""))
        elif running:
            click.echo(f"{len(running)} running eval(s) left alone")
    if any(not r.ok for r in done):
        sys.exit(ExitCode.SOURCE)
