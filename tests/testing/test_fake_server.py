"""The fake-server base: loopback lifecycle, one request record type, answers as given."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from jarvismem.testing._fake_server import FakeHttpServer, RecordedRequest, Request, Response


class Echo(FakeHttpServer):
    """Answers with what it was sent; ``/hang`` waits for stop; ``/boom`` raises."""

    def handle(self, request: Request) -> Response | None:
        if request.path == "/hang":
            self.stopping.wait(30)
            return None
        if request.path == "/boom":
            raise KeyError("bug in the fake")
        return Response.of_json(
            201,
            {"target": request.target, "json": request.json, "bad": request.json_error},
            {"X-Fake": "yes"},
        )


@pytest.fixture
def echo() -> Iterator[Echo]:
    with Echo() as server:
        yield server


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return True
    return False


def test_the_port_is_bound_before_start_and_refuses_after_stop() -> None:
    server = Echo()
    assert server.url == f"http://127.0.0.1:{server.port}" and server.port > 0
    server.stop()
    assert _refused(server.port)


def test_answers_carry_status_headers_and_body(echo: Echo) -> None:
    reply = httpx.post(echo.url + "/x?a=1&a=2&b=3", json={"k": [1]})
    assert reply.status_code == 201 and reply.headers["x-fake"] == "yes"
    assert reply.headers["content-type"] == "application/json"
    assert reply.json() == {"target": "/x?a=1&a=2&b=3", "json": {"k": [1]}, "bad": False}


def test_every_request_is_recorded_once_in_one_shape(echo: Echo) -> None:
    before = time.time()
    httpx.post(echo.url + "/x?a=1&a=2", content=b"not json", headers={"X-Key": "K"})
    httpx.get(echo.url + "/y")
    first, second = echo.requests
    assert isinstance(first, RecordedRequest)
    assert (first.method, first.path, first.query, first.json) == ("POST", "/x", {"a": "1"}, None)
    assert first.headers["x-key"] == "K" and first.received_at >= before
    assert (second.method, second.path, second.query) == ("GET", "/y", {})
    echo.clear_requests()
    assert echo.requests == []


def test_a_body_that_is_not_json_is_flagged(echo: Echo) -> None:
    assert httpx.post(echo.url + "/x", content=b"{oops").json()["bad"] is True


def test_a_bug_in_the_fake_still_answers_500(echo: Echo) -> None:
    reply = httpx.get(echo.url + "/boom")
    assert reply.status_code == 500 and "KeyError" in reply.text


def test_methods_the_fake_does_not_serve_get_501(echo: Echo) -> None:
    assert httpx.delete(echo.url + "/x").status_code == 501
    assert [r.method for r in echo.requests] == []


@pytest.mark.serial  # bounds a wall-clock time, which a loaded machine stretches
def test_stop_releases_a_held_request_and_closes_its_connection() -> None:
    server = Echo().start()
    outcome: list[object] = []

    def call() -> None:
        try:
            outcome.append(httpx.get(server.url + "/hang", timeout=20).status_code)
        except httpx.HTTPError as exc:
            outcome.append(type(exc))

    caller = threading.Thread(target=call)
    caller.start()
    deadline = time.monotonic() + 5
    while not server.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    server.stop()
    caller.join(timeout=10)
    # Nothing was answered: the client sees its connection go, well before its timeout.
    assert len(outcome) == 1 and isinstance(outcome[0], type)
    assert issubclass(outcome[0], httpx.HTTPError)
    assert time.monotonic() - started < 5


def test_kept_alive_connections_are_refused_after_stop() -> None:
    server = Echo().start()
    with httpx.Client() as client:
        assert client.get(server.url + "/x").status_code == 201
        server.stop()
        with pytest.raises(httpx.HTTPError):
            client.get(server.url + "/x")


def test_a_stopped_server_starts_again_on_the_same_port() -> None:
    server = Echo().start()
    port = server.port
    server.stop()
    with server:
        assert server.port == port
        assert httpx.get(server.url + "/again").status_code == 201
    assert _refused(port)
