"""Clients for an in-process gateway app: raw httpx over ASGI and the strict SDK."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2
import openai
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from starlette.applications import Starlette


@contextlib.asynccontextmanager
async def asgi_client(app: Starlette, timeout: float) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client talking to ``app`` in process (app errors become 500s)."""
    transport = httpx.ASGITransport(app, raise_app_exceptions=False)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://gw", timeout=timeout
    ) as client:
        yield client


def strict_sdk(http: httpx.AsyncClient) -> openai.AsyncOpenAI:
    """The openai SDK over ``http``, validating every response strictly, no retries."""
    return openai.AsyncOpenAI(
        base_url="http://gw/v1",
        api_key="unused",
        http_client=http,
        max_retries=0,
        _strict_response_validation=True,
    )


async def realtime_text_turn(url: str, model: str, text: str, api_key: str = "unused") -> Any:
    """One text turn of a Realtime session through the SDK's realtime client (no turn
    detection, text out): the ``response`` of its ``response.done``."""
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=api_key)
    async with client.realtime.connect(model=model) as conn:
        await conn.session.update(
            session={
                "type": "realtime",
                "output_modalities": ["text"],
                "audio": {"input": {"turn_detection": None}},
            }
        )
        await conn.conversation.item.create(
            item={
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": text}],
            }
        )
        await conn.response.create()
        async for event in conn:
            if event.type == "response.done":
                return event.response
    raise AssertionError("the session ended before response.done")


@contextlib.asynccontextmanager
async def mcp_client(url: str, key: str, timeout: float = 30) -> AsyncIterator[Client]:
    """The official ``mcp`` client connected to the MCP server at ``url`` (a
    gateway's ``/mcp``) with ``key`` as its Bearer token."""
    headers = {"Authorization": f"Bearer {key}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client
