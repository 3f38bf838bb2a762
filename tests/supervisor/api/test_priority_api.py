"""A request's priority reaches its worker: the OpenAI field ``service_tier: "flex"``
makes a request batch work on every OpenAI text surface, and a ``server.keys`` entry
with ``priority: batch`` makes its app's requests batch work, which no
``service_tier`` raises (the fake worker's ``priority`` says what it was sent), with
the official SDK."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
from starlette.applications import Starlette

from mlx_gateway.supervisor.app import create_app
from mlx_gateway.supervisor.config.apps import KeyConfig

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


@pytest.fixture
async def apps() -> AsyncIterator[Starlette]:
    keys = [
        KeyConfig(name="chat-app", key="chat-key"),
        KeyConfig(name="indexer", key="indexer-key", priority="batch"),
    ]
    config = fake_config({"model_path": MODEL}, keys=keys)
    app: Starlette = create_app(config, command=fake_command)
    async with app.router.lifespan_context(app):
        yield app


async def said(app: Starlette, key: str, **fields: Any) -> str:
    """What the fake worker says of the priority a chat request of ``key`` reached it with."""
    transport = httpx.ASGITransport(app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
        sdk = openai.AsyncOpenAI(
            base_url="http://gw/v1", api_key=key, http_client=http, max_retries=0
        )
        messages: Any = [{"role": "user", "content": "priority"}]
        reply = await sdk.chat.completions.create(model=MODEL, messages=messages, **fields)
    return (reply.choices[0].message.content or "").strip()


async def test_a_batch_keys_requests_are_batch_and_cannot_be_raised(apps: Starlette) -> None:
    assert await said(apps, "chat-key") == "interactive"
    assert await said(apps, "chat-key", service_tier="flex") == "batch"
    assert await said(apps, "indexer-key") == "batch"
    assert await said(apps, "indexer-key", service_tier="priority") == "batch"
    assert await said(apps, "indexer-key", service_tier="default") == "batch"
