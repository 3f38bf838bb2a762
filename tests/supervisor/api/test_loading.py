"""Streams whose model is still loading: keep-alive comments, then the answer (or
an error event when the load fails)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.applications import Starlette

from mlx_gateway.supervisor.app import create_app
from mlx_gateway.supervisor.reply import loading

from ..fakes import fake_command, fake_config

pytestmark = pytest.mark.slow

SLOW = "lab/fake/slow-start"  # sends Progress for 1.5 s before Ready
FAILING = "fake/load-error"


@pytest.fixture
async def http(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[httpx.AsyncClient]:
    monkeypatch.setattr(loading, "GRACE_SECONDS", 0.2)
    app: Starlette = create_app(
        fake_config({"model_path": SLOW}, {"model_path": FAILING}, stream_keepalive=0.2),
        command=fake_command,
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            yield client


async def lines(client: httpx.AsyncClient, body: dict[str, object]) -> list[str]:
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        return [line async for line in r.aiter_lines() if line]


async def test_comments_while_loading_then_the_answer(http: httpx.AsyncClient) -> None:
    body = {"model": SLOW, "messages": [{"role": "user", "content": "hi there"}], "stream": True}
    got = await lines(http, body)
    comments = [line for line in got if line.startswith(":")]
    data = [line for line in got if line.startswith("data: ")]
    assert comments and all(SLOW in c for c in comments)
    assert any("loading" in c and "%" in c for c in comments)
    assert got.index(comments[-1]) < got.index(data[0])  # comments come first
    assert data[-1] == "data: [DONE]"
    assert '"hi "' in "".join(data) and '"there "' in "".join(data)


async def test_a_load_failing_after_the_stream_started(http: httpx.AsyncClient) -> None:
    body = {"model": FAILING, "messages": [{"role": "user", "content": "x"}], "stream": True}
    got = await lines(http, body)
    assert got[-1] == "data: [DONE]"
    assert '"error"' in got[-2] and "download failed: offline" in got[-2]


async def test_an_anthropic_stream_fails_the_anthropic_way(http: httpx.AsyncClient) -> None:
    """A context overflow once the model loaded, after the stream's 200: Anthropic's
    ``error`` event, in Anthropic's words (no OpenAI ``[DONE]``)."""
    body = {
        "model": SLOW,
        "max_tokens": 50,
        "messages": [{"role": "user", "content": "overflow 10 a b"}],
        "stream": True,
    }
    async with http.stream("POST", "/v1/messages", json=body) as r:
        assert r.status_code == 200
        got = [line async for line in r.aiter_lines() if line]
    # Keep-alive pings may come while the model loads; then the error event.
    ping = ["event: ping", 'data: {"type": "ping"}']
    events = [line for line in got if not line.startswith(":") and line not in ping]
    assert events[0] == "event: error"
    assert json.loads(events[1].removeprefix("data: ")) == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "input length and `max_tokens` exceed context limit: 4 + 50 > 10, "
            "decrease input length or `max_tokens` and try again",
        },
    }
    assert len(events) == 2
