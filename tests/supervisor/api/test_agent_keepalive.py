"""Coding agents' watchdogs stay fed during a long prefill, and their SDKs build the
same answers as without keep-alives.

Claude Code and Codex CLI abort a stream after 300 s without an *event* their SDK
hands on: SSE comments and Anthropic's ``ping`` never reach them. So after a
stream's opening the Responses API repeats ``response.in_progress`` and Anthropic
Messages sends a ``message_delta`` that sets nothing; a request without ``stream``
that is still prefilling gets its headers and a space per interval before the
JSON. The real gateway over real TCP with the fake worker, whose
``prefill <seconds>`` requests stay silent that long after ``Started``, and the
official ``openai`` and ``anthropic`` SDKs as the clients.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from mlx_gateway.supervisor.reply import serve

from ..live import LiveGateway

pytestmark = pytest.mark.slow

MODEL = "fake/ok"
INTERVAL = 0.25
EVENT_SECONDS = 0.6
"""The API's own keep-alive event at most this often (30 s in the gateway)."""
PREFILL = 2.5
PROMPT = f"prefill {PREFILL} hello there"
TEXT = f"{PROMPT} "
"""What the fake worker answers: the prompt's words echoed."""


@pytest.fixture(scope="module")
def gateway() -> Iterator[LiveGateway]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(serve, "API_EVENT_SECONDS", EVENT_SECONDS)
        with LiveGateway({"model_path": MODEL}, stream_keepalive=INTERVAL) as gw:
            yield gw


@pytest.fixture(scope="module")
def quiet() -> Iterator[LiveGateway]:
    """A gateway whose keep-alive interval is longer than the prefill: the baseline."""
    with LiveGateway({"model_path": MODEL}, stream_keepalive=60) as gw:
        yield gw


@pytest.fixture(scope="module")
def clients(gateway: LiveGateway, quiet: LiveGateway) -> Iterator[dict[str, Any]]:
    """The SDKs' clients of both gateways (``oai``/``claude``, ``…_quiet``)."""
    made: dict[str, Any] = {}
    for suffix, gw in (("", gateway), ("_quiet", quiet)):
        made["oai" + suffix] = openai.OpenAI(
            base_url=f"{gw.url}/v1", api_key="unused", max_retries=0
        )
        made["claude" + suffix] = anthropic.Anthropic(
            base_url=gw.url, api_key="unused", max_retries=0
        )
    yield made
    for client in made.values():
        client.close()


def without_ids(value: Any) -> Any:
    """``value`` (an SDK object's dump) without the fields that differ per request."""
    if isinstance(value, dict):
        return {
            k: without_ids(v) for k, v in value.items() if k not in ("id", "created", "created_at")
        }
    if isinstance(value, list):
        return [without_ids(v) for v in value]
    return value


def test_responses_stream_repeats_in_progress_while_prefilling(clients: dict[str, Any]) -> None:
    with clients["oai"].responses.stream(model=MODEL, input=PROMPT) as stream:
        events = list(stream)
        streamed = stream.get_final_response()
    kinds = [event.type for event in events]
    first_output = kinds.index("response.output_item.added")
    assert kinds[:2] == ["response.created", "response.in_progress"]
    # The prefill's keep-alives reach the application as events (Codex's watchdog
    # counts those), all before the first output.
    repeated = kinds[2:first_output]
    assert repeated and set(repeated) == {"response.in_progress"}, kinds
    assert len(repeated) >= PREFILL / EVENT_SECONDS / 2, kinds
    assert kinds.count("response.in_progress") == len(repeated) + 1
    numbers = [event.sequence_number for event in events]
    assert numbers == list(range(len(events)))
    assert all(e.response.status == "in_progress" for e in events[1:first_output])
    # The SDK builds the same response as from a stream without keep-alives, and a
    # padded answer in one body is the one without padding.
    with clients["oai_quiet"].responses.stream(model=MODEL, input=PROMPT) as stream:
        assert [event.type for event in stream].count("response.in_progress") == 1
        baseline = stream.get_final_response()
    assert streamed.output_text == TEXT
    assert without_ids(streamed.model_dump()) == without_ids(baseline.model_dump())
    padded = clients["oai"].responses.create(model=MODEL, input=PROMPT)
    plain = clients["oai_quiet"].responses.create(model=MODEL, input=PROMPT)
    assert padded.output_text == TEXT
    assert without_ids(padded.model_dump()) == without_ids(plain.model_dump())


