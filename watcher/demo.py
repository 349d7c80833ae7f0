"""``inspect-watch demo``: run the bundled example eval and watch it live.

The eval (``examples/demo_eval.py``, shipped in the wheel as
``watcher.examples``) uses the scripted model, so it needs no API key and no
network. It runs with a private discovery directory so the demo watches only
its own eval, watched like any live one through :func:`watcher.app.run`, and the eval
process is always stopped (SIGINT, then SIGKILL) before the demo returns.

At the end it names the samples without findings and says why that is right (the clean
sample did nothing a rule looks for). Without ``--keep-logs`` the eval's log goes to a
temporary directory removed at the end, so the findings' hand-offs do not name it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from watcher.exit_codes import ExitCode
from watcher.resources import bundled_dir

# what each of the demo eval's samples does, and so what the watch should say about it
EXPECTED = {
    "clean": (None, "it ran two different commands once each and submitted its answer, "
              "so no rule had anything to flag: that is the right result"),
    "repeated-call": ("repeated-tool-call", "it runs the same command five times"),
    "submit-loop": ("submit-loop", "it claims a final answer four times before submitting"),
}


class _Summary:
    """A sink that keeps the end-of-run summary, for the demo's closing words."""

    def __init__(self) -> None:
        self.summary: Any = None

    def start(self, context: Any) -> None:
        return None

    def finding(self, f: Any) -> None:
        return None

    def notice(self, n: Any) -> None:
        return None

    takes_status = False  # (the watch builds no snapshot for it)

    def status(self, snapshot: Any) -> None:
        return None

    def stop(self, summary: Any = None) -> None:
        self.summary = summary


def clean_samples_report(summary: Any) -> list[str]:
    """Lines naming each sample the watch found nothing in, and whether that is right."""
    if summary is None:
        return []
    flagged: dict[str, set[str]] = {}
    for f in summary.findings:
        flagged.setdefault(f.sample.sample_id, set()).add(f.rule)
    lines = []
    for s in summary.samples:
        rule, why = EXPECTED.get(s.sample_id, (None, "no rule matched what it did"))
        if s.sample_id in flagged:
            continue
        if rule is None:
            lines.append(f"inspect-watch demo: no findings for sample {s.sample_id}: {why}.")
        else:
            lines.append(f"inspect-watch demo: no findings for sample {s.sample_id}, but {why}: "
                         f"the {rule} rule should have flagged it (please report this).")
    return lines


def run_demo(keep_logs: str | None = None, no_color: bool = False,
             verbose: bool = False) -> ExitCode:
    """Run the example eval and watch it with :func:`watcher.app.run`; its exit code
    (a watch that found something is a demo that worked: 0)."""
    from watcher import app
    from watcher.engine import RuleLoadErrors

    try:  # before the eval starts: invalid rules (a user's rule directory) stop the demo
        engine = app.load_engine(app.WatchOptions())
    except RuleLoadErrors as e:
        app.say_rule_errors(e)
        return ExitCode.BAD_INPUT
    eval_file = bundled_dir("examples") / "demo_eval.py"
    with tempfile.TemporaryDirectory(prefix="inspect-watch-demo-", dir=_temp_root()) as tmp:
        data_home = Path(tmp) / "data"
        log_dir = Path(keep_logs) if keep_logs else Path(tmp) / "logs"
        env = {**os.environ, "XDG_DATA_HOME": str(data_home), "INSPECT_LOG_LEVEL": "warning"}
        cmd = [sys.executable, "-m", "inspect_ai._cli.main", "eval", f"{eval_file}@demo",
               "--log-dir", str(log_dir), "--display", "none"]
        click.echo("inspect-watch demo: starting the example eval "
                   "(scripted model, 3 samples: clean, repeated-call, submit-loop)")
        if not keep_logs:
            click.echo("inspect-watch demo: its log goes to a temporary directory, removed at "
                       "the end (--keep-logs DIR keeps it)")
        out = open(Path(tmp) / "eval.out", "wb")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=_default_sigint)  # no threads yet: fork-safe
        os.environ["INSPECT_WATCH_CONTROL_DIR"] = str(data_home / "inspect_ai" / "control")
        try:
            if not _wait_for_discovery(data_home, proc, timeout=90):
                out.flush()
                click.echo("inspect-watch demo: the example eval did not start:\n"
                           + (Path(tmp) / "eval.out").read_text()[-2000:], err=True)
                return ExitCode.SOURCE
            ending = _Summary()
            options = app.WatchOptions(poll=0.5, no_color=no_color, log_hints=bool(keep_logs),
                                       verbose=verbose)
            code = app.run(options, sinks=[ending], engine=engine)
            if code == ExitCode.OUTPUT_CLOSED:  # `demo | head`: nobody reads on; stop the eval
                return code
            if code == ExitCode.INTERRUPTED:  # Ctrl+C or SIGTERM: stop the eval, do not await it
                click.echo("inspect-watch demo: interrupted; stopping the example eval")
                return code
            proc.wait(timeout=60)
            for line in clean_samples_report(ending.summary):
                click.echo(line)
            click.echo(f"inspect-watch demo: eval finished; logs in {log_dir}" if keep_logs
                       else "inspect-watch demo: eval finished; its log was in a temporary "
                       "directory, now removed (--keep-logs DIR keeps it)")
            return ExitCode.OK if code in (ExitCode.OK, ExitCode.FAIL_ON) else code
        finally:
            os.environ.pop("INSPECT_WATCH_CONTROL_DIR", None)
            _stop(proc)
            out.close()


def _temp_root() -> str | None:
    """Where the demo's temporary directory goes: the system's, unless that path is so
    long that the eval's control socket (``…/data/inspect_ai/control/PID.sock``) would pass
    the AF_UNIX limit of 104-108 bytes (a macOS TMPDIR comes close); then ``/tmp``."""
    socket = Path(tempfile.gettempdir(), "inspect-watch-demo-xxxxxxxx", "data", "inspect_ai",
                  "control", "4194304.sock")
    return "/tmp" if len(str(socket)) > 100 and os.path.isdir("/tmp") else None


def _wait_for_discovery(data_home: Path, proc: subprocess.Popen[bytes], timeout: float) -> bool:
    path = data_home / "inspect_ai" / "control" / f"{proc.pid}.json"
    deadline = time.time() + timeout
    while time.time() < deadline:
        if path.exists():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.1)
    return False


def _default_sigint() -> None:
    """In the eval's process: SIGINT back to its default action. A demo started in the
    background of a non-interactive shell inherits an ignored SIGINT, and so would the
    eval; ``_stop`` would then wait in vain for Inspect's graceful stop and kill it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Leave no process behind: SIGINT (Inspect's graceful path), then SIGKILL."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=15)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)
