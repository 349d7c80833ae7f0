"""What a human can do about a finding: the watcher observes, people act.

The hand-off text is printed with every finding. It must be truthful: the
watcher never cancels, signals or changes anything, so the text says so and
names the actions available to the person running the eval — cancel the sample
from Inspect's TUI, ``inspect ctl sample cancel`` (only when the installed
Inspect has it), or a graceful ``kill -INT`` of the whole run after the user
agrees. Task names and sample ids come from datasets and agents, so every
value pasted into a command is shell-quoted and placed after ``--``.

:func:`finding_handoff` is what the watch puts in every finding it reports (JSONL
included, so an agent reading findings gets the commands too); the reporters render
it as they find it.
"""

from __future__ import annotations

import importlib.util
import shlex
from functools import lru_cache
from pathlib import Path

from watcher.findings import Finding

_CANCEL_MARKERS = ('@sample_group.command("cancel")', "--dry-run")
HANDOFF_MARKER = "inspect-watch only observes"


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


def sample_cancel_command(f: Finding, *, dry_run: bool) -> str:
    """The ``inspect ctl sample cancel`` command line for the finding's sample.

    Options come first and positional values after ``--`` so a sample id such
    as ``-rf`` cannot be parsed as an option; EPOCH is always explicit because
    a defaulted epoch would target a different attempt.
    """
    s = f.sample
    parts = ["inspect", "ctl", "sample", "cancel"]
    if s.model:
        parts += ["--model", shlex.quote(s.model)]
    if dry_run:
        parts.append("--dry-run")
    parts += ["--", shlex.quote(s.task), shlex.quote(str(s.sample_id)), str(int(s.epoch))]
    return " ".join(parts)


def handoff_text(f: Finding, pid: int | None, inspect_has_sample_cancel: bool,
                 live: bool = True, log_hint: bool = True) -> str:
    """The human-facing "what now" for a finding; never claims the watcher acted.

    ``live=False`` (a finished run read from its logs) leaves out the ways to stop a
    sample: there is nothing running to stop, only a transcript to read.
    ``log_hint=False`` does not name the log (one that will be deleted).
    """
    s = f.sample
    if not live:
        lines = [f"{HANDOFF_MARKER}: this was read from a finished run's log; "
                 "nothing was changed."]
        if s.log_location and log_hint:
            where = shlex.quote(s.log_location)
            lines.append(f"Log: {where} (open with: {view_command(s.log_location)})")
        return "\n".join(lines)
    lines = [
        f"{HANDOFF_MARKER}: it has not cancelled, stopped or changed anything.",
        "If this sample should stop, the person running the eval can:",
        "  - cancel it in the eval's terminal UI (Running Samples tab: Cancel (Score) "
        "or Cancel (Error));",
    ]
    if inspect_has_sample_cancel:
        lines += [
            "  - check the target first: " + sample_cancel_command(f, dry_run=True),
            "    then run the same command without --dry-run"
            " (add --action cancel or --action error to skip scoring).",
        ]
    if pid is not None:
        lines.append(
            f"  - stop the whole run, only if the user agrees: kill -INT {int(pid)}"
            " (the same graceful shutdown as Ctrl+C; never plain kill, SIGTERM or -9)."
        )
    if s.log_location and log_hint:
        where = shlex.quote(s.log_location)
        lines.append(f"Log: {where} (open with: {view_command(s.log_location)})")
    return "\n".join(lines)


def finding_handoff(f: Finding, live: bool = True, log_hint: bool = True) -> str:
    """The hand-off to print: the finding's own text plus the generated actions.

    Rules may carry their own advice in ``handoff``; the generated part (what the
    watcher did not do, and the cancel/interrupt commands) is appended unless
    the text already contains it. ``log_hint=False`` leaves out where the log is (for a
    log that will not be there to open: the demo's, without ``--keep-logs``).
    """
    if HANDOFF_MARKER in f.handoff:
        return f.handoff
    generated = handoff_text(f, f.sample.pid, live and detect_sample_cancel(), live=live,
                             log_hint=log_hint)
    return f"{f.handoff.rstrip()}\n{generated}" if f.handoff.strip() else generated


def view_command(log_location: str) -> str:
    """``inspect view --log-dir DIR`` for the directory (or bucket prefix) holding a log."""
    head, sep, _ = log_location.rstrip("/").rpartition("/")
    if not sep:
        log_dir = "."
    elif not head:
        log_dir = "/"
    elif head.endswith("/"):  # "file:///x.eval" -> "file:///"
        log_dir = head + "/"
    else:
        log_dir = head
    return view_dir_command(log_dir)


def view_dir_command(log_dir: str) -> str:
    """``inspect view --log-dir DIR``, shell-quoted."""
    return f"inspect view --log-dir {shlex.quote(log_dir)}"
