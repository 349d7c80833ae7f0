"""``inspect-watch launch -- inspect eval[-set] ...``: start an eval the way babysitting needs.

In a detached tmux session with Inspect's full TUI (a person can attach and cancel one
sample), or ``headless`` (Inspect's own ``--detach``: no TUI, so per-sample cancel
is ``inspect ctl`` or the watchdog's). What it adds to the command:

- the flag that keeps the control surface alive after the eval finishes, so its results
  stay readable until it is released: ``--ctl-server=keep`` in inspect-ai 0.3.285,
  ``--keep-alive`` in older releases (which one is read from the installed Inspect's own
  ``--help``);
- for ``inspect eval`` without ``--log-dir``, the log dir Inspect would use, made
  explicit; ``inspect eval-set`` must name its ``--log-dir`` (the resume key: running the
  same command again resumes it).

It refuses a session name already taken, waits for the eval's control endpoint to bind
(its discovery file, and an answer on its socket) before saying it started, and writes a
launch record (:class:`watcher.sessions.LaunchRecord`: the exact command, working
directory, log dir, session, pid), from which ``launch --again`` runs it once more.

The session's program gets this process's environment (API keys, ``PATH``): tmux gives
a new session its server's environment, not its client's, so it is passed in a file
only the user can read, which the session deletes as soon as it has read it. Nothing
here imports inspect_ai.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from watcher.discovery import ControlServer, list_servers, pid_alive
from watcher.sessions import LaunchRecord, records_dir

BIND_WAIT = 120.0  # seconds to wait for the control endpoint
TMUX_INSTALL = ("tmux is not installed: `sudo apt-get install tmux` (Debian, Ubuntu), "
                "`sudo dnf install tmux` (Fedora), `brew install tmux` (macOS); or run "
                "without a terminal UI: `inspect-watch launch --headless -- ...`")
# what the session runs: the environment from its file (then deleted), the command, and
# its exit code left beside the record; a command that failed keeps the window open
WRAPPER = (
    'set -a; . "$0"; set +a; rm -f "$0"; exit_file="$1"; shift; "$@"; code=$?; '
    'echo "$code" > "$exit_file"; if [ "$code" -ne 0 ]; then '
    "printf '\\n[inspect-watch] the command exited with code %s; press Enter to close "
    "this window\\n' \"$code\"; read _; fi; exit \"$code\"")
_NAME = re.compile(r"[^A-Za-z0-9_-]+")


class LaunchError(Exception):
    """Why a launch was refused (said to the user as is): nothing was started."""


class LaunchFailed(LaunchError):
    """The command was started and failed (exited, never bound, tmux failed)."""


@dataclass(frozen=True)
class Command:
    """An ``inspect eval`` / ``inspect eval-set`` command line, understood."""

    argv: list[str]  # as given
    sub: str  # "eval" | "eval-set"
    log_dir: str | None  # as given
    ctl_server: str | None  # the value of --ctl-server, if given
    keep_alive: bool  # --keep-alive given


def _option(argv: list[str], name: str) -> tuple[str | None, bool]:
    """The value of option ``name`` (``--x V`` or ``--x=V``) and whether it is present."""
    for i, a in enumerate(argv):
        if a == name:
            return (argv[i + 1] if i + 1 < len(argv) else None), True
        if a.startswith(name + "="):
            return a.split("=", 1)[1], True
    return None, False


def parse_command(argv: list[str]) -> Command:
    """Check that ``argv`` runs ``inspect eval`` or ``inspect eval-set``."""
    if len(argv) < 2 or Path(argv[0]).name != "inspect" or argv[1] not in ("eval",
                                                                            "eval-set"):
        raise LaunchError("launch runs `inspect eval ...` or `inspect eval-set ...`: give it "
                          "after `--`, e.g. `inspect-watch launch -- inspect eval-set "
                          "TASKS --model M --log-dir DIR`")
    rest = argv[2:]
    log_dir, _ = _option(rest, "--log-dir")
    ctl, _ = _option(rest, "--ctl-server")
    if ctl is not None and ctl.lower() in ("false", "off", "no", "0"):
        raise LaunchError("--ctl-server false turns off the control channel that watching, "
                          "cancelling and releasing need")
    return Command(list(argv), argv[1], log_dir, ctl, "--keep-alive" in rest)


_HELP: dict[tuple[str, str], str] = {}


def help_text(inspect: str, sub: str, env: dict[str, str]) -> str:
    """``inspect SUB --help`` of the installed Inspect (run once per process)."""
    key = (inspect, sub)
    if key not in _HELP:
        try:
            res = subprocess.run([inspect, sub, "--help"], capture_output=True, text=True,
                                 timeout=120, env=env, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise LaunchError(f"cannot run `{inspect} {sub} --help` to see what it "
                              f"supports: {e}") from e
        _HELP[key] = res.stdout
    return _HELP[key]


def keep_flag(inspect: str, sub: str, env: dict[str, str]) -> str | None:
    """The flag of the installed Inspect that keeps a finished eval's control surface up:
    ``--ctl-server=keep`` (0.3.285), ``--keep-alive`` (older), or ``None``."""
    text = help_text(inspect, sub, env)
    if "--ctl-server" in text and "keep" in text:
        return "--ctl-server=keep"
    if "--keep-alive" in text:
        return "--keep-alive"
    return None


def supports_detach(inspect: str, sub: str, env: dict[str, str]) -> bool:
    return "--detach" in help_text(inspect, sub, env)


def first_task(cmd: Command) -> str:
    """A short name for the command's first task (for a default session name)."""
    for a in cmd.argv[2:]:
        if a.startswith("-"):
            break
        name = a.rsplit("@", 1)[-1] if "@" in a else Path(a).stem
        return name or cmd.sub
    return cmd.sub


