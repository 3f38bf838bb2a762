"""The one serve of the text surfaces (reply/serve.py), through a dialect of its
own (``/v1/say``) and a scripted worker: the model's name resolved and its kind
checked, the turn built and started, a stream and a whole answer, a rejection as
a plain HTTP error, a worker that dies (mid-stream; after a whole answer's headers:
computed again), a client that leaves, the request's priority and keep_alive."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from mlx_gateway.supervisor.config.kinds import model_entry
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.pool.keep_alive import lifetime
from mlx_gateway.supervisor.reply.routed import MODEL_HEADER

from ..api.fakes import defaults
from .fakes import Round, ScriptedHandle, said
from .gateway import SAY, Exchange, client, gateway

HELLO = Round(said("hello big world"))


def model(name: str = "org/m", *script: Round, **settings: Any) -> ScriptedHandle:
    return ScriptedHandle(name, config=defaults(**settings), script=list(script))


def sse_rows(body: bytes) -> list[dict[str, Any]]:
    """The data lines of an SSE body, decoded."""
    blocks = [b for b in body.decode().split("\n\n") if b.startswith("data: {")]
    return [json.loads(b.removeprefix("data: ")) for b in blocks]


async def test_a_whole_answer_is_the_turns_events() -> None:
    handle = model("org/m", HELLO)
    async with client(gateway(handle)) as http:
        answer = await http.post(SAY, json={"model": "org/m", "text": "hi there"})
    assert answer.status_code == 200, answer.text
    head, *events = answer.json()
    assert head["model"] == "org/m" and head["id"].startswith("say-")
    assert answer.headers[MODEL_HEADER] == "org/m"
    assert events == [
        {"text": "hello "},
        {"text": "big "},
        {"text": "world"},
        {"finish": "stop", "prompt_tokens": 7, "completion_tokens": 3},
    ]
    (sent,) = handle.sent  # one generation, named by the answer's id
    assert sent.request_id == head["id"]
    assert sent.messages == [{"role": "user", "content": "hi there"}]
    assert handle.finished == [head["id"]] and handle.inflight == 0


async def test_a_stream_writes_each_event_as_it_comes() -> None:
    handle = model("org/m", HELLO)
    async with client(gateway(handle)) as http:
        answer = await http.post(SAY, json={"model": "org/m", "text": "hi", "stream": True})
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/event-stream")
    assert answer.headers[MODEL_HEADER] == "org/m"
    assert sse_rows(answer.content) == [
        {"text": "hello "},
        {"text": "big "},
        {"text": "world"},
        {"finish": "stop", "prompt_tokens": 7, "completion_tokens": 3},
    ]
    assert handle.finished == [handle.sent[0].request_id]


async def test_the_name_is_resolved_as_the_registry_finds_it() -> None:
    handle = model("org/m", HELLO, aliases=["m"])
    async with client(gateway(handle, model("other"))) as http:
        by_alias = await http.post(SAY, json={"model": "m", "text": "hi"})
        unknown = await http.post(SAY, json={"model": "nope", "text": "hi"})
    assert by_alias.json()[0]["model"] == "org/m"
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "model_not_found"
    assert len(handle.sent) == 1  # the unknown name reached no worker


async def test_a_model_of_another_kind_is_a_400_naming_the_endpoint() -> None:
    entry = model_entry(model_path="e", model_type="embeddings")
    embedder = ScriptedHandle("embedder", config=entry)
    async with client(gateway(embedder)) as http:
        answer = await http.post(SAY, json={"model": "embedder", "text": "hi"})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == "model" and SAY in error["message"]
    assert embedder.sent == []


async def test_the_models_defaults_fill_the_sampling_the_request_leaves_out() -> None:
    handle = model("org/m", HELLO, HELLO, temperature=0.3, max_tokens=50)
    async with client(gateway(handle)) as http:
        await http.post(SAY, json={"model": "org/m", "text": "hi"})
        await http.post(SAY, json={"model": "org/m", "text": "hi", "temperature": 0.9})
    first, second = (msg.sampling for msg in handle.sent)
    assert (first.temperature, first.max_tokens) == (0.3, 50)
    assert (second.temperature, second.max_tokens) == (0.9, 50)


async def test_a_rejection_before_the_first_byte_is_a_plain_http_error() -> None:
    too_long = BadRequest("too long for the context", param="messages", code="context_length")
    handle = model("org/m", Round(reject=too_long), Round(reject=too_long))
    async with client(gateway(handle)) as http:
        whole = await http.post(SAY, json={"model": "org/m", "text": "hi"})
        streamed = await http.post(SAY, json={"model": "org/m", "text": "hi", "stream": True})
    for answer in (whole, streamed):
        assert answer.status_code == 400
        assert answer.json()["error"]["code"] == "context_length"
    assert handle.inflight == 0


async def test_a_stream_whose_worker_dies_ends_with_the_error() -> None:
    handle = model("org/m", Round(said("one two three"), crash_after=2))
    async with client(gateway(handle)) as http:
        answer = await http.post(SAY, json={"model": "org/m", "text": "hi", "stream": True})
    assert answer.status_code == 200
    rows = sse_rows(answer.content)
    assert rows[:2] == [{"text": "one "}, {"text": "two "}]
    assert rows[2]["error"]["code"] == "worker_crashed"
    assert answer.content.endswith(b"data: [DONE]\n\n")
    assert handle.inflight == 0


async def test_a_whole_answer_whose_worker_died_after_its_headers_is_computed_again() -> None:
    # Its headers go out once it takes longer than the keep-alive interval; the
    # scripted worker dies only after that, and the next one answers.
    headers_out = asyncio.Event()
    handle = model("org/m", Round(said("lost words"), gate=headers_out, crash_after=1), HELLO)
    exchange = Exchange(gateway(handle, stream_keepalive=0.1), {"model": "org/m", "text": "hi"})
    exchange.answering = headers_out
    await exchange.run()
    assert exchange.status == 200
    model_row, *events = json.loads(exchange.body)
    assert model_row["model"] == "org/m"
    assert [e.get("text") for e in events] == ["hello ", "big ", "world", None]
    assert events[-1]["finish"] == "stop"
    assert len(handle.sent) == 2 and handle.inflight == 0


async def test_a_whole_answer_is_computed_again_once() -> None:
    headers_out = asyncio.Event()
    dies = Round(said("lost words"), gate=headers_out, crash_after=1)
    handle = model("org/m", dies, Round(said("lost again"), crash_after=1))
    exchange = Exchange(gateway(handle, stream_keepalive=0.1), {"model": "org/m", "text": "hi"})
    exchange.answering = headers_out
    await exchange.run()
    assert exchange.status == 200  # its headers were out: the body is the error object
    assert json.loads(exchange.body)["error"]["code"] == "worker_crashed"
    assert len(handle.sent) == 2


async def test_a_quick_whole_answer_whose_worker_died_is_an_http_error() -> None:
    handle = model("org/m", Round(said("lost words"), crash_after=1))
    async with client(gateway(handle)) as http:
        answer = await http.post(SAY, json={"model": "org/m", "text": "hi"})
    assert answer.status_code == 503
    assert answer.json()["error"]["code"] == "worker_crashed"


async def test_an_unpadded_whole_answer_whose_worker_died_is_computed_again() -> None:
    handle = model("org/m", Round(said("lost words"), crash_after=1), HELLO)
    async with client(gateway(handle)) as http:
        answer = await http.post(SAY, json={"model": "org/m", "text": "hi", "ollama": True})
    assert answer.status_code == 200
    assert [e.get("text") for e in answer.json()[1:]] == ["hello ", "big ", "world", None]


async def test_an_ndjson_stream_is_its_lines() -> None:
    handle = model("org/m", HELLO)
    payload = {"model": "org/m", "text": "hi", "stream": True, "ollama": True}
    async with client(gateway(handle)) as http:
        answer = await http.post(SAY, json=payload)
    assert answer.headers["content-type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in answer.text.splitlines()]
    assert [line.get("text") for line in lines] == ["hello ", "big ", "world", None]


async def test_a_client_that_leaves_cancels_its_generation() -> None:
    for stream in (False, True):
        handle = model("org/m", Round(said("never sent"), gate=asyncio.Event()))
        payload = {"model": "org/m", "text": "hi", "stream": stream}
        exchange = Exchange(gateway(handle, stream_keepalive=0.1), payload)
        running = asyncio.ensure_future(exchange.run())
        await handle.started.wait()  # the worker holds it
        exchange.leave.set()
        await running
        assert handle.cancelled == [handle.sent[0].request_id], stream
        assert handle.finished == [] and handle.inflight == 0


async def test_flex_is_batch_work_on_the_worker() -> None:
    handle = model("org/m", HELLO, HELLO)
    async with client(gateway(handle)) as http:
        await http.post(SAY, json={"model": "org/m", "text": "hi"})
        await http.post(SAY, json={"model": "org/m", "text": "hi", "service_tier": "flex"})
    assert [msg.priority for msg in handle.sent] == ["interactive", "batch"]


async def test_keep_alive_is_recorded_for_the_model_and_checked_first() -> None:
    handle = model("org/m", HELLO)
    async with client(gateway(handle)) as http:
        kept = await http.post(SAY, json={"model": "org/m", "text": "hi", "keep_alive": "5m"})
        bad = await http.post(SAY, json={"model": "org/m", "text": "hi", "keep_alive": "soon"})
    assert kept.status_code == 200 and lifetime(handle) == 300
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "keep_alive"
    assert len(handle.sent) == 1  # the bad one reached no worker
