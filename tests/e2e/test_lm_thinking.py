"""Thinking control on the real lm worker with a tiny model whose chat template opens
a thinking block (Qwen3's way) and which never closes it by itself: only a thinking
budget does. Through the official SDKs (OpenAI chat and Responses, Anthropic)
against the real app (in process) and a real worker process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest
import pytest_asyncio
from starlette.applications import Starlette

from mlx_gateway.supervisor.app import create_app
from mlx_gateway.supervisor.config import GatewayConfig, ServerConfig
from mlx_gateway.supervisor.config.kinds import model_entry

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

THINKER = "thinker"
ASK = [{"role": "user", "content": "hello"}]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def app(tiny_thinking_lm_path: Path) -> AsyncIterator[Starlette]:
    config = GatewayConfig(
        server=ServerConfig(shutdown_grace=2),
        models=[
            model_entry(
                model_path=str(tiny_thinking_lm_path), served_model_name=THINKER, idle_timeout=0
            )
        ],
    )
    app = create_app(config)
    async with app.router.lifespan_context(app):
        yield app


def reasoning_of(message: Any) -> str:
    return (message.model_extra or {}).get("reasoning_content") or ""


async def chat(sdk: openai.AsyncOpenAI, **extra: Any) -> Any:
    reply = await sdk.chat.completions.create(
        model=THINKER, messages=ASK, max_tokens=24, temperature=0, extra_body=extra or None
    )
    return reply.choices[0]


async def test_without_a_budget_the_model_thinks_until_max_tokens(sdk: openai.AsyncOpenAI) -> None:
    choice = await chat(sdk)
    assert reasoning_of(choice.message)
    assert not choice.message.content
    assert choice.finish_reason == "length"


async def test_a_budget_closes_the_block_and_the_model_answers(sdk: openai.AsyncOpenAI) -> None:
    free = reasoning_of((await chat(sdk)).message)
    choice = await chat(sdk, thinking_budget=6)
    reasoning = reasoning_of(choice.message)
    # Greedy: the same thinking up to the budget, then the block is closed.
    assert reasoning and free.startswith(reasoning.rstrip()) and len(reasoning) < len(free)
    assert choice.message.content  # the answer after the forced </think>
    assert "</think>" not in choice.message.content

    stream = await sdk.chat.completions.create(
        model=THINKER,
        messages=ASK,
        max_tokens=24,
        temperature=0,
        stream=True,
        extra_body={"thinking_budget": 6},
    )
    streamed_reasoning, streamed_content = "", ""
    async for chunk in stream:
        if chunk.choices:
            delta = chunk.choices[0].delta
            streamed_reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
            streamed_content += delta.content or ""
    assert streamed_reasoning == reasoning
    assert streamed_content == choice.message.content


async def test_budget_zero_answers_at_once(sdk: openai.AsyncOpenAI) -> None:
    choice = await chat(sdk, thinking_budget=0)
    assert not reasoning_of(choice.message).strip()
    assert choice.message.content


@pytest.mark.parametrize(
    "extra", [{"enable_thinking": False}, {"reasoning_effort": "none"}], ids=["field", "effort"]
)
async def test_thinking_off(sdk: openai.AsyncOpenAI, extra: dict[str, Any]) -> None:
    choice = await chat(sdk, **extra)
    assert not reasoning_of(choice.message)
    assert choice.message.content


async def test_enable_thinking_wins_over_the_effort(sdk: openai.AsyncOpenAI) -> None:
    choice = await chat(sdk, reasoning_effort="high", enable_thinking=False)
    assert not reasoning_of(choice.message)


async def test_a_negative_budget_is_a_400(http: httpx.AsyncClient) -> None:
    body = {"model": THINKER, "messages": ASK, "thinking_budget": -1}
    reply = await http.post("/v1/chat/completions", json=body)
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "thinking_budget"


async def test_responses_budget(sdk: openai.AsyncOpenAI) -> None:
    response = await sdk.responses.create(
        model=THINKER,
        input="hello",
        max_output_tokens=24,
        temperature=0,
        extra_body={"thinking_budget": 5},
    )
    kinds = [item.type for item in response.output]
    assert kinds[0] == "reasoning" and "message" in kinds
    assert response.output_text
    reasoning = next(item for item in response.output if item.type == "reasoning")
    assert reasoning.content and reasoning.content[0].text
    off = await sdk.responses.create(
        model=THINKER,
        input="hello",
        max_output_tokens=8,
        temperature=0,
        reasoning={"effort": "minimal"},
    )
    assert [item.type for item in off.output] == ["message"]


async def test_anthropic_budget_tokens(app: Starlette) -> None:
    client = anthropic.AsyncAnthropic(
        base_url="http://gw",
        api_key="unused",
        http_client=httpx2.AsyncClient(transport=httpx2.ASGITransport(app), base_url="http://gw"),
        max_retries=0,
        _strict_response_validation=True,
    )
    message = await client.messages.create(
        model=THINKER,
        max_tokens=24,
        messages=[{"role": "user", "content": "hello"}],
        extra_body={"temperature": 0},
        thinking={"type": "enabled", "budget_tokens": 5},
    )
    kinds = [block.type for block in message.content]
    assert kinds == ["thinking", "text"]
    off = await client.messages.create(
        model=THINKER,
        max_tokens=8,
        messages=[{"role": "user", "content": "hello"}],
        extra_body={"temperature": 0},
        thinking={"type": "disabled"},
    )
    assert [block.type for block in off.content] == ["text"]
