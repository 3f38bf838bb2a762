"""The language-model API on the real lm worker with the tiny random llama: log-
probabilities, seeds, grammar-constrained decoding (a random-weight model can only
write schema-valid JSON), token counts — through the official SDKs in strict mode
against the real app (in process) and real worker processes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any, Literal

import anthropic
import httpx
import httpx2
import openai
import pytest
import pytest_asyncio
from pydantic import BaseModel, Field
from starlette.applications import Starlette

from mlx_gateway.supervisor.app import create_app
from mlx_gateway.supervisor.config import GatewayConfig, ModelConfig, ServerConfig

# One app and one worker for the whole module: the tests share its event loop.
pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

TINY = "tiny"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def app(tiny_lm_path: Path) -> AsyncIterator[Starlette]:
    config = GatewayConfig(
        server=ServerConfig(shutdown_grace=2),
        models=[ModelConfig(model_path=str(tiny_lm_path), served_model_name=TINY, idle_timeout=0)],
    )
    app = create_app(config)
    async with app.router.lifespan_context(app):
        yield app


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def http(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw", timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def sdk(http: httpx.AsyncClient) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url="http://gw/v1",
        api_key="unused",
        http_client=http,
        max_retries=0,
        _strict_response_validation=True,
    )


def ask(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


async def test_logprobs_join_to_the_content(sdk: openai.AsyncOpenAI) -> None:
    reply = await sdk.chat.completions.create(
        model=TINY,
        messages=ask("hello"),
        max_tokens=24,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
    )
    choice = reply.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content
    tokens = choice.logprobs.content
    assert "".join(t.token for t in tokens) == choice.message.content
    for t in tokens:
        assert t.logprob <= 0
        assert len(t.top_logprobs) == 3
        values = [top.logprob for top in t.top_logprobs]
        assert values == sorted(values, reverse=True)
        assert t.logprob == pytest.approx(values[0])  # greedy: the chosen one is the best
        assert t.bytes == list(t.token.encode())

    stream = await sdk.chat.completions.create(
        model=TINY,
        messages=ask("hello"),
        max_tokens=24,
        temperature=0,
        logprobs=True,
        stream=True,
        stop=["o w"],
    )
    text, streamed = "", []
    async for chunk in stream:
        for c in chunk.choices:
            text += c.delta.content or ""
            streamed += c.logprobs.content or [] if c.logprobs else []
    assert text and "".join(t.token for t in streamed) == text
    assert all(t.logprob <= 0 for t in streamed)


async def test_seed_reproduces_and_n_choices_differ(sdk: openai.AsyncOpenAI) -> None:
    async def sample(seed: int) -> str:
        reply = await sdk.chat.completions.create(
            model=TINY, messages=ask("count"), max_tokens=16, temperature=1.0, seed=seed
        )
        return reply.choices[0].message.content or ""

    first, again, other = await sample(11), await sample(11), await sample(12)
    assert first == again
    assert first != other

    several = await sdk.chat.completions.create(
        model=TINY, messages=ask("count"), max_tokens=16, temperature=1.0, seed=11, n=3
    )
    texts = [c.message.content for c in several.choices]
    assert len(set(texts)) == 3  # seeds 11, 12, 13
    assert several.usage is not None and several.usage.completion_tokens >= 3


class Pet(BaseModel):
    name: Annotated[str, Field(max_length=8)]
    age: Annotated[int, Field(ge=0, le=30)]
    kind: Literal["cat", "dog", "fish"]
    vaccinated: bool


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_json_schema_on_a_random_model(sdk: openai.AsyncOpenAI, seed: int) -> None:
    completion = await sdk.chat.completions.parse(
        model=TINY,
        messages=ask("describe a pet"),
        response_format=Pet,
        max_tokens=120,
        temperature=1.0,
        seed=seed,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "stop"
    pet = choice.message.parsed
    assert isinstance(pet, Pet)  # pydantic validated every constraint of the schema


async def test_json_object_mode(sdk: openai.AsyncOpenAI) -> None:
    reply = await sdk.chat.completions.create(
        model=TINY,
        messages=ask("json please"),
        response_format={"type": "json_object"},
        max_tokens=200,
        temperature=0.7,
        seed=5,
    )
    assert reply.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(reply.choices[0].message.content or ""), dict)


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 10},
                "unit": {"enum": ["C", "F"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}


async def test_forced_tool_call_on_a_random_model(sdk: openai.AsyncOpenAI) -> None:
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        reply = await sdk.chat.completions.create(
            model=TINY,
            messages=ask("weather?"),
            tools=[WEATHER],  # type: ignore[list-item]
            tool_choice=choice,  # type: ignore[arg-type]
            parallel_tool_calls=False,
            max_tokens=200,
            seed=3,
        )
        result = reply.choices[0]
        assert result.finish_reason == "tool_calls"
        (call,) = result.message.tool_calls or []
        assert call.function.name == "get_weather"
        arguments = json.loads(call.function.arguments)
        assert set(arguments) == {"city", "unit"}
        assert isinstance(arguments["city"], str) and len(arguments["city"]) <= 10
        assert arguments["unit"] in ("C", "F")


async def test_invalid_schema_is_400(http: httpx.AsyncClient) -> None:
    body = {
        "model": TINY,
        "messages": ask("x"),
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": "bad",
                "schema": {"type": "object", "properties": {"a": {"type": "nonsense"}}},
            },
        },
    }
    r = await http.post("/v1/chat/completions", json=body)
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "response_format.json_schema.schema"


async def test_max_tokens_beyond_the_context_is_400(http: httpx.AsyncClient) -> None:
    body = {"model": TINY, "messages": ask("x"), "max_tokens": 5000}
    r = await http.post("/v1/chat/completions", json=body)
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "max_tokens"


async def test_responses_parse_and_previous_response_id(sdk: openai.AsyncOpenAI) -> None:
    parsed = await sdk.responses.parse(
        model=TINY, input="a pet", text_format=Pet, max_output_tokens=120, temperature=1.0
    )
    assert isinstance(parsed.output_parsed, Pet)

    first = await sdk.responses.create(
        model=TINY, input="hello", max_output_tokens=8, temperature=0
    )
    second = await sdk.responses.create(
        model=TINY, input="again", previous_response_id=first.id, max_output_tokens=8, temperature=0
    )
    assert first.usage is not None and second.usage is not None
    # The second prompt holds the first turn (its input and output) and the new input.
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    alone = await sdk.responses.create(model=TINY, input="again", max_output_tokens=8)
    assert alone.usage is not None and alone.usage.input_tokens < second.usage.input_tokens


async def test_anthropic_count_tokens_matches_the_prompt(app: Starlette) -> None:
    client = anthropic.AsyncAnthropic(
        base_url="http://gw",
        api_key="unused",
        http_client=httpx2.AsyncClient(transport=httpx2.ASGITransport(app), base_url="http://gw"),
        max_retries=0,
        _strict_response_validation=True,
    )
    messages: Any = [{"role": "user", "content": "how many tokens is this?"}]
    count = await client.messages.count_tokens(model=TINY, system="Be brief.", messages=messages)
    message = await client.messages.create(
        model=TINY, system="Be brief.", messages=messages, max_tokens=4
    )
    assert count.input_tokens == message.usage.input_tokens > 5
