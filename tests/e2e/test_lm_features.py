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
from mlx_gateway.supervisor.config import GatewayConfig, ServerConfig
from mlx_gateway.supervisor.config.kinds import model_entry

# One app and one worker for the whole module: the tests share its event loop.
pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

TINY = "tiny"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def app(tiny_lm_path: Path) -> AsyncIterator[Starlette]:
    config = GatewayConfig(
        server=ServerConfig(shutdown_grace=2),
        models=[model_entry(model_path=str(tiny_lm_path), served_model_name=TINY, idle_timeout=0)],
    )
    app = create_app(config)
    async with app.router.lifespan_context(app):
        yield app


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


async def test_tools_reach_a_template_that_ignores_them(
    sdk: openai.AsyncOpenAI, http: httpx.AsyncClient
) -> None:
    # The tiny llama's template renders no tools: its worker writes them into the
    # system prompt (the forced calls above were parsed as tool_calls through it).
    bare = await sdk.chat.completions.create(model=TINY, messages=ask("weather?"), max_tokens=1)
    tooled = await sdk.chat.completions.create(
        model=TINY,
        messages=ask("weather?"),
        tools=[WEATHER],  # type: ignore[list-item]
        max_tokens=1,
    )
    assert bare.usage is not None and tooled.usage is not None
    assert tooled.usage.prompt_tokens > bare.usage.prompt_tokens + 100
    entry = (await http.get(f"/v1/models/{TINY}")).json()
    assert entry["tool_prompt"] == "fallback"


CUT = 40
"""Too few tokens for a whole forced call (about 90 here): the limit cuts its JSON."""


def no_call_text(text: str | None) -> None:
    """Nothing of a half call reached the client as words."""
    assert not text or ("<" not in text and "get_weather" not in text), text


@pytest.mark.parametrize(("stream", "cut"), [(False, CUT), (False, 8), (True, CUT)])
async def test_a_call_cut_by_max_tokens_is_length_on_chat(
    sdk: openai.AsyncOpenAI, stream: bool, cut: int
) -> None:
    body: Any = {
        "model": TINY,
        "messages": ask("weather?"),
        "tools": [WEATHER],
        "tool_choice": "required",
        "max_tokens": cut,  # 8: inside "<tool_call>" itself
        "seed": 3,
    }
    if not stream:
        reply = await sdk.chat.completions.create(**body)
        (choice,) = reply.choices
        assert choice.finish_reason == "length"
        assert not choice.message.tool_calls
        no_call_text(choice.message.content)
        assert reply.usage is not None and reply.usage.completion_tokens == cut
        return
    chunks = [c async for c in await sdk.chat.completions.create(**body, stream=True)]
    deltas = [c.choices[0] for c in chunks if c.choices]
    assert [d.finish_reason for d in deltas if d.finish_reason] == ["length"]
    assert not any(d.delta.tool_calls for d in deltas)
    no_call_text("".join(d.delta.content or "" for d in deltas))


async def test_complete_calls_stay_when_the_limit_cuts_the_next(sdk: openai.AsyncOpenAI) -> None:
    # Forced parallel calls: the grammar lets the model go on with more calls; with
    # this seed the random model does (about 90 tokens a call) until the limit.
    reply = await sdk.chat.completions.create(
        model=TINY,
        messages=ask("weather?"),
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice="required",
        max_tokens=150,
        seed=1,
    )
    (choice,) = reply.choices
    assert choice.finish_reason == "length"
    (call,) = choice.message.tool_calls or []
    assert set(json.loads(call.function.arguments)) == {"city", "unit"}
    no_call_text(choice.message.content)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_call_cut_by_max_output_tokens_is_incomplete_on_responses(
    sdk: openai.AsyncOpenAI, stream: bool
) -> None:
    body: Any = {
        "model": TINY,
        "input": "weather?",
        "tools": [{"type": "function", **WEATHER["function"]}],
        "tool_choice": "required",
        "max_output_tokens": CUT,
    }
    if stream:
        events = [e async for e in await sdk.responses.create(**body, stream=True)]
        assert events[-1].type == "response.incomplete"
        assert not any(e.type.startswith("response.function_call") for e in events)
        response = events[-1].response
    else:
        response = await sdk.responses.create(**body)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert not [item for item in response.output if item.type == "function_call"]
    no_call_text(response.output_text)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_call_cut_by_max_tokens_is_max_tokens_on_anthropic(
    app: Starlette, stream: bool
) -> None:
    client = anthropic.AsyncAnthropic(
        base_url="http://gw",
        api_key="unused",
        http_client=httpx2.AsyncClient(transport=httpx2.ASGITransport(app), base_url="http://gw"),
        max_retries=0,
        _strict_response_validation=True,
    )
    function = WEATHER["function"]
    body: Any = {
        "model": TINY,
        "messages": [{"role": "user", "content": "weather?"}],
        "tools": [{"name": function["name"], "input_schema": function["parameters"]}],
        "tool_choice": {"type": "any"},
        "max_tokens": CUT,
    }
    if stream:
        async with client.messages.stream(**body) as events:
            kinds = [e.type async for e in events]
            message = await events.get_final_message()
        assert "message_stop" in kinds
    else:
        message = await client.messages.create(**body)
    assert message.stop_reason == "max_tokens"
    assert not [b for b in message.content if b.type == "tool_use"]
    no_call_text("".join(b.text for b in message.content if b.type == "text"))
    assert message.usage.output_tokens == CUT


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
