"""Keep-alives while a long prompt is prefilled, on every streaming API.

The real gateway over real TCP (Hypercorn) with the fake worker, whose
``prefill <seconds>`` requests stay silent that long after ``Started`` (one
``Prefilled`` progress halfway), as a real worker reading a long prompt on a slow
machine. Each stream must get a byte at least every 5 s from the request on (the
default ``stream_keepalive`` is 2 s): SSE comments on the OpenAI APIs, carrying
the prefill progress once the worker sent it, and ``event: ping`` on Anthropic
Messages. The official SDKs read such streams as usual.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from ..live import LiveGateway

pytestmark = pytest.mark.slow

MODEL = "fake/ok"
PREFILL_SECONDS = 10
MAX_GAP = 5.0
"""The longest silence a stream may have (the default interval is 2 s)."""

CHAT = {"model": MODEL, "stream": True}
REQUESTS = {
    "chat": (
        "/v1/chat/completions",
        {**CHAT, "messages": [{"role": "user", "content": f"prefill {PREFILL_SECONDS} a b c"}]},
    ),
    "completions": (
        "/v1/completions",
        {**CHAT, "prompt": f"prefill {PREFILL_SECONDS} a b c"},
    ),
    "responses": ("/v1/responses", {**CHAT, "input": f"prefill {PREFILL_SECONDS} a b c"}),
    "messages": (
        "/v1/messages",
        {
            **CHAT,
            "max_tokens": 64,
            "messages": [{"role": "user", "content": f"prefill {PREFILL_SECONDS} a b c"}],
        },
    ),
}


@pytest.fixture(scope="module")
def gateway() -> Iterator[LiveGateway]:
    with LiveGateway({"model_path": MODEL}) as gw:
        yield gw


async def timed_lines(url: str, path: str, body: dict[str, object]) -> list[tuple[float, str]]:
    """Every line of the stream with the seconds since the request was sent."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        sent = time.monotonic()
        async with client.stream("POST", path, json=body) as response:
            assert response.status_code == 200, await response.aread()
            return [(time.monotonic() - sent, line) async for line in response.aiter_lines()]


def gaps(lines: list[tuple[float, str]]) -> list[float]:
    times = [0.0] + [at for at, _ in lines]
    return [b - a for a, b in itertools.pairwise(times)]


def test_every_streaming_api_keeps_the_connection_alive_while_prefilling(
    gateway: LiveGateway,
) -> None:
    async def all_apis() -> dict[str, list[tuple[float, str]]]:
        streams = [timed_lines(gateway.url, path, body) for path, body in REQUESTS.values()]
        return dict(zip(REQUESTS, await asyncio.gather(*streams), strict=True))

    got = asyncio.run(all_apis())
    for api, lines in got.items():
        text = [line for _, line in lines if line]
        assert lines[-1][0] >= PREFILL_SECONDS, api  # the prefill really was that long
        assert max(gaps(lines)) <= MAX_GAP, (api, gaps(lines))
        if api == "messages":
            pings = [i for i, line in enumerate(text) if line == "event: ping"]
            assert len(pings) >= PREFILL_SECONDS // MAX_GAP + 1, text
            assert all(text[i + 1] == 'data: {"type": "ping"}' for i in pings)
            assert text.index("event: message_start") < pings[0]  # as Anthropic sends them
            assert "event: message_stop" in text
        else:
            comments = [line for line in text if line.startswith(":")]
            assert len(comments) >= PREFILL_SECONDS // MAX_GAP + 1, text
            assert text[-1] == "data: [DONE]" or '"response.completed"' in "".join(text)
        notes = [line for line in text if line.startswith(": prefill ")]
        # The worker's progress shows in the later ones (the fake worker counts the
        # 5 words of "prefill 10 a b c" as tokens and reports half of them read).
        assert ": prefill 2/5 tokens" in notes, text


def test_the_sdks_read_streams_with_keepalives(gateway: LiveGateway) -> None:
    prompt = "prefill 3 hello there"
    oai = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    chat = oai.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": prompt}], stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in chat if c.choices)
    assert text == "prefill 3 hello there "
    with oai.responses.stream(model=MODEL, input=prompt) as stream:
        assert stream.get_final_response().output_text == "prefill 3 hello there "
    claude = anthropic.Anthropic(base_url=gateway.url, api_key="unused", max_retries=0)
    with claude.messages.stream(
        model=MODEL, max_tokens=64, messages=[{"role": "user", "content": prompt}]
    ) as stream:
        message = stream.get_final_message()
    assert message.content[0].type == "text"
    assert message.content[0].text == "prefill 3 hello there "
