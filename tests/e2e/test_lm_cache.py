"""The real ``mlx-gateway`` command and a real lm worker: the prompt cache as a
client sees it (``usage.prompt_tokens_details.cached_tokens``), many concurrent
streams at once, and the BLAS the worker computes with in /health."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from .gateway import Gateway

pytestmark = pytest.mark.slow

STORY = " ".join(
    f"Step {i}: the quick brown fox jumps over the lazy dog, and the gateway relays it."
    for i in range(12)
)


@pytest.fixture(scope="module")
def gateway(tiny_lm_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gw = Gateway(
        tmp_path_factory.mktemp("gw-cache"),
        [
            {
                "served_model_name": "tiny",
                "model_path": str(tiny_lm_path),
                "idle_timeout": 0,
                "max_concurrency": 16,
                "prompt_cache_entries": 8,
            }
        ],
    )
    yield gw
    gw.stop()


def client(gw: Gateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"{gw.base_url}/v1", api_key="unused", _strict_response_validation=True
    )


async def test_the_second_turn_reports_cached_tokens(gateway: Gateway) -> None:
    c = client(gateway)
    turn1 = [{"role": "user", "content": STORY}]
    first = await c.chat.completions.create(
        model="tiny",
        messages=turn1,
        max_tokens=12,
        temperature=0,  # type: ignore[arg-type]
    )
    assert first.usage is not None and first.usage.prompt_tokens > 200
    reply = first.choices[0].message.content or ""
    turn2 = [*turn1, {"role": "assistant", "content": reply}, {"role": "user", "content": "Go on."}]
    stream = await c.chat.completions.create(
        model="tiny",
        messages=turn2,  # type: ignore[arg-type]
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = None
    async for chunk in stream:
        usage = chunk.usage or usage
    assert usage is not None and usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens
    # The same question again, not streamed: same answer, (nearly) all of it cached.
    again = await c.chat.completions.create(
        model="tiny",
        messages=turn1,
        max_tokens=12,
        temperature=0,  # type: ignore[arg-type]
    )
    assert again.choices[0].message.content == reply
    assert again.usage is not None and again.usage.prompt_tokens_details is not None
    assert again.usage.prompt_tokens_details.cached_tokens == again.usage.prompt_tokens - 1
    await c.close()


async def test_many_streams_at_once_all_finish(gateway: Gateway) -> None:
    c = client(gateway)

    async def one(i: int) -> tuple[str, int]:
        stream = await c.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": f"Request {i}: count the steps"}],
            max_tokens=20,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
        text, tokens = "", 0
        async for chunk in stream:
            if chunk.usage is not None:
                tokens = chunk.usage.completion_tokens
            for choice in chunk.choices:
                text += choice.delta.content or ""
        return text, tokens

    results = await asyncio.gather(*(one(i) for i in range(24)))
    assert all(tokens > 0 and text for text, tokens in results)
    # Same prompt alone and in the crowd: same greedy text.
    assert (await one(5)) == results[5]
    await c.close()


def test_health_shows_the_blas_of_the_worker(gateway: Gateway) -> None:
    body = httpx.get(f"{gateway.base_url}/health", timeout=5).json()
    model = body["models"]["tiny"]
    assert model["state"] == "ready"
    expected = "openblas" if body["blas"]["openblas"] else "reference"
    assert model["blas"] == expected
