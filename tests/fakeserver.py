"""A fault-injecting fake Inspect control server: real HTTP over an AF_UNIX socket.

It serves the routes the watcher reads (``/tasks``, ``/evals/{id}/samples``,
``/evals/{id}/sample/events``) in the shapes ``inspect_ai._control`` serves them
(opaque base64 cursors ``{"n": nonce, "i": offset}``), from a thread, and writes a
discovery file like the eval process does. Faults are queued per route and fire
on the next matching requests: ``delay:<s>`` (sleep, then answer), ``503``,
``malformed`` (200 with broken JSON), ``truncated`` (Content-Length longer than the
body, then close), ``drop`` (close without answering), ``500``, ``endless`` (a
chunked body that never ends, until the client hangs up), ``trickle:<s>`` (a body
sent one byte every ``s`` seconds). :meth:`always` makes a fault fire on every
matching request. :meth:`refuse` closes the listener and leaves a dead socket file
behind (connect → ECONNREFUSED).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import socketserver
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from watcher.discovery import ControlServer


def encode_cursor(nonce: str, offset: int) -> str:
    raw = json.dumps({"n": nonce, "i": offset}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode("ascii")


def decode_cursor(token: str | None) -> int:
    if not token:
        return 0
    try:
        return int(json.loads(base64.urlsafe_b64decode(token.encode("ascii")))["i"])
    except (ValueError, KeyError, TypeError):
        return 0


def tool_event(n: int, cmd: str, *, result: str | None = None, pending: bool = False,
               ts: float | None = None) -> dict[str, Any]:
    """A compact content-tier tool event as the control server projects it."""
    return {"event": "tool", "uuid": f"ev-{n}", "span_id": "s1",
            "timestamp": ts if ts is not None else 1_700_000_000.0 + n, "pending": pending,
            "id": f"call-{n}", "function": "bash", "has_error": False,
            "arguments": json.dumps({"cmd": cmd}), "result": result if result is not None
            else f"output of {cmd}", "error": None}


def model_event(n: int, text: str = "thinking", ts: float | None = None) -> dict[str, Any]:
    return {"event": "model", "uuid": f"ev-{n}", "span_id": "s1",
            "timestamp": ts if ts is not None else 1_700_000_000.0 + n, "pending": False,
            "model": "inspect_watch_scripted/test", "tokens": 120, "stop_reason": "tool_calls",
            "has_error": False, "completion": text, "error": None}


@dataclass
class FakeSample:
    sample_id: str
    epoch: int = 1
    status: str = "running"
    events: list[dict[str, Any]] = field(default_factory=list)
    nonce: str = "a1"
    retries: int = 0
    updated: float = field(default_factory=time.time)

    def row(self) -> dict[str, Any]:
        return {"sample_id": self.sample_id, "epoch": self.epoch, "status": self.status,
                "retries": self.retries, "total_time": 1.0}


class _Handler(BaseHTTPRequestHandler):
    server: _UnixHttpServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
        return None

    def address_string(self) -> str:
        return "unix"

    def setup(self) -> None:
        super().setup()
        self.server.fake.track(self.connection)

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        fake = self.server.fake
        url = urlparse(self.path)
        params = {k: v[-1] for k, v in parse_qs(url.query).items()}
        fake.record(url.path, params)
        action = fake.take_fault(url.path, params)
        if action is not None and action.startswith("delay:"):
            time.sleep(float(action.split(":", 1)[1]))
            action = None
        if action == "vanish":  # the eval exits under this read: its socket goes away
            threading.Thread(target=fake.stop, daemon=True).start()
            for _ in range(200):  # this answer ends only once the socket is gone
                if not fake.socket_path.exists():
                    break
                time.sleep(0.01)
            self.close_connection = True
            return
        if action == "drop":
            self.close_connection = True
            return
        if action == "503":
            self._send(503, b'{"error": "busy"}')
            return
        if action == "404":  # a finished sample between the eval's memory and its log
            self._send(404, b'{"error": "sample not found"}')
            return
        if action == "500":  # what Inspect answers when it reads a log mid-write
            self._send(500, b'{"error": "ValueError: EOCD not found"}')
            return
        if action == "endless":
            self._endless()
            return
        if action is not None and action.startswith("trickle:"):
            self._trickle(float(action.split(":", 1)[1]))
            return
        if action == "malformed":
            self._send(200, b'{"events": [{"event": "tool", "uuid": ')
            return
        if action == "truncated":
            body = b'{"events": [], "next": null, "done": false, "pad": "' + b"x" * 100
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body) + 5000))
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True
            return
        status, body = fake.route(url.path, params)
        self._send(status, json.dumps(body).encode())

    def _endless(self) -> None:
        """A chunked 200 that never ends (bounded here: 256 MB, or the client leaving)."""
        self.close_connection = True
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunk = b"x" * (1 << 20)
            frame = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
            self.wfile.write(b'6\r\n{"a":"\r\n')
            for _ in range(256):
                self.wfile.write(frame)
        except (BrokenPipeError, ConnectionResetError, OSError):
            return

    def _trickle(self, every: float) -> None:
        """A valid JSON body, one byte every ``every`` seconds (bounded: 300 bytes)."""
        self.close_connection = True
        body = json.dumps({"events": [], "next": None, "done": False,
                           "pad": "x" * 200}).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.flush()
            for i in range(len(body)):
                self.wfile.write(body[i:i + 1])
                self.wfile.flush()
                if self.server.fake.stopped.wait(every):
                    return
        except (BrokenPipeError, ConnectionResetError, OSError):
            return

    def _send(self, status: int, body: bytes) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


class _UnixHttpServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allow_reuse_address = True
    fake: FakeControlServer


class FakeControlServer:
    """One fake eval process: a task, its samples and their events."""

    def __init__(self, control_dir: Path, *, api_version: int = 8, pid: int | None = None,
                 eval_id: str = "evalA", task: str = "fake_task") -> None:
        self.control_dir = control_dir
        self.api_version = api_version
        self.pid = pid if pid is not None else os.getpid()
        # AF_UNIX paths are limited to ~108 bytes: keep the socket in a short temp dir
        self._sock_dir = Path(tempfile.mkdtemp(prefix="fcs", dir="/tmp"))
        self.socket_path = self._sock_dir / "ctl.sock"
        self.eval_id = eval_id
        self.task_name = task
        self.task_status = "running"
        self.samples: dict[tuple[str, int], FakeSample] = {}
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.tasks_override: Any = None  # serve this as /tasks instead (garbage tests)
        self._faults: list[tuple[str, str, int]] = []  # (path substring, action, skip)
        # (path substring, action, query params to match): on every matching request
        self._always: list[tuple[str, str, dict[str, str]]] = []
        self.stopped = threading.Event()
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._server: _UnixHttpServer | None = None
        self._thread: threading.Thread | None = None

    # -- set-up --------------------------------------------------------------

    def add_sample(self, sample_id: str, events: list[dict[str, Any]], *, epoch: int = 1,
                   status: str = "running") -> FakeSample:
        s = FakeSample(sample_id, epoch, status, list(events))
        self.samples[(sample_id, epoch)] = s
        return s

    def inject(self, path_part: str, *actions: str, after: int = 0) -> None:
        """Queue faults for the next requests whose path contains ``path_part``.

        ``after`` lets that many matching requests through first.
        """
        with self._lock:
            for i, a in enumerate(actions):
                self._faults.append((path_part, a, after if i == 0 else 0))

    def always(self, path_part: str, action: str, params: dict[str, str] | None = None) -> None:
        """Answer every request whose path contains ``path_part`` (and whose query has
        ``params``, e.g. one sample's id) with the fault ``action``."""
        with self._lock:
            self._always.append((path_part, action, dict(params or {})))

    def take_fault(self, path: str, params: dict[str, str] | None = None) -> str | None:
        with self._lock:
            for i, (part, action, skip) in enumerate(self._faults):
                if part in path:
                    if skip > 0:
                        self._faults[i] = (part, action, skip - 1)
                        return None
                    del self._faults[i]
                    return action
            for part, action, wanted in self._always:
                if part in path and all((params or {}).get(k) == v for k, v in wanted.items()):
                    return action
        return None

    def track(self, conn: socket.socket) -> None:
        with self._lock:
            self._conns.append(conn)

    def record(self, path: str, params: dict[str, str]) -> None:
        with self._lock:
            self.requests.append((path, params))

    def count(self, path_part: str) -> int:
        with self._lock:
            return sum(part_in(path_part, p) for p, _ in self.requests)

    # -- routes ----------------------------------------------------------------

    def route(self, path: str, params: dict[str, str]) -> tuple[int, Any]:
        if path == "/tasks":
            if self.tasks_override is not None:
                return 200, self.tasks_override
            return 200, [{"eval_id": self.eval_id, "task": self.task_name,
                          "task_id": f"{self.eval_id}-t", "model": "inspect_watch_scripted/test",
                          "status": self.task_status, "started_at": time.time() - 10,
                          "completed_at": time.time() if self.task_status != "running"
                          else None, "api_version": self.api_version,
                          "samples": {"total": len(self.samples)}}]
        prefix = f"/evals/{self.eval_id}/"
        if not path.startswith(prefix):
            return 404, {"error": f"no eval at {path}"}
        rest = path[len(prefix):]
        if rest == "samples":
            return 200, {"as_of": time.time(),
                         "samples": [s.row() for s in self.samples.values()],
                         "truncated": False}
        if rest == "sample/events":
            key = (params.get("sample_id", ""), int(params.get("epoch", "1")))
            sample = self.samples.get(key)
            if sample is None:
                return 404, {"error": "sample not found"}
            offset = decode_cursor(params.get("since"))
            limit = int(params.get("limit", "500"))
            types = params.get("type", "all")
            scanned = sample.events[offset: offset + limit]
            nxt = offset + len(scanned)
            wanted = None if types == "all" else set(types.split(","))
            events = [e for e in scanned if wanted is None or e.get("event") in wanted]
            done = sample.status in ("completed", "error", "cancelled")
            return 200, {"events": events, "next": encode_cursor(sample.nonce, nxt),
                         "done": done and nxt >= len(sample.events)}
        return 404, {"error": f"unknown route {path}"}

    # -- lifecycle -------------------------------------------------------------

    @property
    def discovery_path(self) -> Path:
        return self.control_dir / f"{self.pid}.json"

    def control_server(self) -> ControlServer:
        return ControlServer(pid=self.pid, socket_path=self.socket_path,
                             started_at=time.time(), api_version=self.api_version)

    def start(self) -> FakeControlServer:
        self.stopped.clear()
        server = _UnixHttpServer(str(self.socket_path), _Handler)
        server.fake = self
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-control", daemon=True)
        self._thread.start()
        self.control_dir.mkdir(parents=True, exist_ok=True)
        self.discovery_path.write_text(json.dumps({
            "pid": self.pid, "socket_path": str(self.socket_path), "started_at": time.time(),
            "api_version": self.api_version, "run_id": "run-fake",
        }))
        # owner-only, as Inspect makes them: discovery skips files others may write
        os.chmod(self.discovery_path, 0o600)
        os.chmod(self.socket_path, 0o600)
        return self

    def refuse(self) -> None:
        """Stop listening but leave a socket file nobody accepts on (ECONNREFUSED)."""
        self.stop(keep_files=True)
        self.socket_path.unlink(missing_ok=True)
        dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        dead.bind(str(self.socket_path))
        dead.close()
        os.chmod(self.socket_path, 0o600)

    def stop(self, keep_files: bool = False) -> None:
        self.stopped.set()  # a trickling answer ends
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:  # a dead process closes its kept-alive connections too
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if not keep_files:
            self.socket_path.unlink(missing_ok=True)
            self.discovery_path.unlink(missing_ok=True)
            try:
                self._sock_dir.rmdir()
            except OSError:
                pass

    def __enter__(self) -> FakeControlServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def part_in(part: str, path: str) -> bool:
    return part in path
