"""The context-overflow policies through the HTTP API on the real lm worker (tiny
llamas, context capped at 256 tokens): ``error`` answers 400, ``truncate`` drops the
oldest turns and says so in a header, ``summarize`` has the model summarize the
older messages; a conversation that cannot be made to fit is still the 400."""

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
from mlx_gateway.supervisor.config import GatewayConfig, ModelConfig, ServerConfig
from mlx_gateway.supervisor.config.kinds import model_entry

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

LIMIT = 256
SUMMARIZING_LIMIT = 512
"""Room for the summary's own prompt (a transcript of the older messages)."""
MAX_TOKENS = 16
SYSTEM = {"role": "system", "content": "Be brief."}


def conversation(pairs: int = 10) -> list[dict[str, Any]]:
    """A system message and ``pairs`` user/assistant turns (about 350 tokens), then
    the question."""
    messages: list[dict[str, Any]] = [SYSTEM]
    for i in range(pairs):
        messages.append({"role": "user", "content": f"{i}: The quick brown fox jumps over."})
        messages.append({"role": "assistant", "content": "Models stream tokens to clients."})
    messages.append({"role": "user", "content": "hello world, count the steps!"})
    return messages


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def app(tiny_lm_path: Path, tiny_lm_32k_path: Path) -> AsyncIterator[Starlette]:
    def entry(name: str, policy: Any, path: Path = tiny_lm_path, limit: int = LIMIT) -> ModelConfig:
        return model_entry(
            model_path=str(path),
            served_model_name=name,
            idle_timeout=0,
            context_length=limit,
            context_overflow=policy,
            # "strict": prompt + max_tokens must fit, as the truncation measures it.
            max_tokens_overflow="error" if policy == "error" else "clamp",
        )

    config = GatewayConfig(
        server=ServerConfig(shutdown_grace=2),
        models=[
            entry("strict", "error"),
            entry("truncating", "truncate"),
            # A model whose text ends by itself: a summary of a few words.
            entry("summarizing", "summarize", tiny_lm_32k_path, SUMMARIZING_LIMIT),
        ],
    )
    app = create_app(config)
    async with app.router.lifespan_context(app):
        yield app


