"""Admin endpoints and admission errors over HTTP: the real app, registry and a
fake worker process."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.applications import Starlette

from mlx_gateway.supervisor.app import create_app
from mlx_gateway.supervisor.gateway import gateway_of

from ..fakes import fake_command, fake_config

pytestmark = pytest.mark.slow

M = "lab/fake/ok"


@pytest.fixture
async def http() -> AsyncIterator[tuple[Starlette, httpx.AsyncClient]]:
    config = fake_config(
        {"model_path": M, "max_concurrency": 1, "max_queue": 0},
        {"model_path": "fake/load-error"},
    )
    app = create_app(config, command=fake_command)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            yield app, client


def chat(text: str) -> dict[str, object]:
    return {"model": M, "messages": [{"role": "user", "content": text}]}


async def test_load_then_unload(http: tuple[Starlette, httpx.AsyncClient]) -> None:
    _app, client = http
    r = await client.post(f"/v1/models/{M}/load")
    assert r.status_code == 200, r.text
    assert r.json()["id"] == M and r.json()["state"] == "ready" and r.json()["pid"]
    r = await client.post(f"/v1/models/{M}/unload")
    assert r.status_code == 200 and r.json()["state"] == "unloaded"


async def test_unload_refuses_a_busy_model_unless_forced(
    http: tuple[Starlette, httpx.AsyncClient],
) -> None:
    app, client = http
    busy = asyncio.create_task(client.post("/v1/chat/completions", json=chat("hang")))
    handle = gateway_of(app).registry.resolve(M)
    while handle.inflight == 0:
        await asyncio.sleep(0.05)
    r = await client.post(f"/v1/models/{M}/unload")
    assert r.status_code == 409 and r.json()["error"]["code"] == "model_busy"
    # One slot, no queue: a second request is refused with 429 and Retry-After.
    r = await client.post("/v1/chat/completions", json=chat("second"))
    assert r.status_code == 429 and r.headers["retry-after"] == "1"
    assert r.json()["error"]["type"] == "rate_limit_error"
    r = await client.post(f"/v1/models/{M}/unload", json={"force": True})
    assert r.status_code == 200
    answer = await busy
    assert answer.status_code == 503
    assert "unloaded by an admin request" in answer.json()["error"]["message"]


async def test_load_of_a_broken_model_and_unknown_names(
    http: tuple[Starlette, httpx.AsyncClient],
) -> None:
    _, client = http
    r = await client.post("/v1/models/fake/load-error/load")
    assert r.status_code == 503 and "download failed" in r.json()["error"]["message"]
    r = await client.post("/v1/models/nope/load")
    assert r.status_code == 404 and M in r.json()["error"]["message"]
    r = await client.post(f"/v1/models/{M}/unload", content=b"{not json")
    assert r.status_code == 400


async def test_pin_at_run_time_is_an_admin_action_and_shows() -> None:
    """``POST /v1/models/{id}/pin`` pins and unpins a model without a reload; the model
    object shows it; a client key is refused."""
    config = fake_config(
        {"model_path": "fake/ok", "served_model_name": "m"},
        api_keys=["client"],
        admin_keys=["admin"],
    )
    app = create_app(config, command=fake_command)
    admin = {"Authorization": "Bearer admin"}
    transport = httpx.ASGITransport(app, raise_app_exceptions=False)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://gw") as http,
    ):
        refused = await http.post("/v1/models/m/pin", headers={"Authorization": "Bearer client"})
        assert refused.status_code == 403
        pinned = await http.post("/v1/models/m/pin", headers=admin)
        assert pinned.status_code == 200 and pinned.json()["pinned"] is True
        listed = await http.get("/v1/models/m", headers=admin)
        assert listed.json()["pinned"] is True
        unpinned = await http.post("/v1/models/m/pin", headers=admin, json={"pinned": False})
        assert unpinned.json()["pinned"] is False
        bad = await http.post("/v1/models/m/pin", headers=admin, content=b'{"pinned": 3}')
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "pinned"