def test_messages_stream_sends_message_deltas_while_prefilling(clients: dict[str, Any]) -> None:
    request: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": PROMPT}],
    }
    with clients["claude"].messages.stream(**request) as stream:
        events = list(stream)
        streamed = stream.get_final_message()
    kinds = [event.type for event in events]
    assert kinds[0] == "message_start"
    first_block = kinds.index("content_block_start")
    kept = events[1:first_block]
    assert kept and {event.type for event in kept} == {"message_delta"}, kinds
    assert len(kept) >= PREFILL / EVENT_SECONDS / 2, kinds
    for event in kept:
        assert event.type == "message_delta"
        assert event.delta.stop_reason is None and event.usage.output_tokens == 0
    assert kinds[-2:] == ["message_delta", "message_stop"]
    # The SDK's message is the one of a stream without keep-alives.
    with clients["claude_quiet"].messages.stream(**request) as stream:
        assert [event.type for event in stream].count("message_delta") == 1
        baseline = stream.get_final_message()
    assert streamed.content[0].type == "text" and streamed.content[0].text == TEXT
    assert streamed.stop_reason == "end_turn" and streamed.usage.output_tokens > 0
    assert without_ids(streamed.model_dump()) == without_ids(baseline.model_dump())
    padded = clients["claude"].messages.create(**request)
    plain = clients["claude_quiet"].messages.create(**request)
    assert without_ids(padded.model_dump()) == without_ids(plain.model_dump())
    assert without_ids(padded.model_dump()) == without_ids(streamed.model_dump())


