"""The API end to end: the real app, registry and relay, a fake worker process
speaking the real protocol over real ZeroMQ, and the official OpenAI SDK."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgspec
import openai
import pytest
from starlette.applications import Starlette

from mlx_gateway.supervisor.app import create_app
from mlx_gateway.supervisor.gateway import gateway_of

from ..fakes import fake_command, fake_config
from .clients import asgi_client, strict_sdk
from .test_handlers import call_raw, events

pytestmark = pytest.mark.slow

OK = "lab/fake/ok"  # served name = model path; the fake worker's mode is "ok"
FAILING = "fake/load-error"


def say(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


@pytest.fixture
async def app() -> AsyncIterator[Starlette]:
    config = fake_config(
        {"model_path": OK, "aliases": ["ok"], "temperature": 0.5},
        {"model_path": FAILING},
    )
    app = create_app(config, command=fake_command)
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
async def http(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(app, timeout=5.0) as client:  # httpx's default timeout
        yield client


@pytest.fixture
def sdk(http: httpx.AsyncClient) -> openai.AsyncOpenAI:
    return strict_sdk(http)


def status(app: Starlette, name: str = OK) -> dict[str, Any]:
    return gateway_of(app).registry.resolve(name).status().public()


async def test_chat(sdk: openai.AsyncOpenAI, app: Starlette) -> None:
    reply = await sdk.chat.completions.create(model=OK, messages=say("hello gateway world"))
    assert reply.model == OK
    assert reply.choices[0].message.content == "hello gateway world "
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (3, 3)
    assert status(app)["inflight"] == 0

    capped = await sdk.chat.completions.create(model="ok", messages=say("a b c d"), max_tokens=2)
    assert capped.choices[0].message.content == "a b "
    assert capped.choices[0].finish_reason == "length"


async def test_chat_stream_with_usage(sdk: openai.AsyncOpenAI, app: Starlette) -> None:
    stream = await sdk.chat.completions.create(
        model=OK,
        messages=say("one two three"),
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "one two three "
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 6
    assert all(c.usage is None for c in chunks[:-1])
    assert status(app)["inflight"] == 0


async def test_completions(sdk: openai.AsyncOpenAI, http: httpx.AsyncClient) -> None:
    reply = await sdk.completions.create(model=OK, prompt="the quick fox")
    assert reply.choices[0].text == "the quick fox "
    assert reply.choices[0].finish_reason == "stop"

    body = {"model": OK, "prompt": [7, 8], "stream": True, "max_tokens": 5}
    r = await http.post("/v1/completions", json=body)
    data = events(r.content)
    assert data[-1] == "[DONE]"
    assert "".join(d["choices"][0]["text"] for d in data[:-1]) == "7 8 "
    assert data[-2]["choices"][0]["finish_reason"] == "stop"


async def test_unknown_model_is_404(sdk: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        await sdk.chat.completions.create(model="gpt-4o", messages=say("hi"))
    assert OK in str(info.value)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": say("hi")}, "model"),
        ({"model": OK, "messages": [{"role": "user", "content": 1}]}, "messages[0].content"),
        ({"model": OK, "messages": say("hi"), "max_tokens": 0}, "max_tokens"),
        ({"model": OK, "messages": say("hi"), "n": 17}, "n"),
    ],
)
async def test_malformed_bodies(
    http: httpx.AsyncClient, app: Starlette, body: Any, param: str
) -> None:
    r = await http.post("/v1/chat/completions", json=body)
    assert r.status_code == 400
    assert r.json()["error"]["param"] == param
    assert status(app)["state"] == "unloaded"  # nothing was started for it


@pytest.mark.parametrize("stream", [False, True])
async def test_worker_rejection_before_any_sse(
    http: httpx.AsyncClient, app: Starlette, stream: bool
) -> None:
    # Loaded first, so the stream does not start early to show load progress.
    assert (await http.post(f"/v1/models/{OK}/load")).status_code == 200
    body = {"model": OK, "messages": say("reject this please"), "stream": stream}
    r = await http.post("/v1/chat/completions", json=body)
    assert r.status_code == 400
    assert r.headers["content-type"] == "application/json"
    assert r.json()["error"]["code"] == "context_length_exceeded"
    assert status(app)["inflight"] == 0


async def test_crash_mid_stream_ends_with_error_then_done(
    http: httpx.AsyncClient, sdk: openai.AsyncOpenAI, app: Starlette
) -> None:
    body = {"model": OK, "messages": say("crash a b c d e f"), "stream": True}
    r = await asyncio.wait_for(http.post("/v1/chat/completions", json=body), 10)
    assert r.status_code == 200
    data = events(r.content)
    assert data[-1] == "[DONE]"
    error = data[-2]["error"]
    assert error["code"] == "worker_crashed"
    assert "SIGKILL" in error["message"]
    assert "".join(d["choices"][0]["delta"].get("content", "") for d in data[:-2]) == "crash a b "
    assert status(app)["inflight"] == 0

    # The next request starts a fresh worker.
    reply = await sdk.chat.completions.create(model=OK, messages=say("again"))
    assert reply.choices[0].message.content == "again "


async def test_load_failure_is_503(http: httpx.AsyncClient, app: Starlette) -> None:
    r = await http.post("/v1/completions", json={"model": FAILING, "prompt": "x"})
    assert r.status_code == 503
    assert "download failed: offline" in r.json()["error"]["message"]
    health = (await http.get("/health")).json()
    assert health["models"][FAILING]["state"] == "failed"


async def test_models_and_health(sdk: openai.AsyncOpenAI, http: httpx.AsyncClient) -> None:
    page = await sdk.models.list()
    assert [m.id for m in page.data] == [OK, FAILING]
    raw = (await http.get("/v1/models")).json()["data"]
    assert raw[0]["state"] == "unloaded"
    assert raw[0]["aliases"] == ["ok"]

    await sdk.chat.completions.create(model=OK, messages=say("warm up"))
    model = await sdk.models.retrieve(OK)  # the id holds slashes
    assert model.id == OK
    entry = (await http.get(f"/v1/models/{OK}")).json()
    assert entry["state"] == "ready"
    assert entry["context_length"] == 256
    assert isinstance(entry["pid"], int)
    assert (await http.get("/v1/models/ok")).json()["id"] == OK
    assert (await http.get("/v1/models/lab/nope")).status_code == 404

    health = (await http.get("/health")).json()
    assert health["status"] == "ok"
    assert health["models"][OK]["state"] == "ready"
    assert health["models"][FAILING]["state"] == "unloaded"


async def test_client_disconnect_cancels_on_the_worker(
    app: Starlette, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mlx_gateway.worker.output")
    body = {"model": OK, "messages": say("hang forever"), "stream": True}
    sent = await call_raw(app, "/v1/chat/completions", body, asyncio.Event(), True)
    assert sent[0]["status"] == 200
    first = msgspec.json.decode(sent[1]["body"][len(b"data: ") :])
    request_id = first["id"]
    for _ in range(100):
        if f"cancelled {request_id}" in caplog.text:
            break
        await asyncio.sleep(0.05)
    assert f"cancelled {request_id}" in caplog.text
    assert status(app)["inflight"] == 0
