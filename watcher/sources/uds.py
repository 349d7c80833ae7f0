"""A minimal keep-alive HTTP/1.1 client over an AF_UNIX socket (stdlib only).

The watcher makes many small GETs to each eval's control server: a few dozen per
second with hundreds of live samples. A general-purpose client (httpx, used before) spent about
a millisecond of the watcher's CPU on each (request and URL objects, connection
pool bookkeeping), most of the watcher's own cost in a large fleet.
``http.client`` over a per-thread socket does the same job for a fraction of that.

Why it is kept (issue 24 proposed httpx's UDS transport): measured side by side
with ``benchmarks/bench_poll.py --client both`` (2026-12-01, 3 alternating rounds of
200 reads of one content-tier page of 200 scanned events, both bounded alike), a page
cost 0.18 ms of CPU here against 0.44 ms through ``httpx.HTTPTransport(uds=…)``
(2.4x); both meet the poll-cost target (6,784x and 2,765x cheaper than ``inspect
ctl``, target 200x). What decides it is the bound: httpx has per-operation
timeouts only, no deadline for a whole request (encode/httpx#1450 is open, the
httpcore change for it was declined), so a server that trickles its headers, or its
body one byte per read timeout, would hold it; here one socket subclass enforces
the deadline on every read, at no measurable cost.

The server is untrusted as far as sizes and timing go (a fault or an attack can
send an endless chunked body, or trickle one byte every few seconds, each within
the per-read timeout): every request has a total deadline
(:data:`~watcher.limits.REQUEST_TIME`, checked before every read from the socket)
and a body-size cap (:data:`~watcher.limits.RESPONSE_SIZE`, checked against
``Content-Length`` before reading and while reading a body of unknown length).
Either raises :class:`ResponseLimit` and drops the connection.
"""

from __future__ import annotations

import http.client
import math
import select
import socket
import threading
import time
from typing import Any
from urllib.parse import urlencode

_CHUNK = 1 << 16
# the control channel's reads are GETs; its mutations (cancel, drain, pause) POSTs, and
# its live limits PATCHes
METHODS = frozenset({"GET", "POST", "PATCH"})


class ResponseLimit(Exception):
    """A response broke a bound: too large (``size``), or too slow in total."""

    def __init__(self, message: str, *, size: bool) -> None:
        super().__init__(message)
        self.size = size


class _DeadlineSocket(socket.socket):
    """A socket whose reads honour a whole-request deadline as well as the per-read
    timeout: ``http.client`` reads through ``recv_into``, headers and body alike."""

    deadline = math.inf
    read_timeout: float | None = None

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise ResponseLimit("the response took longer than the request time limit",
                                size=False)
        cut = left < (self.read_timeout or math.inf)
        if cut:
            self.settimeout(left)
        elif self.gettimeout() != self.read_timeout:
            self.settimeout(self.read_timeout)
        try:
            return super().recv_into(buffer, nbytes, flags)
        except TimeoutError:
            if cut:  # the wait was cut to the deadline: the request ran out of time, it is
                # not a slow read that a retry could help
                raise ResponseLimit("the response took longer than the request time limit",
                                    size=False) from None
            raise


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float, connect_timeout: float) -> None:
        super().__init__("inspect-control", timeout=timeout)
        self._path = path
        self._connect_timeout = connect_timeout

    def connect(self) -> None:
        sock = _DeadlineSocket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.read_timeout = self.timeout
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
    """Requests over one AF_UNIX socket path; one kept-alive connection per thread.

    Errors are the stdlib's: ``FileNotFoundError``/``ConnectionRefusedError`` (no
    server), ``TimeoutError`` (no answer in time), ``http.client.HTTPException``
    and other ``OSError`` (a broken or garbled exchange), and :class:`ResponseLimit`
    (a body over ``max_bytes``, or a request past ``total_timeout`` seconds).
    """

    def __init__(self, path: str, *, timeout: float = 5.0, connect_timeout: float = 2.0,
                 total_timeout: float = 30.0, max_bytes: float = 128 * 1024 * 1024) -> None:
        self.path = path
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.total_timeout = total_timeout
        self.max_bytes = max_bytes
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: set[_UnixConnection] = set()

    def get(self, path: str, params: dict[str, str] | None = None, *,
            read_timeout: float | None = None) -> tuple[int, bytes]:
        """``(status, body)`` of ``GET path?params`` (``read_timeout``: this request's
        own per-read timeout, within the same total deadline)."""
        return self.request("GET", path, params, read_timeout=read_timeout)

    def request(self, method: str, path: str, params: dict[str, str] | None = None, *,
                read_timeout: float | None = None) -> tuple[int, bytes]:
        """``(status, body)`` of ``METHOD path?params`` with no request body (the control
        channel's mutations take query parameters only), bounded like a GET: the same
        deadline and size cap. Never retried here: a caller that retries a mutation must
        know it is idempotent."""
        if method not in METHODS:
            raise ValueError(f"unsupported method {method!r}")
        url = f"{path}?{urlencode(params)}" if params else path
        conn: _UnixConnection | None = getattr(self._local, "conn", None)
        if conn is not None and not _idle_and_open(conn):
            self._drop(conn)  # the server closed it while it was idle
            conn = None
        return self._send(conn or self._new(), method, url, read_timeout)

    def _send(self, conn: _UnixConnection, method: str, url: str,
              read_timeout: float | None = None) -> tuple[int, bytes]:
        sock = conn.sock
        if isinstance(sock, _DeadlineSocket):
            sock.deadline = time.monotonic() + self.total_timeout
            sock.read_timeout = read_timeout if read_timeout is not None else self.timeout
        try:
            # a body-less POST or PATCH goes out with ``Content-Length: 0`` (http.client)
            conn.request(method, url, headers={"Accept": "application/json"})
            response = conn.getresponse()
            body = self._body(response)
        except BaseException:
            self._drop(conn)
            raise
        if response.will_close:
            self._drop(conn)
        return response.status, body

    def _body(self, response: http.client.HTTPResponse) -> bytes:
        """The body, read within the size cap."""
        length = response.length  # None: chunked, or until the server closes
        if length is not None:
            if length > self.max_bytes:
                raise ResponseLimit(f"the response is {length:,} bytes, over the "
                                    f"{self.max_bytes:,.0f}-byte limit", size=True)
            return response.read()
        parts: list[bytes] = []
        size = 0
        while True:
            part = response.read(_CHUNK)
            if not part:
                return b"".join(parts)
            size += len(part)
            if size > self.max_bytes:
                raise ResponseLimit(f"the response grew past the {self.max_bytes:,.0f}-byte "
                                    "limit", size=True)
            parts.append(part)

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
