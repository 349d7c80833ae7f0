"""What a human can do about a finding: the watcher observes, people act.

The hand-off text is printed with every finding. It must be truthful: by default
the watcher never cancels, signals or changes anything, so the text says so and
names the actions available to the person running the eval — cancel the sample
from Inspect's TUI, ``inspect ctl sample cancel`` (only when the installed
Inspect has it), or a graceful ``kill -INT`` of the whole run after the user
agrees. Task names and sample ids come from datasets and agents, so every
value pasted into a command is shell-quoted and placed after ``--``.

With ``watch --act`` the watchdog (:mod:`watcher.act`) may act itself; its hand-off
(:func:`act_handoff_text`) says what its policy will do about the finding and what
it has done so far, in the server's terms, and still names the person's own ways.

:func:`finding_handoff` is what the watch puts in every finding it reports (JSONL
included, so an agent reading findings gets the commands too); the reporters render
it as they find it.
"""

from __future__ import annotations

import importlib.util
import shlex
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from watcher.act.verbs import CANCEL_SAMPLE, DRAIN_TASK, INTERRUPT_RUN
from watcher.discovery import pid_alive
from watcher.findings import Finding

_CANCEL_MARKERS = ('@sample_group.command("cancel")', "--dry-run")
HANDOFF_MARKER = "inspect-watch only observes"
ACT_MARKER = "inspect-watch watchdog"  # the hand-off of ``watch --act`` (act_handoff_text)
MARKERS = (HANDOFF_MARKER, ACT_MARKER)


@lru_cache(maxsize=1)
def detect_sample_cancel() -> bool:
    """True when the installed Inspect has ``inspect ctl sample cancel --dry-run``.

    Importing ``inspect_ai._cli.ctl._sample`` takes seconds (it pulls in most of
    Inspect), so this reads the module's source instead; locating the top-level
    package does not import it. Cached for the process.
    """
    try:
        spec = importlib.util.find_spec("inspect_ai")
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.submodule_search_locations:
        return False
    for root in spec.submodule_search_locations:
        path = Path(root) / "_cli" / "ctl" / "_sample.py"
        try:
            source = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if all(marker in source for marker in _CANCEL_MARKERS):
            return True
    return False


def sample_cancel_argv(f: Finding, *, dry_run: bool) -> list[str]:
    """The ``inspect ctl sample cancel`` command for the finding's sample, as an argument
    vector (nothing to quote: for a program that runs it without a shell).

    Options come first and positional values after ``--`` so a sample id such
    as ``-rf`` cannot be parsed as an option; EPOCH is always explicit because
    a defaulted epoch would target a different attempt.
    """
    s = f.sample
    argv = ["inspect", "ctl", "sample", "cancel"]
    if s.model:
        argv += ["--model", s.model]
    if dry_run:
        argv.append("--dry-run")
    return [*argv, "--", s.task, str(s.sample_id), str(int(s.epoch))]


def task_argv(verb: str, f: Finding, *, dry_run: bool) -> list[str]:
    """``inspect ctl task drain|pause`` for the finding's task (by its task id, which no
    other task shares; ``--model`` as well)."""
    s = f.sample
    argv = ["inspect", "ctl", "task", verb]
    if s.model:
        argv += ["--model", s.model]
    if dry_run:
        argv.append("--dry-run")
    return [*argv, "--", s.task_id or s.task]


def shell_line(argv: list[str]) -> str:
    """An argument vector as one shell command line, every value quoted."""
    return " ".join(shlex.quote(a) for a in argv)


def sample_cancel_command(f: Finding, *, dry_run: bool) -> str:
    """The ``inspect ctl sample cancel`` command line for the finding's sample, each value
    shell-quoted (see :func:`sample_cancel_argv`)."""
    return shell_line(sample_cancel_argv(f, dry_run=dry_run))


def process_running(pid: int | None) -> bool | None:
    """Whether the eval process ``pid`` still runs (``None``: no pid to ask about). A
    zombie (exited, not yet reaped by its parent) has exited: nothing is left to stop
    (:func:`~watcher.discovery.pid_alive` says so)."""
    if pid is None:
        return None
    return pid_alive(int(pid))


