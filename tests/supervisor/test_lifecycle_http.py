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

from .live import LiveGateway

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
