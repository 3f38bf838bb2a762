"""Forced tool calls in each family's own format, through the HTTP API on the real
lm worker with the tiny random llama: with random weights the model writes a call
only because the grammar leaves it nothing else, so each test shows the grammar
holds (the ``enum``, the ``maxLength``) and that the gateway parses what it forced,
in one reply and streamed.

Before, a forced Gemma call was not held to an ``enum``: a typed one was any
text up to the closing quote marker (a random model rarely writes it, so it ran on
towards ``max_tokens``), and an enum without a ``type`` dropped the grammar
altogether (no call at all: this test's ``gemma4`` case failed so).
The tiny model's template renders the tools (by name), so the worker adds no
fallback tool prompt and each model's configured ``tool_call_parser`` is the one
its calls are forced into and parsed with."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import pytest_asyncio
from starlette.applications import Starlette

from mlx_gateway.supervisor.app import create_app
from mlx_gateway.supervisor.config import GatewayConfig, ServerConfig
from mlx_gateway.supervisor.config.kinds import model_entry

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

FORMATS = {
    "gemma4": "gemma4",
    "gemma3": "gemma3",
    "glm45": "glm45",
    "minimax_m2": "minimax_m2",
    "kimi_k2": "kimi_k2",
    "harmony": "harmony",
    "qwen3_coder": "qwen3_coder",
}
"""Served model name → its ``tool_call_parser`` (harmony also as reasoning parser)."""

WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 10},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "scale": {"enum": ["C", "F"]},
            },
            "required": ["city", "unit", "scale"],
            "additionalProperties": False,
        },
    },
}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def app(tiny_lm_32k_path: Path) -> AsyncIterator[Starlette]:
    models = [
        model_entry(
            model_path=str(tiny_lm_32k_path),
            served_model_name=name,
            tool_call_parser=parser,
            reasoning_parser="harmony" if parser == "harmony" else "none",
            idle_timeout=0,
        )
        for name, parser in FORMATS.items()
    ]
    app = create_app(GatewayConfig(server=ServerConfig(shutdown_grace=2), models=models))
    async with app.router.lifespan_context(app):
        yield app


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sdk(app: Starlette) -> AsyncIterator[openai.AsyncOpenAI]:
    transport = httpx.ASGITransport(app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw", timeout=120) as http:
        yield openai.AsyncOpenAI(
            base_url="http://gw/v1",
            api_key="unused",
            http_client=http,
            max_retries=0,
            _strict_response_validation=True,
        )


def check(arguments: str) -> None:
    values = json.loads(arguments)
    assert set(values) == {"city", "unit", "scale"}
    assert isinstance(values["city"], str) and len(values["city"]) <= 10
    assert values["unit"] in ("celsius", "fahrenheit")
    assert values["scale"] in ("C", "F")


@pytest.mark.parametrize("model", list(FORMATS))
async def test_a_forced_call_keeps_to_the_schema(sdk: openai.AsyncOpenAI, model: str) -> None:
    reply = await sdk.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "weather?"}],
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice="required",
        parallel_tool_calls=False,
        max_tokens=300,
        seed=7,
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls", choice.message.content
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    check(call.function.arguments)  # type: ignore[union-attr]
    assert not choice.message.content


@pytest.mark.parametrize("model", ["gemma4", "harmony", "minimax_m2"])
async def test_a_forced_call_streamed(sdk: openai.AsyncOpenAI, model: str) -> None:
    stream = await sdk.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "weather?"}],
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=300,
        seed=11,
        stream=True,
    )
    name, arguments, content, finish = "", "", "", None
    async for chunk in stream:
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for delta in choice.delta.tool_calls or []:
                name += (delta.function.name or "") if delta.function else ""
                arguments += (delta.function.arguments or "") if delta.function else ""
            finish = choice.finish_reason or finish
    assert (name, finish, content) == ("get_weather", "tool_calls", "")
    check(arguments)