def session_name(name: str) -> str:
    """A tmux-safe session name (tmux refuses ``.`` and ``:``)."""
    return _NAME.sub("-", name).strip("-") or "inspect"


@dataclass
class Plan:
    """What will run, decided before anything starts."""

    command: list[str]
    added: list[str]
    keep: str | None
    log_dir: str  # absolute
    given: list[str]


def plan(argv: list[str], cwd: str, env: dict[str, str], *, headless: bool = False,
         keep: Callable[[str, str, dict[str, str]], str | None] = keep_flag) -> Plan:
    """The command to run and what launch adds to it (raises :class:`LaunchError`)."""
    cmd = parse_command(argv)
    inspect = shutil.which(cmd.argv[0], path=env.get("PATH")) or cmd.argv[0]
    if not Path(inspect).exists():
        raise LaunchError(f"`{cmd.argv[0]}` not found on PATH: is Inspect installed in this "
                          "environment?")
    out = list(cmd.argv)
    added: list[str] = []
    if "--detach" in out[2:] and not headless:
        raise LaunchError("--detach runs the eval without its terminal UI: use "
                          "`inspect-watch launch --headless -- ...` for that")
    log_dir = cmd.log_dir
    if log_dir is None:
        if cmd.sub == "eval-set":
            raise LaunchError("inspect eval-set needs --log-dir: it is the resume key (running "
                              "the same command again resumes the set from it)")
        log_dir = env.get("INSPECT_LOG_DIR") or "./logs"
        if "://" not in log_dir:
            log_dir = str(Path(cwd, log_dir).expanduser().resolve())
        out += ["--log-dir", log_dir]
        added.append(f"--log-dir {log_dir} (where Inspect would write by default)")
    flag: str | None
    if cmd.keep_alive or (cmd.ctl_server or "").lower() == "keep":
        flag = "--keep-alive" if cmd.keep_alive else "--ctl-server=keep"  # given already
    else:
        flag = keep(inspect, cmd.sub, env)
        if flag is not None:
            if flag == "--ctl-server=keep" and cmd.ctl_server is not None:
                # another value given (`true`): keep is the same server, kept up
                out = [a for i, a in enumerate(out) if not (
                    a.startswith("--ctl-server=") or a == "--ctl-server"
                    or (i > 0 and out[i - 1] == "--ctl-server"))]
            out.append(flag)
            added.append(f"{flag} (the control surface stays up after the eval finishes, "
                         "until `inspect-watch release`)")
    local = log_dir if "://" in log_dir else str(Path(cwd, log_dir).expanduser().resolve())
    return Plan(out, added, flag, local, list(argv))


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        pass
    try:
        res = subprocess.run(["ps", "-o", "ppid=", "-p", str(pid)], capture_output=True,
                             text=True, timeout=10)
        return int(res.stdout.strip())
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def _answers(server: ControlServer) -> bool:
    from watcher.sources.base import SourceError
    from watcher.sources.http import HttpSource

    src = HttpSource(server, retries=0, timeout=5.0)
    try:
        src.tasks()
        return True
    except SourceError:
        return False
    finally:
        src.close()


