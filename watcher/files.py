"""Writing the user's files as a Unix tool would: atomically where that is possible.

A report or state file written in place could be left half-written by a crash, so a
regular file (or a path that does not exist yet) is written to a temporary file in the
same directory and renamed over it. The temporary name is random and created exclusively
(``O_EXCL | O_NOFOLLOW``), so nothing planted beforehand (a ``PATH.tmp`` symlink to a
file of the user's) is followed or overwritten. A symlink is written through (the file
it points to is replaced, the link stays), and a device, FIFO or socket is opened and
written, as ``> PATH`` would: a rename would replace ``/dev/null`` with a regular file.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat

_TEMP_FLAGS = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
               | getattr(os, "O_CLOEXEC", 0))


def write_file(path: str | os.PathLike[str], text: str, *, mode: int | None = None) -> None:
    """Write ``text`` (UTF-8) to ``path``.

    ``mode`` sets the file's permissions; without it an existing file keeps its own and a
    new one gets ``0666`` less the umask, as a shell redirection would give it.
    """
    target = os.path.realpath(os.fspath(path))  # through symlinks: the link stays a link
    try:
        st: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        st = None
    data = text.encode("utf-8")
    if st is not None and not stat.S_ISREG(st.st_mode):
        _write_through(target, data)
        return
    directory, name = os.path.split(target)
    fd, tmp = _create_temp(directory or ".", name, 0o666 if mode is None else mode)
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        elif st is not None:
            os.fchmod(fd, stat.S_IMODE(st.st_mode))
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _write_through(target: str, data: bytes) -> None:
    """A device, FIFO or socket: open it and write, as ``> PATH`` would."""
    fd = os.open(target, os.O_WRONLY | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _create_temp(directory: str, name: str, mode: int) -> tuple[int, str]:
    """A new file beside the target, with a name nobody could have planted."""
    for _ in range(100):
        tmp = os.path.join(directory, f".{name}.{secrets.token_hex(8)}.tmp")
        try:
            return os.open(tmp, _TEMP_FLAGS, mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {directory}")


class NoReader(OSError):
    """An output FIFO nobody reads yet (``ENXIO``)."""


def open_append(path: str | os.PathLike[str], mode: int = 0o644) -> int:
    """A descriptor to append to ``path`` (created if missing), opened without waiting.

    Opening a FIFO to write waits for a reader: ``watch -o FIFO`` with nobody reading it
    hung before the watch started. It is opened non-blocking instead (a FIFO without a
    reader is :class:`NoReader`, said at once), then set back to blocking, so a slow
    reader holds the writes back as a pipe would.
    """
    flags = (os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK
             | getattr(os, "O_CLOEXEC", 0))
    try:
        fd = os.open(path, flags, mode)
    except OSError as e:
        if e.errno == errno.ENXIO:
            raise NoReader(e.errno, "a FIFO that nobody reads yet: start its reader first, "
                           "or write to a file") from e
        raise
    os.set_blocking(fd, True)
    return fd
