"""``max_tokens_overflow`` through each API's official client on the real lm worker
(a tiny llama, context capped at 256 tokens): a prompt that fits but not with the
request's ``max_tokens`` runs with the budget cut to what the context has left and
ends with the API's length reason (``clamp``, the default); ``error`` keeps the 400;
a prompt that alone does not fit is the 400 either way."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anthropic
import httpx
import httpx2
import ollama
import openai
import pytest
import pytest_asyncio
from starlette.applications import Starlette

from mlx_gateway.supervisor.app import create_app
from mlx_gateway.supervisor.config import GatewayConfig, ModelConfig, ServerConfig
from mlx_gateway.supervisor.config.kinds import model_entry

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

LIMIT = 256
ASKED = 32000
"""Claude Code's default ``max_tokens``: far beyond the context."""
QUESTION = [{"role": "user", "content": "Count the steps, one by one."}]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def app(tiny_lm_path: Path) -> AsyncIterator[Starlette]:
    def entry(name: str, policy: str | None) -> ModelConfig:
        extra = {} if policy is None else {"max_tokens_overflow": policy}
        return model_entry(
            "lm",
            model_path=str(tiny_lm_path),
            served_model_name=name,
            idle_timeout=0,
            context_length=LIMIT,
            temperature=0.0,
            **extra,
        )

    config = GatewayConfig(
        server=ServerConfig(shutdown_grace=2),
        models=[entry("clamping", None), entry("strict", "error")],
    )
    app = create_app(config)
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture(scope="module")
def claude(app: Starlette) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        base_url="http://gw",
        api_key="unused",
        http_client=httpx2.AsyncClient(transport=httpx2.ASGITransport(app), base_url="http://gw"),
        max_retries=0,
        _strict_response_validation=True,
    )


@pytest.fixture(scope="module")
def llama(app: Starlette) -> ollama.AsyncClient:
    return ollama.AsyncClient(host="http://gw", transport=httpx.ASGITransport(app), timeout=60)


async def test_chat_completions_run_to_the_end_of_the_context(sdk: openai.AsyncOpenAI) -> None:
    for field in ("max_tokens", "max_completion_tokens"):
        reply = await sdk.chat.completions.create(
            model="clamping",
            messages=QUESTION,  # type: ignore[arg-type]
            **{field: ASKED},  # type: ignore[arg-type]
        )
        assert reply.choices[0].finish_reason == "length"
        assert reply.usage is not None
        assert reply.usage.prompt_tokens + reply.usage.completion_tokens == LIMIT


async def test_a_stream_ends_with_length_too(sdk: openai.AsyncOpenAI) -> None:
    stream = await sdk.chat.completions.create(
        model="clamping",
        messages=QUESTION,  # type: ignore[arg-type]
        max_tokens=ASKED,
        stream=True,
        stream_options={"include_usage": True},
    )
    reasons = []
    usage = None
    async for chunk in stream:
        reasons += [c.finish_reason for c in chunk.choices if c.finish_reason]
        usage = chunk.usage or usage
    assert reasons == ["length"]
    assert usage is not None and usage.prompt_tokens + usage.completion_tokens == LIMIT


async def test_completions_cut_the_budget(sdk: openai.AsyncOpenAI) -> None:
    reply = await sdk.completions.create(model="clamping", prompt="Once upon", max_tokens=ASKED)
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None
    assert reply.usage.prompt_tokens + reply.usage.completion_tokens == LIMIT


async def test_responses_end_incomplete(sdk: openai.AsyncOpenAI) -> None:
    response = await sdk.responses.create(
        model="clamping",
        input=QUESTION,
        max_output_tokens=ASKED,  # type: ignore[arg-type]
    )
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage is not None
    assert response.usage.input_tokens + response.usage.output_tokens == LIMIT


async def test_anthropic_messages_stop_at_max_tokens(claude: anthropic.AsyncAnthropic) -> None:
    # Streamed, as Claude Code sends it (the SDK refuses such a budget unstreamed).
    async with claude.messages.stream(
        model="clamping",
        max_tokens=ASKED,
        messages=QUESTION,  # type: ignore[arg-type]
    ) as stream:
        message = await stream.get_final_message()
    assert message.stop_reason == "max_tokens"
    assert message.usage.input_tokens + message.usage.output_tokens == LIMIT


async def test_ollama_num_predict_is_cut(llama: ollama.AsyncClient) -> None:
    reply = await llama.chat(model="clamping", messages=QUESTION, options={"num_predict": ASKED})
    assert reply.done_reason == "length"
    assert reply.prompt_eval_count is not None and reply.eval_count is not None
    assert reply.prompt_eval_count + reply.eval_count == LIMIT
    generated = await llama.generate(
        model="clamping", prompt="Once upon", options={"num_predict": ASKED}
    )
    assert generated.done_reason == "length"
    assert generated.prompt_eval_count is not None and generated.eval_count is not None
    assert generated.prompt_eval_count + generated.eval_count == LIMIT


async def test_error_keeps_the_400_on_every_api(
    sdk: openai.AsyncOpenAI, claude: anthropic.AsyncAnthropic, llama: ollama.AsyncClient
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await sdk.chat.completions.create(
            model="strict",
            messages=QUESTION,  # type: ignore[arg-type]
            max_tokens=ASKED,
        )
    assert caught.value.code == "context_length_exceeded"
    assert f"{ASKED} in the completion" in caught.value.message
    with pytest.raises(openai.BadRequestError):
        await sdk.responses.create(
            model="strict",
            input=QUESTION,
            max_output_tokens=ASKED,  # type: ignore[arg-type]
        )
    with pytest.raises(anthropic.BadRequestError) as refused:
        async with claude.messages.stream(
            model="strict",
            max_tokens=ASKED,
            messages=QUESTION,  # type: ignore[arg-type]
        ) as stream:
            await stream.get_final_message()
    assert "input length and `max_tokens` exceed context limit" in str(refused.value)
    with pytest.raises(ollama.ResponseError) as failed:
        await llama.chat(model="strict", messages=QUESTION, options={"num_predict": ASKED})
    assert failed.value.status_code == 400
    # What fits runs the same on both.
    reply = await sdk.chat.completions.create(
        model="strict",
        messages=QUESTION,  # type: ignore[arg-type]
        max_tokens=4,
    )
    assert reply.usage is not None and reply.usage.completion_tokens == 4


async def test_a_prompt_that_does_not_fit_is_still_a_400(sdk: openai.AsyncOpenAI) -> None:
    huge = [{"role": "user", "content": "The quick brown fox jumps over. " * 60}]
    with pytest.raises(openai.BadRequestError) as caught:
        await sdk.chat.completions.create(
            model="clamping",
            messages=huge,  # type: ignore[arg-type]
            max_tokens=ASKED,
        )
    assert caught.value.code == "context_length_exceeded"
    assert caught.value.param == "messages"
