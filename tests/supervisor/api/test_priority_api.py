"""A request's priority reaches its worker: the OpenAI field ``service_tier: "flex"``
makes a request batch work on every OpenAI text surface (the fake worker's
``priority`` says what it was sent), with the official SDK in strict mode."""

from __future__ import annotations

from collections.abc import AsyncIterator

import openai
import pytest
from starlette.applications import Starlette

from mlx_gateway.supervisor.app import create_app

from ..fakes import fake_command, fake_config
from .clients import asgi_client, strict_sdk

MODEL = "fake/ok"


@pytest.fixture
async def sdk() -> AsyncIterator[openai.AsyncOpenAI]:
    app: Starlette = create_app(fake_config({"model_path": MODEL}), command=fake_command)
    async with app.router.lifespan_context(app), asgi_client(app, timeout=10.0) as http:
        yield strict_sdk(http)


async def test_service_tier_flex_makes_a_chat_completion_batch_work(
    sdk: openai.AsyncOpenAI,
) -> None:
    messages = [{"role": "user", "content": "priority"}]
    plain = await sdk.chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
    assert plain.choices[0].message.content.strip() == "interactive"
    flex = await sdk.chat.completions.create(model=MODEL, messages=messages, service_tier="flex")  # type: ignore[arg-type]
    assert flex.choices[0].message.content.strip() == "batch"
    default = await sdk.chat.completions.create(
        model=MODEL,
        messages=messages,  # type: ignore[arg-type]
        service_tier="priority",  # cannot raise a key's priority; anonymous is interactive
    )
    assert default.choices[0].message.content.strip() == "interactive"
    stream = await sdk.chat.completions.create(
        model=MODEL,
        messages=messages,  # type: ignore[arg-type]
        service_tier="flex",
        stream=True,
    )
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text.strip() == "batch"


async def test_service_tier_flex_on_responses_and_completions(sdk: openai.AsyncOpenAI) -> None:
    response = await sdk.responses.create(model=MODEL, input="priority", service_tier="flex")
    assert response.output_text.strip() == "batch"
    completion = await sdk.completions.create(
        model=MODEL, prompt="priority", extra_body={"service_tier": "flex"}
    )
    assert completion.choices[0].text.strip() == "batch"


async def test_an_unknown_service_tier_is_a_400_naming_it(sdk: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await sdk.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "priority"}],
            extra_body={"service_tier": "fastest"},
        )
    assert caught.value.param == "service_tier"
