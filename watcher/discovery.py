"""Find running eval processes from Inspect's control discovery files.

Each eval process writes ``<user data dir>/inspect_ai/control/<pid>.json``
(the directory ``inspect_ai._util.appdirs.inspect_data_dir("control")``
computes, via platformdirs). We read it without importing inspect_ai, never
create or chmod it (the watcher must not loosen its permissions), and skip
files whose pid is dead or whose JSON is malformed.

A discovery file says which socket to trust with our requests and whose answers
we show: only a regular file owned by the current user and writable by nobody
else is read, and only if its socket (when there is one yet) is likewise ours
(Inspect makes both ``0600`` in a ``0700`` directory). A file or socket that fails
the check is skipped and said so (stderr, or a list the caller shows as notices).
"""

from __future__ import annotations

import json
import os
import stat
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

from platformdirs import user_data_path

# The newest control-API version this watcher was written against.
KNOWN_API_VERSION = 8
# A discovery file is a few hundred bytes; one larger than this is not read.
MAX_DISCOVERY_BYTES = 64 * 1024


@dataclass(frozen=True)
class ControlServer:
    """One running eval process's control endpoint."""

    pid: int
    socket_path: Path
    started_at: float
    api_version: int
    run_id: str | None = None
    eval_set_id: str | None = None

    @property
    def api_known(self) -> bool:
        """Whether this watcher speaks the server's API version over HTTP."""
        return self.api_version <= KNOWN_API_VERSION


def discovery_dir() -> Path:
    """The directory Inspect writes discovery files to (not created here)."""
    override = os.environ.get("INSPECT_WATCH_CONTROL_DIR")
    if override:
        return Path(override)
    return user_data_path("inspect_ai") / "control"


def pid_alive(pid: int) -> bool:
    """True if ``pid`` is a live process (signal 0 probe).

    A process that exited but was not yet reaped by its parent (a zombie: an eval
    started with ``subprocess.Popen`` by an agent or a script that has not waited for
    it) still answers signal 0; on Linux its state in ``/proc`` says it is over. Without
    that, ``watch --release-when-done`` waited its whole grace for an eval that had
    exited, and said it had not.
    """
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """``pid`` has exited and waits to be reaped (Linux; elsewhere, never known)."""
    try:  # (asked for every finding a live watch routes: os.read, not a file object)
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
        try:
            stat_line = os.read(fd, 4096)
        finally:
            os.close(fd)
    except OSError:
        return False
    # "pid (comm) S ...": the command may hold spaces and parentheses, the state follows
    # the last ")"
    if stat_line.rpartition(b")")[2].split()[:1] not in ([b"Z"], [b"X"]):
        return False
    # a main thread that ended before the others shows its process as a zombie while
    # they run on: only a process with no thread left is over
    try:
        return len(os.listdir(f"/proc/{pid}/task")) <= 1
    except OSError:
        return True


def _untrusted(st: os.stat_result, what: str, want: int) -> str | None:
    """Why a discovery file or socket (``what``) is not to be trusted, or None."""
    if stat.S_IFMT(st.st_mode) != want:
        return f"{what} is not a {'regular file' if want == stat.S_IFREG else 'socket'}"
    if st.st_uid != os.geteuid():
        return f"{what} is owned by uid {st.st_uid}, not by you (uid {os.geteuid()})"
    if st.st_mode & 0o022:
        return f"{what} is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _read_discovery(path: Path) -> tuple[bytes | None, str | None]:
    """The file's bytes if it is ours to trust, else (None, why)."""
    flags = (os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
             | getattr(os, "O_CLOEXEC", 0))
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None, None  # removed since it was listed: its process has ended
    except OSError as e:
        return None, "it is a symlink" if os.path.islink(path) else (
            f"it cannot be read ({e.strerror})")
    with os.fdopen(fd, "rb") as fh:
        why = _untrusted(os.fstat(fd), "it", stat.S_IFREG)
        if why is not None:
            return None, why
        data = fh.read(MAX_DISCOVERY_BYTES + 1)
    if len(data) > MAX_DISCOVERY_BYTES:
        return None, f"it is larger than {MAX_DISCOVERY_BYTES} bytes"
    return data, None