def wait_bound(find: Callable[[], ControlServer | None], failed: Callable[[], str | None],
               wait: float) -> ControlServer:
    """Until the eval's control endpoint answers; :class:`LaunchError` if the command
    ended first (``failed`` says why) or ``wait`` passed."""
    deadline = time.monotonic() + wait
    while True:
        server = find()
        if server is not None and _answers(server):
            return server
        why = failed()
        if why is not None:
            raise LaunchFailed(why)
        if time.monotonic() > deadline:
            raise LaunchFailed(f"the eval's control endpoint did not bind within {wait:g} s")
        time.sleep(0.2)


# what belongs to the terminal the launch was typed in, not to the tmux window
TERMINAL_VARS = frozenset({"TERM", "TERM_PROGRAM", "TERM_PROGRAM_VERSION", "COLORTERM",
                           "TMUX", "TMUX_PANE", "COLUMNS", "LINES", "PWD", "OLDPWD", "SHLVL",
                           "_"})


def _env_file(path: Path, env: dict[str, str]) -> None:
    """The environment as ``sh`` assignments, readable by the user alone."""
    lines = [f"{k}={shlex.quote(v)}" for k, v in env.items()
             if k not in TERMINAL_VARS and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k)]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write("\n".join(lines) + "\n")


def _record_id(name: str) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    rid = f"{name}-{stamp}"
    n = 2
    while (records_dir() / f"{rid}.json").exists():
        rid = f"{name}-{stamp}-{n}"
        n += 1
    return rid


class Tmux:
    """One tmux server (the default, or ``-L socket``)."""

    def __init__(self, socket: str | None = None) -> None:
        exe = shutil.which("tmux")
        if exe is None:
            raise LaunchError(TMUX_INSTALL)
        self.base = [exe, *(["-L", socket] if socket else [])]

    def run(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        res = subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=30,
                             stdin=subprocess.DEVNULL)
        if check and res.returncode != 0:
            raise LaunchError(f"tmux {args[0]}: {res.stderr.strip() or res.stdout.strip()}")
        return res

    def has(self, name: str) -> bool:
        return self.run("has-session", "-t", f"={name}").returncode == 0

    def pane_pid(self, name: str) -> int | None:
        res = self.run("list-panes", "-t", f"={name}", "-F", "#{pane_pid}")
        try:
            return int(res.stdout.split()[0])
        except (ValueError, IndexError):
            return None

    def capture(self, name: str, lines: int = 40) -> str:
        res = self.run("capture-pane", "-p", "-t", f"={name}:", "-S", f"-{lines}")
        return res.stdout.rstrip()


