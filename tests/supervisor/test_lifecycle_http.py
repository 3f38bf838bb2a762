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
