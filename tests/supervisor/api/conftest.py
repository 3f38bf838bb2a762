"""Clients for the API test modules that run a whole gateway app in process: such a
module defines an ``app`` fixture (its models) and takes ``http`` and ``sdk`` from
here. Modules with their own ``http`` or ``sdk`` fixtures override these."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import openai
import pytest
import pytest_asyncio
from starlette.applications import Starlette

from .clients import asgi_client, strict_sdk


@pytest_asyncio.fixture(loop_scope="module")
async def http(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(app, timeout=120) as client:
        yield client


@pytest.fixture
def sdk(http: httpx.AsyncClient) -> openai.AsyncOpenAI:
    return strict_sdk(http)
