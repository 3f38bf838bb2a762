"""The API through the real Starlette app, against an in-process fake registry."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgspec
import openai
import pytest
from starlette.applications import Starlette

from mlx_gateway.supervisor.errors import ModelUnavailable
from mlx_gateway.supervisor.gateway import gateway_of

from .fakes import FakeHandle, FakeRegistry, defaults, make_app

USER = [{"role": "user", "content": "hello big world"}]


@pytest.fixture
def handle() -> FakeHandle:
    return FakeHandle("org/model-a", config=defaults(aliases=["a"], temperature=0.3))


@pytest.fixture
def app(handle: FakeHandle) -> Starlette:
    return make_app(handle, FakeHandle("other"))


@pytest.fixture
async def http(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


@pytest.fixture
async def sdk(http: httpx.AsyncClient) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url="http://test/v1",
        api_key="unused",
        http_client=http,
        max_retries=0,
        _strict_response_validation=True,
    )


def events(body: bytes) -> list[Any]:
    """The decoded data events of an SSE body; ``[DONE]`` as the string."""
    assert body.endswith(b"\n\n")
    out: list[Any] = []
    for block in body.decode().split("\n\n")[:-1]:
        assert block.startswith("data: "), block
        data = block[len("data: ") :]
        out.append(data if data == "[DONE]" else msgspec.json.decode(data))
    return out


# ---------------------------------------------------------------- chat


async def test_chat_completion(sdk: openai.AsyncOpenAI, handle: FakeHandle) -> None:
    reply = await sdk.chat.completions.create(model="org/model-a", messages=USER)
    assert reply.object == "chat.completion"
    assert reply.model == "org/model-a"
    assert reply.id.startswith("chatcmpl-")
    assert reply.choices[0].message.role == "assistant"
    assert reply.choices[0].message.content == "hello big world "
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (3, 3)
    assert reply.usage.total_tokens == 6
    assert reply.usage.prompt_tokens_details is not None
    assert reply.usage.prompt_tokens_details.cached_tokens == 1
    [msg] = handle.sent
    assert msg.request_id == reply.id
    assert msg.messages == USER
    assert msg.sampling.temperature == 0.3  # the model's default
    assert handle.inflight == 0
    assert handle.finished == [reply.id]


async def test_chat_by_alias_and_sampling(sdk: openai.AsyncOpenAI, handle: FakeHandle) -> None:
    reply = await sdk.chat.completions.create(
        model="a", messages=USER, max_completion_tokens=2, temperature=0, stop="x", seed=3
    )
    assert reply.model == "org/model-a"
    assert reply.choices[0].message.content == "hello big "
    assert reply.choices[0].finish_reason == "length"
    sampling = handle.sent[0].sampling
    assert (sampling.max_tokens, sampling.temperature, sampling.stop, sampling.seed) == (
        2, 0.0, ["x"], 3,
    )  # fmt: skip


async def test_chat_content_parts_and_template_kwargs(
    http: httpx.AsyncClient, handle: FakeHandle
) -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi there"}]}]
    r = await http.post(
        "/v1/chat/completions",
        json={
            "model": "org/model-a",
            "messages": messages,
            "chat_template_kwargs": {"enable_thinking": False},
            "user": "someone",
            "tools": [],
        },
    )
    assert r.status_code == 200
    assert r.json()["choices"][0]["message"]["content"] == "hi there "
    assert handle.sent[0].messages == messages
    assert handle.sent[0].chat_template_kwargs == {"enable_thinking": False}


async def test_chat_stream(sdk: openai.AsyncOpenAI, handle: FakeHandle) -> None:
    stream = await sdk.chat.completions.create(model="org/model-a", messages=USER, stream=True)
    chunks = [chunk async for chunk in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[0].choices[0].delta.content == ""
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == "hello big world "
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.usage is None for c in chunks)
    assert len({(c.id, c.created, c.model) for c in chunks}) == 1
    assert handle.inflight == 0


async def test_chat_stream_wire_format(http: httpx.AsyncClient) -> None:
    body = {"model": "org/model-a", "messages": USER, "stream": True}
    r = await http.post("/v1/chat/completions", json=body)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["cache-control"] == "no-cache"
    assert r.headers["x-accel-buffering"] == "no"
    data = events(r.content)
    assert data[-1] == "[DONE]"
    assert all("usage" not in d for d in data[:-1])
    assert data[-2]["choices"][0] == {
        "index": 0, "delta": {}, "finish_reason": "stop", "logprobs": None,
    }  # fmt: skip
    assert [d["object"] for d in data[:-1]] == ["chat.completion.chunk"] * 5


async def test_chat_stream_include_usage(sdk: openai.AsyncOpenAI, http: httpx.AsyncClient) -> None:
    stream = await sdk.chat.completions.create(
        model="org/model-a", messages=USER, stream=True, stream_options={"include_usage": True}
    )
    chunks = [chunk async for chunk in stream]
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == 6
    assert chunks[-2].choices[0].finish_reason == "stop"

    body = {
        "model": "a",
        "messages": USER,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    data = events((await http.post("/v1/chat/completions", json=body)).content)
    assert all(d["usage"] is None for d in data[:-2])  # null on every chunk but the last
    assert data[-2]["usage"]["completion_tokens"] == 3
    assert data[-1] == "[DONE]"


# ---------------------------------------------------------------- completions


async def test_completion(sdk: openai.AsyncOpenAI, handle: FakeHandle) -> None:
    reply = await sdk.completions.create(model="org/model-a", prompt="one two", max_tokens=5)
    assert reply.object == "text_completion"
    assert reply.id.startswith("cmpl-")
    assert reply.choices[0].text == "one two "
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None and reply.usage.total_tokens == 4
    assert handle.sent[0].prompt == "one two"
    assert handle.sent[0].messages is None


async def test_completion_token_prompt_and_echo(
    sdk: openai.AsyncOpenAI, handle: FakeHandle
) -> None:
    reply = await sdk.completions.create(model="org/model-a", prompt=[[5, 6]])
    assert reply.choices[0].text == "5 6 "
    assert handle.sent[0].prompt == [5, 6]
    echoed = await sdk.completions.create(model="org/model-a", prompt="say it", echo=True)
    assert echoed.choices[0].text == "say itsay it "


async def test_completion_stream(sdk: openai.AsyncOpenAI, http: httpx.AsyncClient) -> None:
    # The SDK types Completion.finish_reason as non-null, yet OpenAI (and vLLM) send
    # null on every stream chunk but the last: strict validation cannot apply here.
    lenient = openai.AsyncOpenAI(
        base_url="http://test/v1", api_key="unused", http_client=http, max_retries=0
    )
    stream = await lenient.completions.create(
        model="org/model-a",
        prompt="a b c",
        stream=True,
        max_tokens=2,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "a b "
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 2

    body = {"model": "org/model-a", "prompt": "a", "stream": True}
    data = events((await http.post("/v1/completions", json=body)).content)
    assert [d["choices"][0]["text"] for d in data[:-1]] == ["a ", ""]
    assert data[-1] == "[DONE]"


# ---------------------------------------------------------------- errors


async def test_unknown_model_is_a_404_listing_models(sdk: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        await sdk.chat.completions.create(model="nope", messages=USER)
    error = info.value.body
    assert isinstance(error, dict)
    assert error["code"] == "model_not_found"
    assert error["param"] == "model"
    assert "org/model-a" in error["message"] and "other" in error["message"]


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", {"messages": USER}, "model"),
        ("/v1/chat/completions", {"model": "a", "messages": [{"role": "x"}]}, "messages[0].role"),
        ("/v1/chat/completions", {"model": "a", "messages": USER, "temperature": 9}, "temperature"),
        ("/v1/chat/completions", {"model": "a", "messages": USER, "n": 17}, "n"),
        (
            "/v1/chat/completions",
            {"model": "a", "messages": USER, "stream_options": {"include_usage": True}},
            "stream_options",
        ),
        ("/v1/completions", {"model": "a", "prompt": ["x", "y"]}, "prompt"),
        ("/v1/completions", {"model": "a", "prompt": [1], "echo": True}, "echo"),
        ("/v1/completions", {"model": "a", "prompt": "x", "top_p": 0}, "top_p"),
    ],
)
async def test_malformed_bodies_are_400_with_param(
    http: httpx.AsyncClient, handle: FakeHandle, path: str, body: Any, param: str
) -> None:
    r = await http.post(path, json=body)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"
    assert handle.sent == []


async def test_invalid_json_is_400(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/chat/completions", content=b"{nope")
    assert r.status_code == 400
    assert "not valid JSON" in r.json()["error"]["message"]


@pytest.mark.parametrize("stream", [False, True])
async def test_worker_rejection_is_a_plain_http_error(
    http: httpx.AsyncClient, handle: FakeHandle, stream: bool
) -> None:
    body = {"model": "a", "messages": [{"role": "user", "content": "reject me"}], "stream": stream}
    r = await http.post("/v1/chat/completions", json=body)
    assert r.status_code == 400
    assert r.headers["content-type"] == "application/json"
    assert r.json()["error"]["code"] == "context_length_exceeded"
    assert handle.inflight == 0


async def test_load_failure_is_503(http: httpx.AsyncClient, handle: FakeHandle) -> None:
    handle.load_error = ModelUnavailable("download failed: offline")
    r = await http.post("/v1/completions", json={"model": "a", "prompt": "x", "stream": True})
    assert r.status_code == 503
    assert r.json()["error"] == {
        "message": "download failed: offline",
        "type": "server_error",
        "param": None,
        "code": "model_unavailable",
    }
    assert handle.inflight == 0


async def test_worker_crash_mid_stream_ends_with_error_and_done(
    http: httpx.AsyncClient, sdk: openai.AsyncOpenAI, handle: FakeHandle
) -> None:
    body = {"model": "a", "messages": [{"role": "user", "content": "crash a b c"}], "stream": True}
    r = await http.post("/v1/chat/completions", json=body)
    assert r.status_code == 200
    data = events(r.content)
    assert data[-1] == "[DONE]"
    assert data[-2] == {
        "error": {
            "message": "model 'm' worker killed by SIGKILL",
            "type": "server_error",
            "param": None,
            "code": "worker_crashed",
        }
    }
    assert [d["choices"][0]["delta"].get("content") for d in data[:-2]] == ["", "crash ", "a "]
    assert handle.inflight == 0

    stream = await sdk.chat.completions.create(model="a", messages=body["messages"], stream=True)
    with pytest.raises(openai.APIError, match="SIGKILL"):
        async for _ in stream:
            pass


async def test_unexpected_error_mid_stream(http: httpx.AsyncClient, handle: FakeHandle) -> None:
    body = {"model": "a", "prompt": "boom a b", "stream": True}
    data = events((await http.post("/v1/completions", json=body)).content)
    assert data[-1] == "[DONE]"
    assert data[-2]["error"]["type"] == "server_error"
    assert "unexpected" not in data[-2]["error"]["message"]  # no internals leak
    assert handle.inflight == 0


@pytest.mark.parametrize(
    ("content", "code"), [("crash a b c", "worker_crashed"), ("boom a b", None)]
)
async def test_a_failure_mid_stream_with_several_choices_ends_with_error_and_done(
    http: httpx.AsyncClient, handle: FakeHandle, content: str, code: str | None
) -> None:
    """The full chat stream (here: ``n`` 2, not the plain path) ends the same way."""
    messages = [{"role": "user", "content": content}]
    body = {"model": "a", "messages": messages, "n": 2, "stream": True}
    r = await http.post("/v1/chat/completions", json=body)
    assert r.status_code == 200
    data = events(r.content)
    assert data[-1] == "[DONE]"
    assert data[-2]["error"]["type"] == "server_error"
    assert data[-2]["error"]["code"] == code
    assert "unexpected" not in data[-2]["error"]["message"]  # no internals leak
    assert {d["choices"][0]["index"] for d in data[:-2]} == {0, 1}
    assert handle.inflight == 0 and len(handle.cancelled) == 2  # both generations closed


async def test_unknown_path_and_method_are_openai_shaped(http: httpx.AsyncClient) -> None:
    r = await http.get("/v1/nothing")
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "not_found"
    r = await http.get("/v1/chat/completions")
    assert r.status_code == 405
    assert r.json()["error"]["code"] == "method_not_allowed"
    assert "POST" in r.headers["allow"]


async def test_unexpected_exception_is_an_openai_shaped_500(
    http: httpx.AsyncClient, app: Starlette, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken(FakeRegistry):
        def resolve(self, name: str) -> FakeHandle:
            raise RuntimeError("secret detail")

    gateway_of(app).registry = Broken()  # type: ignore[assignment]
    r = await http.post("/v1/chat/completions", json={"model": "a", "messages": USER})
    assert r.status_code == 500
    error = r.json()["error"]
    assert error["type"] == "server_error"
    assert "secret" not in error["message"]
    assert "secret detail" in caplog.text


# ---------------------------------------------------------------- models and health


async def test_models(sdk: openai.AsyncOpenAI, http: httpx.AsyncClient) -> None:
    page = await sdk.models.list()
    assert [m.id for m in page.data] == ["org/model-a", "other"]
    assert all(m.object == "model" and m.owned_by for m in page.data)
    raw = (await http.get("/v1/models")).json()
    assert raw["object"] == "list"
    entry = raw["data"][0]
    assert entry["state"] == "ready"
    assert entry["context_length"] == 256
    assert entry["aliases"] == ["a"]
    assert isinstance(entry["created"], int)

    model = await sdk.models.retrieve("org/model-a")
    assert model.id == "org/model-a"
    r = await http.get("/v1/models/a")
    assert r.json()["id"] == "org/model-a"
    r = await http.get("/v1/models/org/nope")
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "model_not_found"


async def test_health(http: httpx.AsyncClient) -> None:
    r = await http.get("/health")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok"
    assert body["models"]["org/model-a"]["state"] == "ready"
    assert set(body["models"]) == {"org/model-a", "other"}


# ---------------------------------------------------------------- client disconnect


async def call_raw(
    app: Starlette, path: str, body: Any, disconnect: asyncio.Event, leave_after_first_body: bool
) -> list[dict[str, Any]]:
    """Drive the ASGI app directly: ``receive`` hands over ``body``, then reports
    the client gone once ``disconnect`` is set (or after the first body part)."""
    body_sent = False
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal body_sent
        if not body_sent:
            body_sent = True
            return {"type": "http.request", "body": msgspec.json.encode(body), "more_body": False}
        await disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if leave_after_first_body and message["type"] == "http.response.body":
            disconnect.set()

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.1"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json")],
        "client": ("test", 1),
        "server": ("test", 80),
    }
    await asyncio.wait_for(app(scope, receive, send), 5)
    return sent


async def test_disconnect_mid_stream_cancels_the_request(
    app: Starlette, handle: FakeHandle
) -> None:
    body = {"model": "a", "messages": [{"role": "user", "content": "hang on"}], "stream": True}
    sent = await call_raw(app, "/v1/chat/completions", body, asyncio.Event(), True)
    assert sent[0]["status"] == 200
    assert len(handle.cancelled) == 1
    assert handle.inflight == 0


async def test_disconnect_while_waiting_for_a_whole_answer(
    app: Starlette, handle: FakeHandle
) -> None:
    disconnect = asyncio.Event()
    body = {"model": "a", "prompt": "hang on"}
    call = asyncio.ensure_future(call_raw(app, "/v1/completions", body, disconnect, False))
    await handle.started.wait()
    assert handle.inflight == 1
    disconnect.set()
    sent = await call
    assert sent[0]["status"] == 499
    assert len(handle.cancelled) == 1
    assert handle.inflight == 0
