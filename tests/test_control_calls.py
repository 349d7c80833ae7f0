"""Mutations through the control-socket source (``HttpSource.call``): the answer as the
server gave it, a missing route told apart from a route's own "not found", and what is
never retried (a timeout may have been applied)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakeserver import FakeControlServer
from watcher.sources.base import ProcessGone, SourceBusy
from watcher.sources.http import ControlAnswer, HttpSource


@pytest.fixture()
def fake(tmp_path: Path) -> FakeControlServer:
    server = FakeControlServer(tmp_path).start()
    yield server  # type: ignore[misc]
    server.stop()


def test_a_stock_404_is_a_missing_route_and_a_route_404_is_not(
        fake: FakeControlServer) -> None:
    src = HttpSource(fake.control_server(), retries=0)
    missing = src.call("POST", "/evals/evalA/sample/cancel", {"sample_id": "s", "epoch": 1})
    assert missing.status == 404 and missing.route_missing and not missing.ok
    fake.mutations["/evals/evalA/sample/cancel"] = (404, {"error": "sample s (epoch 1) not found"})
    gone = src.call("POST", "/evals/evalA/sample/cancel", {"sample_id": "s", "epoch": 1})
    assert gone.status == 404 and not gone.route_missing
    assert gone.error == "sample s (epoch 1) not found"
    src.close()


def test_answers_keep_the_servers_words() -> None:
    conflict = ControlAnswer(409, {"error": "2 pending tool calls", "pending": [{"id": "a"}]})
    assert not conflict.ok and conflict.error == "2 pending tool calls"
    assert ControlAnswer(200, {"ok": True, "changed": False}).ok
    assert not ControlAnswer(200, {"ok": False, "error": "x"}).ok
    assert not ControlAnswer(200, None).ok  # not the control channel's shape
    assert not ControlAnswer(405, {"detail": "Method Not Allowed"}).ok
    assert ControlAnswer(405, {"detail": "Method Not Allowed"}).route_missing


def test_a_503_is_retried_and_a_timeout_is_not(fake: FakeControlServer) -> None:
    fake.mutations["/tasks/t1/drain"] = (200, {"ok": True, "changed": True})
    src = HttpSource(fake.control_server(), retries=2, backoff=0.01, timeout=0.5)
    fake.mutations["/tasks/t2/drain"] = (503, {"error": "busy"})
    busy = src.call("POST", "/tasks/t2/drain")
    assert busy.status == 503
    assert fake.count("POST /tasks/t2/drain") == 3  # the cap answered before any handler ran
    src.close()


def test_no_answer_in_time_is_not_retried(tmp_path: Path) -> None:
    import socket
    import threading

    path = tmp_path / "s.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(8)
    accepted: list[socket.socket] = []

    def accept() -> None:  # reads the request, never answers
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    from watcher.discovery import ControlServer

    src = HttpSource(ControlServer(pid=1, socket_path=path, started_at=0.0, api_version=8),
                     retries=3, timeout=0.3)
    with pytest.raises(SourceBusy, match="may have been applied"):
        src.call("POST", "/tasks/t1/drain", {"dry_run": True})
    assert len(accepted) == 1  # one request, not four
    src.close()
    listener.close()


def test_no_server_is_process_gone(tmp_path: Path) -> None:
    from watcher.discovery import ControlServer

    src = HttpSource(ControlServer(pid=1, socket_path=tmp_path / "none.sock", started_at=0.0,
                                   api_version=8))
    with pytest.raises(ProcessGone):
        src.call("POST", "/tasks/t1/drain")
