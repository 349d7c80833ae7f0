"""The stdlib HTTP client over AF_UNIX that the control-socket source uses."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.fakeserver import FakeControlServer
from watcher.sources.uds import UdsClient


@pytest.fixture()
def fake(tmp_path: Path) -> FakeControlServer:
    server = FakeControlServer(tmp_path).start()
    yield server  # type: ignore[misc]
    server.stop()


def test_requests_reuse_one_connection_per_thread(fake: FakeControlServer) -> None:
    client = UdsClient(str(fake.socket_path), timeout=2.0)
    started = time.monotonic()
    for _ in range(20):
        status, body = client.get("/tasks")
        assert status == 200 and isinstance(json.loads(body), list)
    assert len(client._open) == 1
    assert time.monotonic() - started < 2.0  # no request waited for a timeout
    client.close()
    assert not client._open


def test_a_connection_the_server_closed_while_idle_is_replaced(
        fake: FakeControlServer) -> None:
    client = UdsClient(str(fake.socket_path), timeout=2.0)
    assert client.get("/tasks")[0] == 200
    import socket

    with fake._lock:  # the server drops its kept-alive connections (an idle timeout)
        conns, fake._conns = fake._conns, []
    for conn in conns:
        conn.shutdown(socket.SHUT_RDWR)
    time.sleep(0.1)
    assert client.get("/tasks")[0] == 200  # no error surfaced for the stale connection
    assert len(client._open) == 1


def test_query_parameters_are_encoded(fake: FakeControlServer) -> None:
    fake.add_sample("a b/c?#", [])
    client = UdsClient(str(fake.socket_path), timeout=2.0)
    status, _ = client.get("/evals/evalA/sample/events",
                           {"sample_id": "a b/c?#", "epoch": "1", "from_start": "true"})
    assert status == 200


def test_no_server_is_an_os_error(tmp_path: Path) -> None:
    client = UdsClient(str(tmp_path / "nothing.sock"), timeout=0.5)
    with pytest.raises(FileNotFoundError):
        client.get("/tasks")


def test_mutations_go_out_with_their_method_and_no_body(fake: FakeControlServer) -> None:
    fake.mutations["/tasks/t1/drain"] = (200, {"ok": True, "changed": True})
    client = UdsClient(str(fake.socket_path), timeout=2.0)
    status, body = client.request("POST", "/tasks/t1/drain", {"dry_run": "true"})
    assert status == 200 and json.loads(body) == {"ok": True, "changed": True}
    status, _ = client.request("PATCH", "/config", {"dry_run": "true"})
    assert status == 404  # the fake has no such route
    assert ("POST /tasks/t1/drain", {"dry_run": "true"}) in fake.requests
    assert ("PATCH /config", {"dry_run": "true"}) in fake.requests
    assert client.get("/tasks")[0] == 200  # the same kept-alive connection serves a GET next
    assert len(client._open) == 1
    with pytest.raises(ValueError):
        client.request("DELETE", "/tasks")


def test_a_mutation_is_bounded_like_a_read(fake: FakeControlServer) -> None:
    from watcher.sources.uds import ResponseLimit

    fake.mutations["/evals/evalA/sample/cancel"] = (200, {"ok": True, "pad": "x" * 5000})
    client = UdsClient(str(fake.socket_path), timeout=2.0, max_bytes=1000)
    with pytest.raises(ResponseLimit):
        client.request("POST", "/evals/evalA/sample/cancel", {"sample_id": "s", "epoch": "1"})
