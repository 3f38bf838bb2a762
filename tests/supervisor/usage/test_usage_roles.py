"""Who reads whose usage: an admin every app's rows, a client key its own app's
only. The apps are ``server.keys`` entries, told apart by the real auth middleware:
the rows are recorded under the app's name, and ``GET /v1/usage`` filters by it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from mlx_gateway.supervisor.app import create_app
from mlx_gateway.supervisor.config.apps import KeyConfig

from ..fakes import fake_command, fake_config

MODEL = "fake/ok"
APPS = [
    KeyConfig(name="chat-app", key="chat-key"),
    KeyConfig(name="indexer", key="indexer-key", priority="batch"),
    KeyConfig(name="ops", key="ops-key", role="admin"),
]


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Any]:
    config = fake_config(
        {"model_path": MODEL},
        keys=APPS,
        usage_path=str(tmp_path / "usage.sqlite3"),
    )
    app = create_app(config, command=fake_command)
    async with app.router.lifespan_context(app):
        yield app


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