def launch_tmux(p: Plan, *, cwd: str, env: dict[str, str], name: str | None,
                socket: str | None = None, wait: float = BIND_WAIT) -> LaunchRecord:
    """Run the planned command in a new detached tmux session; its record once bound."""
    tmux = Tmux(socket)
    if name is not None:
        session = session_name(name)
        if tmux.has(session):
            raise LaunchError(f"a tmux session named {session!r} exists already: choose "
                              "another --name (`tmux ls` lists them)")
    else:
        base = session_name(f"iw-{first_task(parse_command(p.given))}")
        session, n = base, 2
        while tmux.has(session):
            session, n = f"{base}-{n}", n + 1
    rid = _record_id(session)
    d = records_dir()
    d.mkdir(parents=True, exist_ok=True)
    envfile = d / f"{rid}.env"
    _env_file(envfile, env)
    record = LaunchRecord(id=rid, session=session, mode="tmux", command=p.command,
                          given=p.given, cwd=cwd, log_dir=p.log_dir, started_at=time.time(),
                          tmux_socket=socket, keep=p.keep, added=p.added)
    record.exit_file.unlink(missing_ok=True)
    res = tmux.run("new-session", "-d", "-s", session, "-x", "200", "-y", "50", "-c", cwd,
                   "/bin/sh", "-c", WRAPPER, str(envfile), str(record.exit_file), *p.command)
    if res.returncode != 0:
        envfile.unlink(missing_ok=True)
        if "duplicate session" in res.stderr:
            raise LaunchError(f"a tmux session named {session!r} exists already: choose "
                              "another --name")
        raise LaunchFailed(f"tmux new-session failed: {res.stderr.strip()}")
    pane = tmux.pane_pid(session)

    def find() -> ControlServer | None:
        if pane is None:
            return None
        for s in list_servers():
            if s.pid == pane or _ppid(s.pid) == pane:
                return s
        return None

    def failed() -> str | None:
        code = record.exit_code()
        if code is None and (pane is None or pid_alive(pane)):
            return None
        screen = tmux.capture(session) if tmux.has(session) else ""
        tail = "\n".join(screen.splitlines()[-25:])
        where = (f"; the window stays open: {shlex.join(record.tmux())} attach -t "
                 f"{session}" if tmux.has(session) else "")
        return (f"the command exited (code {code if code is not None else '?'}) before its "
                f"control endpoint bound{where}" + (f"\n{tail}" if tail else ""))

    try:
        server = wait_bound(find, failed, wait)
    finally:
        envfile.unlink(missing_ok=True)  # read by now (or never will be)
    record.pid = server.pid
    record.save()
    return record