def eval_exited(pid: int | None, live: bool, remote: bool) -> bool:
    """Whether a live eval read here (not through a shared buffer) has exited since: its
    process ``pid`` no longer runs, so nothing is offered that would stop it."""
    return live and not remote and process_running(pid) is False


def handoff_text(f: Finding, pid: int | None, inspect_has_sample_cancel: bool,
                 live: bool = True, log_hint: bool = True, remote: bool = False,
                 exited: bool = False) -> str:
    """The human-facing "what now" for a finding; never claims the watcher acted.

    ``live=False`` (a finished run read from its logs) leaves out the ways to stop a
    sample: there is nothing running to stop, only a transcript to read.
    ``log_hint=False`` does not name the log (one that will be deleted). ``remote``: the
    eval is read through its shared sample buffer, which carries no control channel, so
    the ways to stop a sample are on the machine running the eval (perhaps another one:
    the text does not claim this watch can reach it). ``exited``: the eval process has
    exited since (nothing to cancel or interrupt any more: only its log to read).
    """
    s = f.sample
    if not live or exited:
        lines = [f"{HANDOFF_MARKER}: this was read from a finished run's log; "
                 "nothing was changed."] if not live else [
            f"{HANDOFF_MARKER}: it has not cancelled, stopped or changed anything. The eval "
            f"process (pid {int(pid or 0)}) has exited since: there is nothing left to "
            "cancel or stop, only its log to read."]
        if s.log_location and log_hint:
            where = shlex.quote(s.log_location)
            lines.append(f"Log: {where} (open with: {view_command(s.log_location)})")
        return "\n".join(lines)
    lines = [f"{HANDOFF_MARKER}: it has not cancelled, stopped or changed anything."]
    if remote:
        lines.append(
            "It reads this eval from the sample buffer the eval shares beside its log "
            "(--log-shared), which has no control channel: nothing can be done to the "
            "sample through this watch.")
        lines += _person_lines(f, pid, inspect_has_sample_cancel, remote=True,
                               lead="If this sample should stop, the person running the "
                                    "eval can, on the machine running the eval:")
    else:
        lines += _person_lines(f, pid, inspect_has_sample_cancel)
    if s.log_location and log_hint:
        where = shlex.quote(s.log_location)
        lines.append(f"Log: {where} (open with: {view_command(s.log_location)})")
    return "\n".join(lines)


def _person_lines(f: Finding, pid: int | None, inspect_has_sample_cancel: bool,
                  lead: str = "If this sample should stop, the person running the eval "
                              "can:", remote: bool = False) -> list[str]:
    """The ways the person running the eval has to stop the sample or the run
    (``remote``: they are there, where the eval's control channel is)."""
    if f.category == "budget":  # about the task: its spend, not this one sample
        lead = lead.replace("If this sample should stop", "If the task should spend no more")
    lines = [lead]
    if f.category == "budget" and inspect_has_sample_cancel:
        lines += [
            "  - drain the task (no new samples start; running ones finish), checking the "
            "target first: " + shell_line(task_argv("drain", f, dry_run=True)),
            "    then run the same command without --dry-run;",
        ]
    lines.append("  - cancel it in the eval's terminal UI (Running Samples tab: Cancel (Score) "
                 "or Cancel (Error));")
    if inspect_has_sample_cancel:
        lines += [
            "  - check the target first: " + sample_cancel_command(f, dry_run=True),
            "    then run the same command without --dry-run"
            " (add --action cancel or --action error to skip scoring)"
            + ("; both there, where the eval's control channel is." if remote else "."),
        ]
    if pid is not None:
        lines.append(
            f"  - stop the whole run, only if the user agrees: kill -INT {int(pid)}"
            " (the same graceful shutdown as Ctrl+C; never plain kill, SIGTERM or -9)."
        )
    return lines


