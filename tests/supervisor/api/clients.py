"""Clients for an in-process gateway app: raw httpx over ASGI and the strict SDK."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
import openai
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
