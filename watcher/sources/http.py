"""The control-socket source: HTTP over each eval process's AF_UNIX socket.

This is the default and the cheap path: a page read costs milliseconds, where
an ``inspect ctl`` process costs over a second of CPU. It never imports
inspect_ai. A busy eval can stall a read for seconds (the server shares the
eval's event loop), so timeouts and 503s are retried with jittered backoff, at
most ``max_in_flight`` requests run at once per process, and a refused
connection or vanished socket means the process is gone. A response past the
size or total-time bound (:mod:`watcher.limits`) is :class:`LimitExceeded`, not
retried. :meth:`HttpSource.call` sends the channel's mutations (the watchdog's cancel,
drain and pause) and returns the server's answer as a :class:`ControlAnswer`.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
from dataclasses import dataclass
from typing import Any

# faster for the larger pages; anything it refuses (NaN) is retried with json
from orjson import loads as _fast_loads

from watcher import limits
from watcher.act import routes
from watcher.discovery import ControlServer
from watcher.events import Tier
from watcher.sources.base import (
    BadResponse,
    EventPage,
    LimitExceeded,
    NotFound,
    ProcessGone,
    SampleListing,
    Source,
    SourceBusy,
    SourceError,
    TaskInfo,
    sample_row,
)
from watcher.sources.uds import ResponseLimit, UdsClient


@dataclass(frozen=True)
class ControlAnswer:
    """What the control server answered a mutation: the HTTP ``status`` and the JSON
    ``body`` (``None`` if it was not JSON). The server's words are untrusted data.

    ``route_missing``: the stock 404 (or 405) of a server that predates the route, whose
    body is FastAPI's ``{"detail": ...}``; a route's own 404 ("sample not found")
    carries ``{"error": ...}`` (the convention ``inspect_ai._control.server`` pins).
    """

    status: int
    body: Any

    @property
    def route_missing(self) -> bool:
        body = self.body
        return (self.status in (404, 405) and isinstance(body, dict) and "error" not in body
                and isinstance(body.get("detail"), str))

    @property
    def ok(self) -> bool:
        """A 2xx answer whose body says ``ok`` (the control channel's success shape)."""
        return 200 <= self.status < 300 and isinstance(self.body, dict) and (
            self.body.get("ok", True) is not False)

    @property
    def error(self) -> str | None:
        """The server's ``error`` text (a 409's "can't", a 404's "not found"), if any."""
        if isinstance(self.body, dict) and self.body.get("error") is not None:
            return str(self.body["error"])
        return None


def _loads(body: bytes) -> Any:
    try:
        return _fast_loads(body)
    except ValueError:
        return json.loads(body)


class HttpSource(Source):
    """One eval process's control server."""

    name = "http"
    live = True

    def __init__(self, server: ControlServer, *, timeout: float = 5.0, retries: int = 3,
                 backoff: float = 0.25, max_in_flight: int = 8) -> None:
        self.server = server
        self.retries = retries
        self.backoff = backoff
        # the runner sizes its read pool to this: a busy eval's event loop makes every
        # request wait its turn, so reads in flight set how many samples a poll covers
        self.parallel_reads = max_in_flight
        self._gate = threading.BoundedSemaphore(max_in_flight)
        self._client = UdsClient(str(server.socket_path), timeout=timeout, connect_timeout=2.0,
                                 total_timeout=limits.REQUEST_TIME.value(),
                                 max_bytes=limits.RESPONSE_SIZE.value())
        self.requests = 0

    # -- transport ---------------------------------------------------------

    def _get(self, path: str, params: dict[str, Any] | None = None, *,
             patient: bool = False) -> Any:
        """GET ``path`` as JSON, retrying what a retry can fix. ``patient``: one read may
        wait as long as the whole request may take (a request nothing can replace, to a
        busy eval: abandoned at the per-read timeout and sent again, it went to the back
        of the eval's queue each time and was never answered)."""
        clean = {k: _param(v) for k, v in (params or {}).items() if v is not None}
        last: SourceError | None = None
        wait = self._client.total_timeout if patient else None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * (2 ** (attempt - 1)) * (0.5 + random.random()))
            try:
                with self._gate:
                    self.requests += 1
                    status, body = self._client.get(path, clean, read_timeout=wait)
            except (FileNotFoundError, ConnectionRefusedError) as e:
                raise ProcessGone(f"pid {self.server.pid}: {e}") from e
            except ResponseLimit as e:
                env = (limits.RESPONSE_SIZE if e.size else limits.REQUEST_TIME).env
                raise LimitExceeded(f"pid {self.server.pid}: {path}: {e} ({env} raises "
                                    "it)") from e
            except TimeoutError as e:
                last = SourceBusy(f"pid {self.server.pid}: {path} got no answer in "
                                  f"{self._client.timeout:g} s (--read-timeout)")
                last.__cause__ = e
                continue
            except (http.client.HTTPException, ConnectionResetError, BrokenPipeError) as e:
                # a server that died mid-response, or one that wrote garbage
                last = BadResponse(f"pid {self.server.pid}: {path}: {e!r}")
                continue
            except OSError as e:
                raise ProcessGone(f"pid {self.server.pid}: {e}") from e
            if status == 503:
                last = SourceBusy(f"pid {self.server.pid}: {path} answered 503")
                continue
            if status == 404:
                raise NotFound(_error_text(body))
            if status >= 500:
                # a server error can be a race (e.g. reading a log while it is being
                # written: "EOCD not found"); retried, then reported like any fault
                last = BadResponse(f"{path}: HTTP {status}: {_error_text(body)}")
                continue
            if status >= 400:
                raise BadResponse(f"{path}: HTTP {status}: {_error_text(body)}")
            try:
                return _loads(body)
            except (ValueError, UnicodeDecodeError) as e:
                last = BadResponse(f"pid {self.server.pid}: {path}: malformed JSON ({e})")
                continue
        assert last is not None
        raise last

    def call(self, method: str, path: str, params: dict[str, Any] | None = None,
             ) -> ControlAnswer:
        """A mutation (``POST``/``PATCH``) and the server's answer, whatever its status.

        Only what cannot have been applied is retried: a 503 (the server's concurrency
        cap answers before the handler runs). A timeout is :class:`SourceBusy` and is
        not retried: the request may have been applied, and the caller says so. No
        server is :class:`ProcessGone`; a garbled exchange :class:`BadResponse`; an
        answer past a bound :class:`LimitExceeded`.
        """
        clean = {k: _param(v) for k, v in (params or {}).items() if v is not None}
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * (2 ** (attempt - 1)) * (0.5 + random.random()))
            try:
                with self._gate:
                    self.requests += 1
                    status, body = self._client.request(method, path, clean)
            except (FileNotFoundError, ConnectionRefusedError) as e:
                raise ProcessGone(f"pid {self.server.pid}: {e}") from e
            except ResponseLimit as e:
                env = (limits.RESPONSE_SIZE if e.size else limits.REQUEST_TIME).env
                raise LimitExceeded(f"pid {self.server.pid}: {path}: {e} ({env} raises "
                                    "it)") from e
            except TimeoutError as e:
                raise SourceBusy(f"pid {self.server.pid}: {method} {path} got no answer in "
                                 "time (it may have been applied)") from e
            except (http.client.HTTPException, ConnectionResetError, BrokenPipeError) as e:
                raise BadResponse(f"pid {self.server.pid}: {method} {path}: {e!r} (it may "
                                  "have been applied)") from e
            except OSError as e:
                raise ProcessGone(f"pid {self.server.pid}: {e}") from e
            if status == 503 and attempt < self.retries:
                continue
            try:
                parsed = _loads(body) if body else None
            except (ValueError, UnicodeDecodeError):
                parsed = None
            return ControlAnswer(status, parsed)
        raise AssertionError("unreachable")  # the last attempt returns

    # -- Source ------------------------------------------------------------

    def tasks_patiently(self) -> list[TaskInfo]:
        """:meth:`tasks`, waiting for the answer as long as a request may take: the first
        task list of an eval, before which nothing of it can be read."""
        return self._tasks(patient=True)

    def tasks(self) -> list[TaskInfo]:
        return self._tasks()

    def _tasks(self, patient: bool = False) -> list[TaskInfo]:
        rows = self._get(routes.TASKS, patient=patient)
        if not isinstance(rows, list):
            raise BadResponse(f"pid {self.server.pid}: {routes.TASKS} is not a list")
        return [task_info(row, self.server.pid) for row in rows if isinstance(row, dict)]

    def samples(self, task: TaskInfo, active_since: float | None = None,
                all_rows: bool = False) -> SampleListing:
        body = self._get(routes.for_eval(routes.SAMPLES, task.eval_id),
                         {"active_since": active_since, "all": all_rows or None})
        if not isinstance(body, dict) or not isinstance(body.get("samples"), list):
            raise BadResponse(f"pid {self.server.pid}: malformed samples listing")
        return SampleListing(
            as_of=float(body.get("as_of") or time.time()),
            samples=[sample_row(r) for r in body["samples"] if isinstance(r, dict)],
            truncated=bool(body.get("truncated")),
        )

    def events(self, task: TaskInfo, sample_id: str, epoch: int, *, since: str | None,
               types: frozenset[str] | None, tier: Tier, limit: int = 500) -> EventPage:
        params: dict[str, Any] = {
            "sample_id": sample_id, "epoch": epoch, "since": since, "limit": limit,
            "type": ",".join(sorted(types)) if types else "all",
            "content": tier == "content" or None, "full": tier == "full" or None,
        }
        body = self._get(routes.for_eval(routes.SAMPLE_EVENTS, task.eval_id), params)
        return event_page(body, f"pid {self.server.pid}")

    def sample(self, eval_id: str, sample_id: str, epoch: int) -> dict[str, Any]:
        """One sample's summary row, read atomically (``GET /evals/{id}/sample``: what
        ``inspect ctl sample show`` reads): status, retries, events, interrupt, tokens.
        :class:`NotFound` when the eval no longer knows it."""
        body = self._get(routes.for_eval(routes.SAMPLE, eval_id),
                         {"sample_id": sample_id, "epoch": epoch})
        if not isinstance(body, dict):
            raise BadResponse(f"pid {self.server.pid}: malformed sample row")
        return body

    def messages(self, task: TaskInfo, sample_id: str, epoch: int) -> list[dict[str, Any]]:
        """A sample's conversation as raw messages (``GET .../sample/messages?full``):
        what a finished model event's prompt is looked up in when its own input is only
        attachment references (see ``BufferedSource``)."""
        body = self._get(routes.for_eval(routes.SAMPLE_MESSAGES, task.eval_id),
                         {"sample_id": sample_id, "epoch": epoch, "full": True})
        rows = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(rows, list):
            raise BadResponse(f"pid {self.server.pid}: malformed messages")
        return [m for m in rows if isinstance(m, dict)]

    def close(self) -> None:
        self._client.close()


