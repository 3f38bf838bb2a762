"""Clients for the end-to-end modules that run a whole gateway app (real workers) in
process: such a module defines a module-scoped ``app`` fixture (its models) and takes
``http`` and ``sdk`` from here."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import openai
import pytest
import pytest_asyncio
from starlette.applications import Starlette

from tests.supervisor.api.clients import asgi_client, strict_sdk


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def http(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(app, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def sdk(http: httpx.AsyncClient) -> openai.AsyncOpenAI:
    return strict_sdk(http)