def act_handoff_text(f: Finding, *, mode: str, plan: str | None, done: list[str],
                     log_hint: bool = True, nearby: list[str] | None = None) -> str:
    """The hand-off of a live finding under ``watch --act`` (``mode`` ``act`` or
    ``dry-run``): what the watchdog's policy will do about it (``plan``, the watchdog's
    words; ``None``: nothing), what it has done so far (``done``: one line per action
    record, saying what the server answered), what it did about the same sample, task
    or run for other findings (``nearby``: a finding its own cancel caused must not read
    as if nothing was done), and the person's own ways.

    It claims only what the records say: a cancel the server accepted is "requested",
    not done, until the listing shows the sample ended by it.
    """
    s = f.sample
    flag = "--act --dry-run" if mode == "dry-run" else "--act"
    if done:
        lines = [f"{ACT_MARKER} ({flag}): what it did about this finding:"]
        lines += [f"  - {line}" for line in done]
    elif plan is not None:
        lines = [f"{ACT_MARKER} ({flag}): its policy says: {plan}",
                 "  Each step is written as an action record (kind \"action\") after this "
                 "finding." + (" Dry run: nothing is changed." if mode == "dry-run" else "")]
    elif nearby:
        lines = [f"{ACT_MARKER} ({flag}): no action in its policy for this finding."]
    else:
        lines = [f"{ACT_MARKER} ({flag}): no action in its policy for this finding; it has "
                 "not acted on this sample, its task or its run."]
    if nearby and not done:
        lines.append("  About this sample, its task or its run, for other findings, it has:")
        lines += [f"  - {line}" for line in nearby]
    lines += _person_lines(f, s.pid, detect_sample_cancel(),
                           lead="The person running the eval can also:"
                           if plan or done or nearby
                           else "If this sample should stop, the person running the eval "
                                "can:")
    if s.log_location and log_hint:
        where = shlex.quote(s.log_location)
        lines.append(f"Log: {where} (open with: {view_command(s.log_location)})")
    return "\n".join(lines)


def finding_handoff(f: Finding, live: bool = True, log_hint: bool = True,
                    remote: bool = False, exited: bool | None = False) -> str:
    """The hand-off to print: the finding's own text plus the generated actions.

    Rules may carry their own advice in ``handoff``; the generated part (what the
    watcher did not do, and the cancel/interrupt commands) is appended unless
    the text already contains it. ``log_hint=False`` leaves out where the log is (for a
    log that will not be there to open: the demo's, without ``--keep-logs``); ``remote``
    says the ways to stop a sample are on the machine that runs it; ``exited``: the eval
    process has exited (``None``: ask the process, as the watch does when it routes a
    finding), so nothing is offered that would stop it.
    """
    if any(marker in f.handoff for marker in MARKERS):
        return f.handoff
    if exited is None:
        exited = eval_exited(f.sample.pid, live, remote)
    generated = handoff_text(f, f.sample.pid, live and detect_sample_cancel(), live=live,
                             log_hint=log_hint, remote=remote, exited=exited)
    return f"{f.handoff.rstrip()}\n{generated}" if f.handoff.strip() else generated


def log_dir_of(log_location: str) -> str:
    """The directory (or bucket prefix) holding a log."""
    head, sep, _ = log_location.rstrip("/").rpartition("/")
    if not sep:
        return "."
    if not head:
        return "/"
    if head.endswith("/"):  # "file:///x.eval" -> "file:///"
        return head + "/"
    return head


def view_command(log_location: str) -> str:
    """``inspect view --log-dir DIR`` for the directory (or bucket prefix) holding a log."""
    return view_dir_command(log_dir_of(log_location))


def view_dir_command(log_dir: str) -> str:
    """``inspect view --log-dir DIR``, shell-quoted."""
    return f"inspect view --log-dir {shlex.quote(log_dir)}"


# -- the hand-off as data (a finding's ``actions``, docs/findings.md) -------------------

# who can take an action: anyone with ``inspect ctl`` where the eval's control channel
# is; the person at the eval's terminal UI; the person running the eval, in a shell;
# the watchdog (``watch --act``); anyone who can read the log
BY = ("inspect_ctl", "person_tui", "person_shell", "watchdog", "anyone")
# fields of a target, by the action's scope
_TARGET = {
    "sample": ("task", "task_id", "eval_id", "model", "sample_id", "epoch", "attempt", "pid"),
    "tool_call": ("task", "task_id", "eval_id", "model", "sample_id", "epoch", "attempt",
                  "pid"),
    "task": ("task", "task_id", "eval_id", "model", "pid"),
    "run": ("pid",),
    "log": ("log_location",),
}


