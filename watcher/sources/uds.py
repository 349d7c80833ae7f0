"""A minimal keep-alive HTTP/1.1 client over an AF_UNIX socket (stdlib only).

The watcher makes many small GETs to each eval's control server: a few dozen per
second with hundreds of live samples. A general-purpose client (httpx, used before) spent about
a millisecond of the watcher's CPU on each (request and URL objects, connection
pool bookkeeping), most of the watcher's own cost in a large fleet.
``http.client`` over a per-thread socket does the same job for a fraction of that.
"""

from __future__ import annotations

import http.client
import select
import socket
import threading
from urllib.parse import urlencode


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float, connect_timeout: float) -> None:
        super().__init__("inspect-control", timeout=timeout)
        self._path = path
        self._connect_timeout = connect_timeout

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self._connect_timeout)
            sock.connect(self._path)
            sock.settimeout(self.timeout)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def _idle_and_open(conn: _UnixConnection) -> bool:
    """A kept-alive connection is reusable: nothing to read on it, not even EOF."""
    sock = conn.sock
    if sock is None:
        return False
    try:
        # readable while idle means EOF (or bytes nobody asked for): not reusable. (A
        # recv with MSG_DONTWAIT would still wait: the socket has a timeout set.)
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable


class UdsClient:
    """GETs over one AF_UNIX socket path; one kept-alive connection per thread.

    Errors are the stdlib's: ``FileNotFoundError``/``ConnectionRefusedError`` (no
    server), ``TimeoutError`` (no answer in time), ``http.client.HTTPException``
    and other ``OSError`` (a broken or garbled exchange).
    """

    def __init__(self, path: str, *, timeout: float = 5.0, connect_timeout: float = 2.0) -> None:
        self.path = path
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: set[_UnixConnection] = set()

    def get(self, path: str, params: dict[str, str] | None = None) -> tuple[int, bytes]:
        """``(status, body)`` of ``GET path?params``."""
        url = f"{path}?{urlencode(params)}" if params else path
        conn: _UnixConnection | None = getattr(self._local, "conn", None)
        if conn is not None and not _idle_and_open(conn):
            self._drop(conn)  # the server closed it while it was idle
            conn = None
        return self._send(conn or self._new(), url)

    def _send(self, conn: _UnixConnection, url: str) -> tuple[int, bytes]:
        try:
            conn.request("GET", url, headers={"Accept": "application/json"})
            response = conn.getresponse()
            body = response.read()
        except BaseException:
            self._drop(conn)
            raise
        if response.will_close:
            self._drop(conn)
        return response.status, body

    def _new(self) -> _UnixConnection:
        conn = _UnixConnection(self.path, self.timeout, self.connect_timeout)
        conn.connect()
        self._local.conn = conn
        with self._lock:
            self._open.add(conn)
        return conn

    def _drop(self, conn: _UnixConnection) -> None:
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None
        with self._lock:
            self._open.discard(conn)
        conn.close()

    def close(self) -> None:
        with self._lock:
            conns, self._open = list(self._open), set()
        for conn in conns:
            conn.close()