ANSWERED = [
    ("/v1/messages", {"max_tokens": 64, "messages": [{"role": "user", "content": PROMPT}]}),
    ("/v1/responses", {"input": PROMPT}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": PROMPT}]}),
    ("/v1/completions", {"prompt": PROMPT}),
]
"""A long prefill's request on each route that answers with JSON."""


@pytest.mark.parametrize(("path", "body"), ANSWERED)
def test_an_answer_that_is_not_streamed_starts_with_whitespace(
    gateway: LiveGateway, path: str, body: dict[str, Any]
) -> None:
    with (
        httpx.Client(base_url=gateway.url, timeout=30) as client,
        client.stream("POST", path, json={"model": MODEL, **body}) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        assert "content-length" not in response.headers
        chunks = list(response.iter_raw())
    raw = b"".join(chunks)
    padding = raw[: len(raw) - len(raw.lstrip())]
    assert padding == b" " * len(padding) and len(padding) >= PREFILL / INTERVAL / 2, raw
    # The spaces came as their own writes while the prompt was read, before the JSON.
    assert chunks[0] == b" "
    answer = httpx.Response(200, content=raw).json()
    assert TEXT.strip() in str(answer)


def test_chat_completions_parse_with_leading_whitespace(clients: dict[str, Any]) -> None:
    messages: Any = [{"role": "user", "content": PROMPT}]
    padded = clients["oai"].chat.completions.create(model=MODEL, messages=messages)
    plain = clients["oai_quiet"].chat.completions.create(model=MODEL, messages=messages)
    assert padded.choices[0].message.content == TEXT
    assert without_ids(padded.model_dump()) == without_ids(plain.model_dump())


def test_a_quick_answer_is_a_plain_json_response(gateway: LiveGateway) -> None:
    reply = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
    )
    assert reply.status_code == 200 and reply.content.startswith(b"{")
    assert reply.headers["content-length"] == str(len(reply.content))
    # A rejection before the worker accepted the request is still an HTTP error.
    rejected = httpx.post(
        f"{gateway.url}/v1/messages",
        json={"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "reject"}]},
    )
    assert rejected.status_code == 400 and rejected.json()["type"] == "error"


def test_a_failure_after_the_headers_ends_the_body_with_the_error(gateway: LiveGateway) -> None:
    """The spaces, then the API's error object: a whole body that parses (no cut
    connection, which the SDKs would take for a network fault and send again). Each
    way a worker can fail, through the SDKs: ``test_whole_answer_ends.py``."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hang"}]}
    got: list[bytes] = []
    with (
        httpx.Client(base_url=gateway.url, timeout=30) as client,
        client.stream("POST", "/v1/chat/completions", json=body) as response,
    ):
        assert response.status_code == 200
        chunks = response.iter_raw()
        got.append(next(chunks))  # a space: the answer is committed
        unload = threading.Thread(
            target=lambda: httpx.post(
                f"{gateway.url}/v1/models/{MODEL}/unload", json={"force": True}
            )
        )
        unload.start()
        got.extend(chunks)
        unload.join()
    raw = b"".join(got)
    assert raw.startswith(b" ") and raw.lstrip().startswith(b'{"error":'), raw
    error = httpx.Response(200, content=raw).json()["error"]
    assert error["code"] == "model_stopped" and "unloaded by an admin" in error["message"]


def worker_pid(gateway: LiveGateway, other_than: int | None = None) -> int:
    """The pid of the model's worker once it runs with a request in flight (and is
    not ``other_than``)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = httpx.get(f"{gateway.url}/v1/models/{MODEL}").json()
        if status.get("pid") and status["pid"] != other_than and status.get("inflight"):
            return int(status["pid"])
        time.sleep(0.05)
    raise AssertionError(f"no worker with a request in flight: {status}")


@pytest.fixture
def fresh() -> Iterator[LiveGateway]:
    """A gateway of its own, for a test that kills workers (three crashes within a
    minute would stop the module's model as a crash loop)."""
    with LiveGateway({"model_path": MODEL}, stream_keepalive=INTERVAL) as gw:
        yield gw


@pytest.mark.parametrize(("path", "body"), ANSWERED)
def test_an_answer_whose_worker_dies_after_its_headers_is_computed_again(
    fresh: LiveGateway, path: str, body: dict[str, Any]
) -> None:
    """The worker is SIGKILLed while the answer's spaces go out: the gateway runs the
    request again on the model's next worker, and the client gets the whole answer."""
    with (
        httpx.Client(base_url=fresh.url, timeout=30) as client,
        client.stream("POST", path, json={"model": MODEL, **body}) as response,
    ):
        assert response.status_code == 200
        chunks = response.iter_raw()
        got = [next(chunks)]  # a space: the answer is committed
        first = worker_pid(fresh)
        os.kill(first, signal.SIGKILL)
        second = worker_pid(fresh, other_than=first)
        got.extend(chunks)
    raw = b"".join(got)
    assert TEXT.strip() in str(httpx.Response(200, content=raw).json()), raw
    assert second != first


def test_an_answer_is_computed_again_once(fresh: LiveGateway) -> None:
    """A second death (a request that kills every worker it runs on) is not retried:
    the answer ends with the second death's error."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}]}
    with (
        httpx.Client(base_url=fresh.url, timeout=30) as client,
        client.stream("POST", "/v1/chat/completions", json=body) as response,
    ):
        chunks = response.iter_raw()
        next(chunks)
        first = worker_pid(fresh)
        os.kill(first, signal.SIGKILL)
        os.kill(worker_pid(fresh, other_than=first), signal.SIGKILL)
        raw = b"".join(chunks)
    error = httpx.Response(200, content=raw).json()["error"]
    assert error["code"] == "worker_crashed" and "SIGKILL" in error["message"], raw