def target(f: Finding, scope: str) -> dict[str, Any]:
    """What an action of ``scope`` about ``f`` acts on (task and sample ids are dataset
    controlled: data, never words of ours)."""
    s = f.sample
    return {k: getattr(s, k) for k in _TARGET.get(scope, ())}


def action(verb: str, by: str, scope: str, f: Finding, *, argv: list[str] | None = None,
           dry_run_argv: list[str] | None = None, changes: bool = True,
           needs: str | None = None, where: str = "here", note: str = "",
           **extra: Any) -> dict[str, Any]:
    """One entry of a finding's ``actions``: ``command`` and ``dry_run_command`` are the
    argument vectors as shell lines (every value quoted), ``argv`` and ``dry_run_argv``
    the same for a program that runs them without a shell; ``null`` where there is none
    (a click in the TUI, a watchdog's own step)."""
    return {"verb": verb, "by": by, "scope": scope,
            "command": shell_line(argv) if argv else None,
            "dry_run_command": shell_line(dry_run_argv) if dry_run_argv else None,
            "argv": argv, "dry_run_argv": dry_run_argv, "changes_eval": changes,
            "needs": needs, "where": where, "target": target(f, scope), "note": note,
            **extra}


def finding_actions(f: Finding, *, live: bool = True, log_hint: bool = True,
                    remote: bool = False, exited: bool | None = None) -> list[dict[str, Any]]:
    """What can be done about ``f``, as data: the hand-off's ways, each with who can take
    it, on what, and the command (and its dry run). An agent decides from these fields
    alone; the hand-off text says the same in words.

    A finished run (``live=False``) or an eval process that has exited (``exited``;
    asked of the process when ``None``) offers only its log: nothing is left to cancel
    or interrupt. ``remote``: the ways to stop the sample are on the machine running
    the eval (``where: "eval_host"``).
    """
    s = f.sample
    if exited is None:
        exited = eval_exited(s.pid, live, remote)
    out: list[dict[str, Any]] = []
    if live and not exited:
        where = "eval_host" if remote else "here"
        if detect_sample_cancel():
            if f.category == "budget":
                out.append(action(
                    DRAIN_TASK.name, "inspect_ctl", DRAIN_TASK.scope, f, where=where,
                    argv=task_argv("drain", f, dry_run=False),
                    dry_run_argv=task_argv("drain", f, dry_run=True),
                    note="no new samples start; running ones finish on their own"))
            out.append(action(
                CANCEL_SAMPLE.name, "inspect_ctl", CANCEL_SAMPLE.scope, f, where=where,
                argv=sample_cancel_argv(f, dry_run=False),
                dry_run_argv=sample_cancel_argv(f, dry_run=True),
                note="scores what the sample did (--action score, the default); "
                     "--action cancel records it cancelled, unscored"))
        out.append(action(CANCEL_SAMPLE.name, "person_tui", CANCEL_SAMPLE.scope, f, where=where,
                          note="in the eval's terminal UI: Running Samples tab, Cancel "
                               "(Score) or Cancel (Error)"))
        if s.pid is not None:
            out.append(action(
                INTERRUPT_RUN, "person_shell", "run", f, where=where,
                argv=["kill", "-INT", str(int(s.pid))], needs="user_consent",
                note="the whole run, the same graceful shutdown as Ctrl+C; never plain "
                     "kill, SIGTERM or -9"))
    if s.log_location and log_hint:
        out.append(action("view_log", "anyone", "log", f, changes=False,
                          argv=["inspect", "view", "--log-dir", log_dir_of(s.log_location)],
                          note="the transcript, in Inspect's log viewer"))
    return out


# (finding, live, log hint, remote) -> its actions; the watchdog's adds its own plan
Actions = Callable[[Finding, bool, bool, bool], list[dict[str, Any]]]
