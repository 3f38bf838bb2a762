"""``GET /v1/requests`` and ``POST /v1/requests/{id}/cancel``: the requests in
flight, seen and stopped; the real gateway over real TCP, fake workers over real
ZeroMQ."""

from __future__ import annotations

import json
import threading
import time

import httpx
import ollama
import pytest

from tests.supervisor.fakes import worker_output
from tests.supervisor.live import LiveGateway

pytestmark = pytest.mark.slow

MODEL = "fake/ok"
LONG = " ".join(f"w{i}" for i in range(2000))  # 2000 steps of 20 ms: 40 s unless cancelled


def test_a_stream_is_listed_then_cancelled_like_a_client_leaving() -> None:
    with LiveGateway({"model_path": MODEL}) as gw:
        body = {"model": MODEL, "messages": [{"role": "user", "content": LONG}], "stream": True}
        seen: dict[str, object] = {}

        def stream() -> None:
            try:
                with httpx.stream(
                    "POST", f"{gw.url}/v1/chat/completions", json=body, timeout=60
                ) as r:
                    seen["header"] = r.headers.get("x-request-id")
                    for line in r.iter_lines():
                        if line.startswith("data: {"):
                            event = json.loads(line[6:])
                            if "error" in event:
                                seen["error"] = event["error"]
                            elif "id" not in seen:
                                seen["id"] = event["id"]
                        if line == "data: [DONE]":
                            seen["done"] = True
            except httpx.HTTPError as exc:  # a cut connection would show here
                seen["cut"] = type(exc).__name__
            seen["done_at"] = time.monotonic()

        reader = threading.Thread(target=stream)
        reader.start()
        deadline = time.monotonic() + 20
        listed: list[dict[str, object]] = []
        while not (listed and str(listed[0]["phase"]).startswith("decode")):
            assert time.monotonic() < deadline, listed
            listed = httpx.get(f"{gw.url}/v1/requests").json()["data"]
            time.sleep(0.05)
        (entry,) = listed  # the listing itself is not listed
        assert entry["model"] == MODEL and entry["path"] == "/v1/chat/completions"
        assert str(entry["client"]).startswith("127.0.0.1:")
        assert entry["prompt_tokens"] == 2000 and entry["age"] >= 0  # type: ignore[operator]
        # Its id is the X-Request-Id of the answer and the chat completion's id.
        assert entry["id"] == seen["header"] == seen.get("id", seen["header"])
        assert str(entry["id"]).startswith("chatcmpl-")

        cancelled_at = time.monotonic()
        answer = httpx.post(f"{gw.url}/v1/requests/{entry['id']}/cancel")
        assert answer.status_code == 200 and answer.json()["cancelled"] is True
        reader.join(20)
        assert not reader.is_alive()
        assert float(seen["done_at"]) - cancelled_at < 10  # type: ignore[arg-type]
        # A clear end: the stream's error event, then [DONE]; not a cut connection.
        assert "cut" not in seen and seen.get("done") is True, seen
        error = seen["error"]
        assert isinstance(error, dict) and error["code"] == "request_cancelled"
        assert f"/v1/requests/{entry['id']}/cancel" in error["message"]
        handle = gw.registry.resolve(MODEL)
        deadline = time.monotonic() + 10
        while not any(line.startswith("cancelled ") for line in worker_output(handle)):
            assert time.monotonic() < deadline, worker_output(handle)
            time.sleep(0.05)
        assert httpx.get(f"{gw.url}/v1/requests").json()["data"] == []
        gone = httpx.post(f"{gw.url}/v1/requests/{entry['id']}/cancel")
        assert gone.status_code == 404 and "GET /v1/requests" in gone.json()["error"]["message"]


def test_every_answer_carries_its_request_id() -> None:
    with LiveGateway({"model_path": MODEL}) as gw:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "say hi"}]}
        answer = httpx.post(f"{gw.url}/v1/chat/completions", json=body, timeout=30)
        assert answer.headers["x-request-id"] == answer.json()["id"]
        models = httpx.get(f"{gw.url}/v1/models")
        assert models.headers["x-request-id"].startswith("req-")


def test_the_requests_endpoints_want_an_admin_key() -> None:
    with LiveGateway({"model_path": MODEL}, api_keys=["user"], admin_keys=["admin"]) as gw:
        as_user = httpx.get(f"{gw.url}/v1/requests", headers={"Authorization": "Bearer user"})
        assert as_user.status_code == 403
        as_admin = httpx.get(f"{gw.url}/v1/requests", headers={"Authorization": "Bearer admin"})
        assert as_admin.status_code == 200 and as_admin.json()["data"] == []


def test_a_cancelled_ollama_stream_ends_with_its_error_line() -> None:
    """With the official ollama client: the stream ends with Ollama's error line,
    which the client raises as a ResponseError naming the cancel."""
    with LiveGateway({"model_path": MODEL}) as gw:
        client = ollama.Client(host=gw.url)
        stream = client.chat(model=MODEL, messages=[{"role": "user", "content": LONG}], stream=True)
        assert next(stream).message.content  # it runs
        (entry,) = httpx.get(f"{gw.url}/v1/requests").json()["data"]
        assert entry["path"] == "/api/chat" and str(entry["id"]).startswith("ollama-")
        assert httpx.post(f"{gw.url}/v1/requests/{entry['id']}/cancel").status_code == 200
        with pytest.raises(ollama.ResponseError) as ended:
            for _ in stream:
                pass
        assert "cancelled by an admin" in ended.value.error
