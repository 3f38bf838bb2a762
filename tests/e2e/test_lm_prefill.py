"""Clients that leave during a long prefill free the worker at once (the real
``mlx-gateway`` command, a real lm worker on the tiny llama).

The worker's prefill is capped at 200 tokens per second
(``MLX_GATEWAY_TEST_PREFILL_TPS`` through ``worker_env``, as on a slow machine), so
the two 1,800-token prompts below take about 18 s to read. Both clients see the
prefill progress in the stream's keep-alive comments and hang up; a short request
sent next must be answered in a few seconds, not after the abandoned prompts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from mlx_gateway.workers.lm.prefill_pace import THROTTLE_ENV

from .gateway import Gateway

pytestmark = pytest.mark.slow

TOKENS_PER_SECOND = 200
LONG = [10 + i % 200 for i in range(1800)]
QUICK = 4.0
"""Generous bound on the short request's time (the abandoned prompts' rest would
take 12 s or more)."""


@pytest.fixture(scope="module")
def gateway(tiny_lm_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gw = Gateway(
        tmp_path_factory.mktemp("gw-prefill"),
        [
            {
                "served_model_name": "tiny",
                "model_path": str(tiny_lm_path),
                "idle_timeout": 0,
                "max_concurrency": 4,
                "worker_env": {THROTTLE_ENV: str(TOKENS_PER_SECOND)},
            }
        ],
        stream_keepalive=0.5,
    )
    yield gw
    gw.stop()


async def leave_during_prefill(client: httpx.AsyncClient, prompt: list[int]) -> str:
    """Stream a completion and hang up at the first prefill progress; returns it."""
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 4, "stream": True}
    async with client.stream("POST", "/v1/completions", json=body) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith(": prefill "):
                return line
            assert not line.startswith("data: {"), f"text came before any progress: {line}"
    raise AssertionError("the stream ended without prefill progress")


async def test_clients_leaving_mid_prefill_free_the_worker(gateway: Gateway) -> None:
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as client:
        notes = await asyncio.gather(
            leave_during_prefill(client, LONG), leave_during_prefill(client, LONG[::-1])
        )
        for note in notes:  # ": prefill 96/1800 tokens"
            done, total = note.split()[2].split("/")
            assert int(total) == len(LONG) and 0 < int(done) < len(LONG) // 2, note
        started = time.monotonic()
        reply = await client.post(
            "/v1/completions",
            json={"model": "tiny", "prompt": "hi", "max_tokens": 3, "temperature": 0},
        )
        waited = time.monotonic() - started
    assert reply.status_code == 200, reply.text
    assert reply.json()["usage"]["completion_tokens"] == 3
    assert waited < QUICK, f"the short request waited {waited:.1f} s"


async def test_a_request_sent_again_after_the_client_gave_up_resumes(gateway: Gateway) -> None:
    """A client that gives up during the prefill (Claude Code and Codex do after
    300 s) and sends the same request again: the retry starts from what the first
    one had read (the prompt cache keeps a cancelled request's KV cache), so each
    retry gets further. Here the retry is not streamed and read by the OpenAI SDK
    (its answer starts with keep-alive spaces while it prefills)."""
    messages = [{"role": "user", "content": " ".join(f"item{i}" for i in range(200))}]
    body = {"model": "tiny", "messages": messages, "max_tokens": 4, "stream": True}
    async with (
        httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as client,
        client.stream("POST", "/v1/chat/completions", json=body) as response,
    ):
        assert response.status_code == 200
        note = None
        async for line in response.aiter_lines():
            if line.startswith(": prefill "):  # ": prefill 96/1100 tokens": give up
                note = line
                break
    assert note is not None
    read, total = (int(n) for n in note.split()[2].split("/"))
    assert 0 < read < total
    async with openai.AsyncOpenAI(
        base_url=f"{gateway.base_url}/v1", api_key="unused", max_retries=0
    ) as sdk:
        retry = await sdk.chat.completions.create(
            model="tiny",
            messages=messages,
            max_tokens=4,
            temperature=0,  # type: ignore[arg-type]
        )
    assert retry.usage is not None and retry.usage.prompt_tokens == total
    details = retry.usage.prompt_tokens_details
    assert details is not None and details.cached_tokens is not None
    assert read <= details.cached_tokens < total, (note, retry.usage)