def launch_headless(p: Plan, *, cwd: str, env: dict[str, str], name: str | None,
                    wait: float = BIND_WAIT) -> LaunchRecord:
    """Run the planned command without a terminal UI: Inspect's own ``--detach`` (it
    returns once the control endpoint is bound), or a detached process where the
    installed Inspect has no ``--detach``."""
    session = session_name(name or f"iw-{first_task(parse_command(p.given))}")
    rid = _record_id(session)
    d = records_dir()
    d.mkdir(parents=True, exist_ok=True)
    command = list(p.command)
    inspect = shutil.which(command[0], path=env.get("PATH")) or command[0]
    record = LaunchRecord(id=rid, session=session, mode="headless", command=command,
                          given=p.given, cwd=cwd, log_dir=p.log_dir, started_at=time.time(),
                          keep=p.keep, added=list(p.added))
    if supports_detach(inspect, command[1], env):
        if "--detach" not in command:
            command.append("--detach")
            record.added.append("--detach (Inspect runs it in the background once its "
                                "control endpoint is bound)")
        try:
            res = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                                 timeout=wait, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            raise LaunchFailed(f"`inspect ... --detach` did not report its launch within "
                              f"{wait:g} s") from e
        launched = None
        for line in res.stdout.splitlines():
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict) and doc.get("event") == "launch":
                launched = doc
        if res.returncode != 0 or launched is None:
            tail = "\n".join((res.stderr or res.stdout).splitlines()[-25:])
            raise LaunchFailed(f"the command exited (code {res.returncode}) without launching"
                              + (f":\n{tail}" if tail else ""))
        if not launched.get("control"):
            raise LaunchFailed("the eval launched, but its control endpoint did not bind "
                              "(`control` is null in Inspect's launch record)")
        record.pid = int(launched["pid"])
        record.output_file = launched.get("output_file")
        if launched.get("log_dir"):
            record.log_dir = str(launched["log_dir"])
    else:
        out = d / f"{rid}.out"
        with out.open("wb") as fh:
            proc = subprocess.Popen([*command, "--display", "none"], cwd=cwd, env=env,
                                    stdout=fh, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        record.output_file = str(out)

        def find() -> ControlServer | None:
            return next((s for s in list_servers() if s.pid == proc.pid), None)

        def failed() -> str | None:
            code = proc.poll()
            return None if code is None else (
                f"the command exited (code {code}) before its control endpoint bound; its "
                f"output: {out}")

        wait_bound(find, failed, wait)
        record.pid = proc.pid
    record.command = command
    record.save()
    return record


def again(record: LaunchRecord) -> list[str]:
    """The recorded command, to run once more (the flags launch added are in it;
    Inspect's ``--detach`` is added again by a headless launch)."""
    return [a for a in record.command if a != "--detach"]


def manage_lines(record: LaunchRecord) -> list[str]:
    """The commands a person needs to manage the run, one per line."""
    t = shlex.join(record.tmux())
    s = shlex.quote(record.session)
    pid = record.pid
    lines = ["  list:     inspect-watch sessions",
             "  watch:    inspect-watch watch --release-when-done"]
    if record.mode == "tmux":
        lines += [
            f"  peek:     {t} capture-pane -p -t {s}        (its screen, without attaching)",
            f"  attach:   {t} attach -t {s}                 (detach: the tmux prefix, then "
            "d; cancel a sample in Inspect's screen)",
        ]
    lines += [
        f"  release:  inspect-watch release {pid}              (once it has finished: its "
        "process then exits)",
        f"  stop:     kill -INT {pid}                          (as Ctrl+C: the eval stops "
        "gracefully)",
    ]
    if record.mode == "tmux":
        lines.append(f"  kill:     {t} kill-session -t {s}          (ends it at once)")
    else:
        lines.append(f"  output:   {record.output_file}")
    return lines


def describe(record: LaunchRecord) -> str:
    """What to tell the user once it started."""
    where = (f"tmux session {record.session}" if record.mode == "tmux"
             else f"the background, headless ({record.session})")
    lines = [f"launched in {where}: pid {record.pid}, its control endpoint is up",
             f"  command:  {shlex.join(record.command)}",
             f"  in:       {record.cwd}",
             f"  log dir:  {record.log_dir}",
             f"  record:   {record.path}"]
    for a in record.added:
        lines.append(f"  added:    {a}")
    if record.keep is None:
        lines.append("  note:     this Inspect cannot keep a finished eval's control surface "
                     "up: its process exits when the eval ends")
    if record.mode == "headless":
        lines.append("  headless: no terminal UI, so cancelling one sample by hand is "
                     f"`inspect ctl sample cancel` (pid {record.pid}); otherwise only the "
                     "watchdog (`inspect-watch watch --act`) will, or nobody")
    lines.append("")
    lines += manage_lines(record)
    return "\n".join(lines)


def run(argv: list[str], *, name: str | None = None, headless: bool = False,
        socket: str | None = None, wait: float = BIND_WAIT, cwd: str | None = None,
        env: dict[str, str] | None = None) -> LaunchRecord:
    """Plan and launch; the record once the control endpoint answers."""
    cwd = cwd or os.getcwd()
    env = dict(os.environ if env is None else env)
    if not headless and shutil.which("tmux") is None:
        raise LaunchError(TMUX_INSTALL)
    p = plan(argv, cwd, env, headless=headless)
    if headless:
        return launch_headless(p, cwd=cwd, env=env, name=name, wait=wait)
    return launch_tmux(p, cwd=cwd, env=env, name=name, socket=socket, wait=wait)


def main_error(e: LaunchError) -> None:
    print(f"inspect-watch launch: {e}", file=sys.stderr)
