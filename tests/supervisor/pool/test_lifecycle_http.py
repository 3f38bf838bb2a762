"""What HTTP clients see when a model or the gateway stops under them, and how
early refusals leave the connection: the real app served by Hypercorn over real
TCP (:class:`LiveGateway`), fake workers behind it, httpx as the client."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest

from mlx_gateway.supervisor.gateway import gateway_of

from ..live import LiveGateway

pytestmark = pytest.mark.slow

M = "lab/fake/ok"


def data_lines(response: httpx.Response) -> list[str]:
    return [line for line in response.iter_lines() if line.startswith("data: ")]


def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def test_a_forced_unload_ends_a_stream_with_its_reason() -> None:
    with LiveGateway({"model_path": M}, shutdown_grace=0.5) as gw:
        handle = gw.registry.resolve(M)
        body = {"model": M, "messages": [{"role": "user", "content": "hang"}], "stream": True}
        with (
            httpx.Client(base_url=gw.url, timeout=30) as http,
            http.stream("POST", "/v1/chat/completions", json=body) as response,
        ):
            assert response.status_code == 200
            wait_for(lambda: handle.inflight == 1)
            unloaded: list[httpx.Response] = []
            admin = threading.Thread(
                target=lambda: unloaded.append(
                    httpx.post(f"{gw.url}/v1/models/{M}/unload", json={"force": True})
                )
            )
            admin.start()
            events = data_lines(response)
            admin.join(30)
        assert unloaded and unloaded[0].status_code == 200
        assert events[-1] == "data: [DONE]"
        error = json.loads(events[-2].removeprefix("data: "))["error"]
        assert "unloaded by an admin request" in error["message"], error
        assert error["code"] == "model_stopped"
        assert not any('"cancelled"' in event for event in events), events


GOOD = {"model": M, "messages": [{"role": "user", "content": "hi"}]}


def big_json(size: int) -> bytes:
    return b'{"pad": "' + b"x" * size + b'"}'


@pytest.mark.parametrize(
    ("early", "request_kwargs"),
    [
        # over max_body_mb by Content-Length: refused before a byte is read
        (413, {"content": big_json(2 << 20), "headers": {"content-type": "application/json"}}),
        # chunked, no Content-Length: refused once the count passes the cap
        (413, {"content": iter([big_json(2 << 20)])}),
        # a wrong key: refused before the body is read
        (401, {"json": GOOD, "headers": {"Authorization": "Bearer wrong"}}),
        # a body on a path that does not exist: answered without reading it
        (404, {"content": big_json(200_000), "url": "/v1/nowhere"}),
    ],
    ids=["413-declared", "413-chunked", "401", "404"],
)
def test_an_early_answer_leaves_the_client_pool_usable(
    early: int, request_kwargs: dict[str, Any]
) -> None:
    """An answer sent before the body was read closes the connection (``Connection:
    close``), so the client's next request on the same pool goes to a fresh one
    instead of dying on a connection whose unread body the server gave up on."""
    with LiveGateway({"model_path": M}, max_body_mb=1, api_keys=["k"]) as gw:
        auth = {"Authorization": "Bearer k"}
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        with httpx.Client(base_url=gw.url, timeout=10, headers=auth, limits=limits) as http:
            for _ in range(5):
                kwargs = dict(request_kwargs)
                url = kwargs.pop("url", "/v1/chat/completions")
                if isinstance(kwargs.get("content"), type(iter([]))):
                    kwargs["content"] = iter([big_json(2 << 20)])  # an iterator is used once
                refused = http.post(url, **kwargs)
                assert refused.status_code == early, refused.text
                assert refused.headers["connection"] == "close"
                assert refused.json()["error"]["message"]
                answer = http.post("/v1/chat/completions", json=GOOD)
                assert answer.status_code == 200, answer.text
                assert answer.json()["choices"][0]["message"]["content"] == "hi "
                assert "connection" not in answer.headers  # a read body keeps it alive


HANG = [{"role": "user", "content": "hang"}]
STREAMS = {
    "chat": ("/v1/chat/completions", {"model": M, "messages": HANG, "stream": True}),
    "anthropic": (
        "/v1/messages",
        {"model": M, "messages": HANG, "max_tokens": 50, "stream": True},
    ),
    "responses": ("/v1/responses", {"model": M, "input": "hang", "stream": True}),
}


def test_sigterm_ends_long_streams_with_an_error_and_their_terminal_event() -> None:
    """Streams that outlast ``shutdown_grace`` are not cut mid-body: each ends with
    an error naming the shutdown and its API's terminal event, then the server
    closes; a plain request in flight gets a 503 body saying the same."""
    raw: dict[str, list[str]] = {}
    plain: list[httpx.Response] = []

    def read(name: str, url: str, body: dict[str, Any]) -> None:
        with httpx.stream("POST", url, json=body, timeout=30) as response:
            assert response.status_code == 200
            raw[name] = list(response.iter_lines())

    with LiveGateway({"model_path": M, "max_concurrency": 8}, shutdown_grace=0.5) as gw:
        handle = gw.registry.resolve(M)
        readers = [
            threading.Thread(target=read, args=(name, gw.url + url, body))
            for name, (url, body) in STREAMS.items()
        ]
        readers.append(
            threading.Thread(
                target=lambda: plain.append(
                    httpx.post(
                        f"{gw.url}/v1/chat/completions",
                        json={"model": M, "messages": HANG},
                        timeout=30,
                    )
                )
            )
        )
        for reader in readers:
            reader.start()
        wait_for(lambda: handle.inflight == 4)
        started = time.monotonic()
        gw.signal_stop()
        for reader in readers:
            reader.join(30)
        took = time.monotonic() - started
    assert took < 20, took
    assert sorted(raw) == sorted(STREAMS)

    chat = [line for line in raw["chat"] if line.startswith("data: ")]
    assert chat[-1] == "data: [DONE]"
    error = json.loads(chat[-2].removeprefix("data: "))["error"]
    assert "shutting down" in error["message"] and error["code"] == "model_stopped"

    anthropic = events_of(raw["anthropic"])
    kind, data = anthropic[-1]
    assert kind == "error" and data["type"] == "error"
    assert "shutting down" in data["error"]["message"]

    responses = events_of(raw["responses"])
    assert [kind for kind, _ in responses[-2:]] == ["error", "response.failed"]
    assert "shutting down" in responses[-2][1]["message"]
    assert responses[-1][1]["response"]["status"] == "failed"

    (answer,) = plain
    assert answer.status_code == 503
    assert "shutting down" in answer.json()["error"]["message"]


def events_of(lines: list[str]) -> list[tuple[str, Any]]:
    """``(event name, decoded data)`` of a stream with named events."""
    out: list[tuple[str, Any]] = []
    kind = ""
    for line in lines:
        if line.startswith("event: "):
            kind = line.removeprefix("event: ")
        elif line.startswith("data: "):
            out.append((kind, json.loads(line.removeprefix("data: "))))
    return out


def test_a_burst_at_a_loading_model_gets_429s_beyond_its_queue() -> None:
    """Six streams at once at a model that is still loading, with one slot and one
    queue place: two are answered, four get 429 with Retry-After at once."""
    slow = "lab/fake/slow-start"
    with LiveGateway({"model_path": slow, "max_concurrency": 1, "max_queue": 1}) as gw:
        results: list[tuple[int, str | None, list[str]]] = []

        def stream(i: int) -> None:
            body = {
                "model": slow,
                "messages": [{"role": "user", "content": f"burst {i}"}],
                "stream": True,
            }
            with httpx.stream("POST", f"{gw.url}/v1/chat/completions", json=body, timeout=30) as r:
                if r.status_code == 200:
                    results.append((200, None, data_lines(r)))
                else:
                    r.read()
                    results.append((r.status_code, r.headers.get("retry-after"), [r.text]))

        clients = [threading.Thread(target=stream, args=(i,)) for i in range(6)]
        for client in clients:
            client.start()
        for client in clients:
            client.join(30)
    statuses = sorted(status for status, _, _ in results)
    assert statuses == [200, 200, 429, 429, 429, 429], results
    for status, retry_after, lines in results:
        if status == 429:
            assert retry_after == "1"
            error = json.loads(lines[0])["error"]
            assert error["code"] == "model_at_capacity" and "max_queue 1" in error["message"]
        else:
            assert lines[-1] == "data: [DONE]"


def test_sigterm_ends_the_web_uis_live_log_stream() -> None:
    """The UI's log stream never ends by itself: the signal ends it, so it does
    not hold the shutdown for Hypercorn's whole drain limit."""
    ended: list[float] = []
    failures: list[BaseException] = []
    with LiveGateway({"model_path": M}) as gw:
        streaming = threading.Event()

        def follow() -> None:
            try:
                with httpx.stream("GET", f"{gw.url}/ui/logs", timeout=30) as response:
                    assert response.status_code == 200
                    streaming.set()
                    for _ in response.iter_lines():
                        pass
                ended.append(time.monotonic())
            except BaseException as exc:
                failures.append(exc)
            finally:
                streaming.set()

        reader = threading.Thread(target=follow)
        reader.start()
        assert streaming.wait(10)
        assert reader.is_alive() and not ended and not failures  # it streams
        started = time.monotonic()
        gw.signal_stop()
        reader.join(30)
    assert not failures, failures
    assert ended and ended[0] - started < 3, ended[0] - started


def test_a_log_stream_whose_client_left_ends() -> None:
    """A client that resets the connection of /ui/logs: the stream writes to it
    once more at most, then ends and leaves the hub."""
    import logging
    import socket

    with LiveGateway({"model_path": M}) as gw:
        hub = gateway_of(gw.app).log_hub
        sock = socket.create_connection(("127.0.0.1", gw.port))
        sock.sendall(b"GET /ui/logs HTTP/1.1\r\nHost: gateway\r\n\r\n")
        assert b"200" in sock.recv(4096)
        deadline = time.monotonic() + 5
        while not hub._subscribers and time.monotonic() < deadline:
            time.sleep(0.01)
        assert hub._subscribers
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.close()  # a reset: the client is gone without a goodbye
        for i in range(20):  # lines the stream tries to write to the gone client
            logging.getLogger("mlx_gateway.test").warning("line %d", i)
            time.sleep(0.01)
        deadline = time.monotonic() + 10
        while hub._subscribers and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not hub._subscribers