async def test_error_is_the_default(sdk: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await sdk.chat.completions.create(
            model="strict", messages=conversation(), max_tokens=MAX_TOKENS
        )
    assert caught.value.code == "context_length_exceeded"


async def test_truncate_drops_the_oldest_turns(sdk: openai.AsyncOpenAI) -> None:
    raw = await sdk.chat.completions.with_raw_response.create(
        model="truncating", messages=conversation(), max_tokens=MAX_TOKENS, temperature=0
    )
    header = raw.headers["x-context-overflow"]
    assert header.startswith("truncate; dropped_messages=")
    dropped = int(header.split("=")[1])
    assert dropped % 2 == 0 and 0 < dropped < 20  # whole turns, not all of them
    reply = raw.parse()
    assert reply.usage is not None
    assert reply.usage.prompt_tokens + MAX_TOKENS <= LIMIT
    # The kept conversation is exactly what was sent without the dropped turns.
    kept = [SYSTEM, *conversation()[1 + dropped :]]
    same = await sdk.chat.completions.create(
        model="strict", messages=kept, max_tokens=MAX_TOKENS, temperature=0
    )
    assert same.usage is not None and same.usage.prompt_tokens == reply.usage.prompt_tokens
    assert same.choices[0].message.content == reply.choices[0].message.content
    # One turn more would not have fitted.
    longer = [SYSTEM, *conversation()[dropped - 1 :]]
    with pytest.raises(openai.BadRequestError):
        await sdk.chat.completions.create(model="strict", messages=longer, max_tokens=MAX_TOKENS)


async def test_truncate_streams_with_the_header(http: httpx.AsyncClient) -> None:
    body = {
        "model": "truncating",
        "messages": conversation(),
        "max_tokens": MAX_TOKENS,
        "stream": True,
    }
    async with http.stream("POST", "/v1/chat/completions", json=body) as reply:
        assert reply.status_code == 200
        assert reply.headers["x-context-overflow"].startswith("truncate;")
        text = "".join([chunk async for chunk in reply.aiter_text()])
    assert text.rstrip().endswith("data: [DONE]")


async def test_a_last_turn_too_long_is_still_a_400(sdk: openai.AsyncOpenAI) -> None:
    huge = [SYSTEM, {"role": "user", "content": "The quick brown fox jumps over. " * 60}]
    for model in ("truncating", "summarizing"):
        with pytest.raises(openai.BadRequestError) as caught:
            await sdk.chat.completions.create(model=model, messages=huge, max_tokens=MAX_TOKENS)
        assert caught.value.code == "context_length_exceeded"


async def test_summarize_keeps_the_system_and_the_last_six(sdk: openai.AsyncOpenAI) -> None:
    messages = conversation(pairs=20)
    raw = await sdk.chat.completions.with_raw_response.create(
        model="summarizing", messages=messages, max_tokens=MAX_TOKENS, temperature=0
    )
    # Summarized only when too long; 41 messages besides the system one: all but the
    # last 6 were summarized.
    assert raw.headers["x-context-overflow"] == "summarize; summarized_messages=35"
    reply = raw.parse()
    assert reply.usage is not None
    assert reply.usage.prompt_tokens + MAX_TOKENS <= SUMMARIZING_LIMIT
    # The prompt is the system message (with the summary) and the last six: more
    # than those alone, less than the whole conversation.
    last_six = await sdk.chat.completions.create(
        model="summarizing", messages=[SYSTEM, *messages[-6:]], max_tokens=1
    )
    assert last_six.usage is not None
    assert last_six.usage.prompt_tokens < reply.usage.prompt_tokens


async def test_truncate_on_the_responses_and_messages_apis(
    app: Starlette, sdk: openai.AsyncOpenAI
) -> None:
    items = [m for m in conversation() if m["role"] != "system"]
    raw = await sdk.responses.with_raw_response.create(
        model="truncating",
        instructions=SYSTEM["content"],
        input=items,
        max_output_tokens=MAX_TOKENS,
    )
    assert raw.headers["x-context-overflow"].startswith("truncate; dropped_messages=")
    response = raw.parse()
    assert response.status in ("completed", "incomplete")  # answered, not a 400
    assert response.usage is not None
    assert response.usage.input_tokens + MAX_TOKENS <= LIMIT

    client = anthropic.AsyncAnthropic(
        base_url="http://gw",
        api_key="unused",
        http_client=httpx2.AsyncClient(transport=httpx2.ASGITransport(app), base_url="http://gw"),
        max_retries=0,
        _strict_response_validation=True,
    )
    message = await client.messages.with_raw_response.create(
        model="truncating", max_tokens=MAX_TOKENS, system=SYSTEM["content"], messages=items
    )
    assert message.headers["x-context-overflow"].startswith("truncate; dropped_messages=")
    parsed = await message.parse()
    assert parsed.usage.input_tokens + MAX_TOKENS <= LIMIT
    with pytest.raises(anthropic.BadRequestError) as caught:
        await client.messages.create(
            model="strict", max_tokens=MAX_TOKENS, system=SYSTEM["content"], messages=items
        )
    assert "prompt is too long" in str(caught.value)  # Anthropic's wording


async def test_truncate_with_a_clamped_budget_keeps_room_for_the_cut_answer(
    app: Starlette, sdk: openai.AsyncOpenAI
) -> None:
    """Claude Code asks for 32,000 tokens whatever the context: with ``clamp`` the
    truncation keeps a quarter of the context for the answer (the budget the worker
    cuts to), instead of needing room for all 32,000 and answering 400."""
    room = LIMIT // 4
    reply = await sdk.chat.completions.with_raw_response.create(
        model="truncating", messages=conversation(), max_completion_tokens=32000
    )
    header = reply.headers["x-context-overflow"]
    assert header.startswith("truncate; dropped_messages=")
    dropped = int(header.split("=")[1])
    usage = reply.parse().usage
    assert usage is not None and usage.prompt_tokens + room <= LIMIT
    assert usage.prompt_tokens + usage.completion_tokens <= LIMIT
    # No more was dropped than needed: one turn more leaves less than that room.
    longer = [SYSTEM, *conversation()[dropped - 1 :]]
    counted = await sdk.chat.completions.create(model="strict", messages=longer, max_tokens=1)
    assert counted.usage is not None and counted.usage.prompt_tokens + room > LIMIT

    # The same through Claude Code's route, streamed as it asks.
    client = anthropic.AsyncAnthropic(
        base_url="http://gw",
        api_key="unused",
        http_client=httpx2.AsyncClient(transport=httpx2.ASGITransport(app), base_url="http://gw"),
        max_retries=0,
        _strict_response_validation=True,
    )
    items = [m for m in conversation() if m["role"] != "system"]
    async with client.messages.stream(
        model="truncating", max_tokens=32000, system=SYSTEM["content"], messages=items
    ) as stream:
        assert stream.response.headers["x-context-overflow"] == header
        message = await stream.get_final_message()
    assert message.usage.input_tokens == usage.prompt_tokens
    assert message.usage.output_tokens > 0