_said: set[str] = set()


def _skip(message: str, skipped: list[str] | None) -> None:
    if skipped is not None:
        skipped.append(message)
    elif message not in _said:  # once per process: discovery runs every poll
        _said.add(message)
        print(f"inspect-watch: {message}", file=sys.stderr, flush=True)


def list_servers(directory: Path | None = None,
                 skipped: list[str] | None = None) -> list[ControlServer]:
    """Alive control servers, most recently started first.

    Files (or sockets) that are not the current user's alone are left out, each with a
    message: appended to ``skipped`` if given, else said once on stderr.
    """
    directory = directory or discovery_dir()
    found: list[ControlServer] = []
    try:
        entries = sorted(directory.glob("*.json"))
    except OSError:
        return []
    for path in entries:
        raw, why = _read_discovery(path)
        if raw is None:
            if why is not None:
                _skip(f"skipping control discovery file {path}: {why}", skipped)
            continue
        try:
            data = json.loads(raw)
            pid = int(data["pid"])
            sock = Path(str(data["socket_path"]))
        except (ValueError, KeyError, TypeError):
            continue
        if not pid_alive(pid):
            continue
        try:
            why = _untrusted(sock.lstat(), f"its socket {sock}", stat.S_IFSOCK)
        except FileNotFoundError:
            why = None  # nothing to connect to: the source finds the process gone
        except OSError as e:
            why = f"its socket {sock} cannot be checked ({e.strerror})"
        if why is not None:
            _skip(f"skipping control discovery file {path}: {why}", skipped)
            continue
        try:
            api_version = int(data.get("api_version", 0))
        except (TypeError, ValueError):
            api_version = 0
        try:
            started = float(data.get("started_at", 0.0))
        except (TypeError, ValueError):
            started = 0.0
        found.append(
            ControlServer(
                pid=pid, socket_path=sock, started_at=started, api_version=api_version,
                run_id=data.get("run_id") or None, eval_set_id=data.get("eval_set_id") or None,
            )
        )
    found.sort(key=lambda s: s.started_at, reverse=True)
    return found


def read_server(pid: int, directory: Path | None = None) -> ControlServer | None:
    """The discovery entry of ``pid`` as it is now (trusted as :func:`list_servers` trusts
    one), or ``None``: what an action checks just before it asks (its API version may
    have changed since the watch found it, or the process gone)."""
    return next((s for s in list_servers(directory, skipped=[]) if s.pid == pid), None)


# macOS: getsockopt(SOL_LOCAL, LOCAL_PEERPID) gives the peer's pid
_SOL_LOCAL, _LOCAL_PEERPID = 0, 0x002


def serving_pid(socket_path: Path, timeout: float = 2.0) -> int | None:
    """The pid of the process that serves ``socket_path`` (its peer credentials, which
    the kernel vouches for), or ``None`` when they cannot be read here.

    A discovery file names a pid and a socket, and says nothing else of them: before a
    signal is sent to the pid, the socket must be served by that very process, not by
    another that wrote or reused the file."""
    import socket  # (here: 3 ms of every start-up, for the watchdog's checks)

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(str(socket_path))
        peercred = getattr(socket, "SO_PEERCRED", None)
        if peercred is not None:  # Linux: struct ucred {pid, uid, gid}
            raw = sock.getsockopt(socket.SOL_SOCKET, peercred, struct.calcsize("3i"))
            return int(struct.unpack("3i", raw)[0])
        if sys.platform == "darwin":
            raw = sock.getsockopt(_SOL_LOCAL, _LOCAL_PEERPID, struct.calcsize("i"))
            return int(struct.unpack("i", raw)[0])
        return None
    except OSError:
        return None
    finally:
        sock.close()
