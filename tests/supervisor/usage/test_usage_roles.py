"""Who reads whose usage: an admin every app's rows, a client key its own app's
only. The apps are set on each request as the auth middleware sets them (the
``Caller`` contract of ``http/caller.py``): the rows are recorded under the app's
name, and ``GET /v1/usage`` filters by it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from starlette.types import Receive, Scope, Send

from mlx_gateway.supervisor.app import create_app
from mlx_gateway.supervisor.http.auth import presented_key
from mlx_gateway.supervisor.http.caller import Caller, set_caller

from ..fakes import fake_command, fake_config

MODEL = "fake/ok"
APPS = {
    "chat-key": Caller("chat-app"),
    "indexer-key": Caller("indexer", priority="batch"),
    "ops-key": Caller("ops", role="admin"),
}


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Any]:
    config = fake_config(
        {"model_path": MODEL},
        api_keys=["chat-key", "indexer-key"],
        admin_keys=["ops-key"],
        usage_path=str(tmp_path / "usage.sqlite3"),
    )
    app = create_app(config, command=fake_command)

    async def as_apps(scope: Scope, receive: Receive, send: Send) -> None:
        caller = APPS.get(presented_key(scope) or "")
        if caller is not None:
            set_caller(scope, caller)
        await app(scope, receive, send)

    async with app.router.lifespan_context(app):
        yield as_apps


def client(gateway: Any, key: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(gateway)
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.AsyncClient(transport=transport, base_url="http://gw", headers=headers)


async def chat(gateway: Any, key: str, text: str) -> None:
    async with client(gateway, key) as http:
        sdk = openai.AsyncOpenAI(base_url="http://gw/v1", api_key=key, http_client=http)
        messages: Any = [{"role": "user", "content": f"say {text}"}]
        await sdk.chat.completions.create(model=MODEL, messages=messages)


async def usage(gateway: Any, as_key: str, **params: str) -> list[dict[str, Any]]:
    async with client(gateway, as_key) as http:
        reply = await http.get("/v1/usage", params={"group_by": "key", **params})
    assert reply.status_code == 200, reply.text
    rows: list[dict[str, Any]] = reply.json()["data"]
    return rows


async def test_a_client_key_reads_its_own_usage_and_an_admin_every_apps(gateway: Any) -> None:
    await chat(gateway, "chat-key", "hello")
    await chat(gateway, "indexer-key", "one")
    await chat(gateway, "indexer-key", "two")
    everyone = {r["key"]: r["requests"] for r in await usage(gateway, "ops-key")}
    assert everyone == {"chat-app": 1, "indexer": 2}
    assert [r["key"] for r in await usage(gateway, "ops-key", key="indexer")] == ["indexer"]
    own = await usage(gateway, "chat-key")
    assert [(r["key"], r["requests"]) for r in own] == [("chat-app", 1)]
    # naming another app changes nothing for a client key
    assert [r["key"] for r in await usage(gateway, "chat-key", key="indexer")] == ["chat-app"]