def _param(value: Any) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    return str(value)


def _error_text(body: bytes) -> str:
    try:
        data = json.loads(body)
        if isinstance(data, dict):
            return str(data.get("error") or data.get("detail") or data)
    except (ValueError, UnicodeDecodeError):
        pass
    return body[:200].decode("utf-8", "replace")


def event_page(body: Any, where: str) -> EventPage:
    """Validate an events envelope from the server (or the CLI's ``--json``)."""
    if not isinstance(body, dict) or not isinstance(body.get("events"), list):
        raise BadResponse(f"{where}: malformed events page")
    events = [e for e in body["events"] if isinstance(e, dict)]
    try:
        missed = int(body.get("missed") or 0)
    except (TypeError, ValueError):
        missed = 0
    nxt = body.get("next")
    return EventPage(events=events, next=str(nxt) if nxt else None,
                     done=bool(body.get("done")), missed=missed)


def task_info(row: dict[str, Any], pid: int | None) -> TaskInfo:
    """A ``/tasks`` row (or the CLI's JSON row) as :class:`TaskInfo`."""
    def num(key: str) -> float | None:
        value = row.get(key)
        return float(value) if isinstance(value, int | float) else None

    api = row.get("api_version")
    return TaskInfo(
        eval_id=str(row.get("eval_id") or ""), task=str(row.get("task") or ""),
        task_id=str(row.get("task_id") or ""), model=str(row.get("model") or ""),
        status=str(row.get("status") or "running"), started_at=num("started_at"),
        completed_at=num("completed_at"), log_location=row.get("log_location"),
        pid=pid, run_id=row.get("run_id"), api_version=api if isinstance(api, int) else None,
        counts=dict(row.get("samples") or {}), raw=row,
    )

