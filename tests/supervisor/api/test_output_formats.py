"""The newer output formats through the HTTP API (the fake worker ``say``\\ s a
model's exact text, four characters a step, so the parsers see it streamed in
pieces): gpt-oss's harmony channels, MiniMax-M2's and Kimi-K2's thinking blocks
and tool calls — with the official SDKs in strict mode, on chat completions and
Anthropic Messages."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from starlette.applications import Starlette

from mlx_gateway.supervisor.app import create_app

from ..fakes import fake_command, fake_config
from .clients import asgi_client, strict_sdk
from .lm_app import WEATHER_TOOL, say
from .test_anthropic_api import client_for

GPT_OSS = "gptoss/fake/ok"
MINIMAX = "minimax/fake/ok"
KIMI = "kimi/fake/ok"

HARMONY_CALL = (
    "<|channel|>analysis<|message|>Need the weather; call get_weather.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city":"Paris","days":2}'
)
HARMONY_ANSWER = (
    "<|channel|>analysis<|message|>Simple greeting.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Hello there!"
)
MINIMAX_CALL = (
    "<think>\nThe user wants Paris.\n</think>\n\n<minimax:tool_call>\n"
    '<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n'
    '<parameter name="days">2</parameter>\n</invoke>\n</minimax:tool_call>'
)
KIMI_CALL = (
    "<think>Look it up.</think>Checking.<|tool_calls_section_begin|><|tool_call_begin|>"
    'functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris", "days": 2}'
    "<|tool_call_end|><|tool_calls_section_end|>"
)


@pytest.fixture
async def app() -> AsyncIterator[Starlette]:
    config = fake_config(
        {"model_path": GPT_OSS, "tool_call_parser": "harmony", "reasoning_parser": "harmony"},
        {"model_path": MINIMAX, "tool_call_parser": "minimax_m2", "reasoning_parser": "minimax_m2"},
        {"model_path": KIMI, "tool_call_parser": "kimi_k2", "reasoning_parser": "kimi_k2"},
    )
    app = create_app(config, command=fake_command)
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
async def sdk(app: Starlette) -> AsyncIterator[openai.AsyncOpenAI]:
    async with asgi_client(app, timeout=10.0) as http:
        yield strict_sdk(http)


def reasoning_of(message: Any) -> str | None:
    return (message.model_extra or {}).get("reasoning_content")


@pytest.mark.parametrize(
    ("model", "text", "reasoning", "content"),
    [
        (GPT_OSS, HARMONY_CALL, "Need the weather; call get_weather.", None),
        (MINIMAX, MINIMAX_CALL, "\nThe user wants Paris.\n", None),
        (KIMI, KIMI_CALL, "Look it up.", "Checking."),
    ],
)
async def test_reasoning_and_a_call(
    sdk: openai.AsyncOpenAI, model: str, text: str, reasoning: str, content: str | None
) -> None:
    reply = await sdk.chat.completions.create(
        model=model,
        messages=say(text),
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert reasoning_of(choice.message) == reasoning
    assert (choice.message.content or None) == content
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {"city": "Paris", "days": 2}  # type: ignore[union-attr]

    # The same streamed.
    stream = await sdk.chat.completions.create(
        model=model,
        messages=say(text),
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
        stream=True,
    )
    thought, said, arguments, finish = "", "", "", None
    async for chunk in stream:
        for delta_choice in chunk.choices:
            thought += (delta_choice.delta.model_extra or {}).get("reasoning_content") or ""
            said += delta_choice.delta.content or ""
            for call_delta in delta_choice.delta.tool_calls or []:
                if call_delta.function:
                    arguments += call_delta.function.arguments or ""
            finish = delta_choice.finish_reason or finish
    assert (thought, said or None, finish) == (reasoning, content, "tool_calls")
    assert json.loads(arguments) == {"city": "Paris", "days": 2}


async def test_harmony_final_answer(sdk: openai.AsyncOpenAI) -> None:
    reply = await sdk.chat.completions.create(model=GPT_OSS, messages=say(HARMONY_ANSWER))
    message = reply.choices[0].message
    assert (message.content, reasoning_of(message)) == ("Hello there!", "Simple greeting.")
    assert reply.choices[0].finish_reason == "stop"


async def test_harmony_on_anthropic_messages(app: Starlette) -> None:
    client = client_for(app)
    message = await client.messages.create(
        model=GPT_OSS,
        max_tokens=200,
        messages=[{"role": "user", "content": f"say {HARMONY_CALL}"}],
        tools=[
            {
                "name": "get_weather",
                "input_schema": WEATHER_TOOL["function"]["parameters"],
            }
        ],
    )
    kinds = [block.type for block in message.content]
    assert kinds == ["thinking", "tool_use"]
    assert message.content[0].thinking == "Need the weather; call get_weather."  # type: ignore[union-attr]
    assert message.content[1].input == {"city": "Paris", "days": 2}  # type: ignore[union-attr]
    assert message.stop_reason == "tool_use"


async def test_harmony_on_responses(sdk: openai.AsyncOpenAI) -> None:
    response = await sdk.responses.create(
        model=GPT_OSS,
        input=f"say {HARMONY_CALL}",
        tools=[
            {
                "type": "function",
                "name": "get_weather",
                "parameters": WEATHER_TOOL["function"]["parameters"],
                "strict": False,
            }
        ],
    )
    kinds = [item.type for item in response.output]
    assert kinds == ["reasoning", "function_call"]
    call = response.output[1]
    assert call.type == "function_call" and call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris", "days": 2}
