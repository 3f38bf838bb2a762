"""``/mcp``, the gateway's models as an MCP server, through the official ``mcp``
client over real HTTP (Hypercorn, fake workers that speak the real protocol): the
tools follow the key's app (its models, its role), each call is a request of the
app (usage, limits, cancel), and bad calls are errors that say what is wrong."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from mcp import MCPError
from mcp_types import TextContent

from mlx_gateway.supervisor.config.apps import KeyConfig

from ..live import LiveGateway
from .clients import mcp_client

OK, OTHER = "fake/ok", "fake/other"
KEYS = {"admin": "k-admin", "guest": "k-guest", "reader": "k-reader", "once": "k-once"}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Any:
    keys = [
        KeyConfig(name="admin", key=KEYS["admin"], role="admin"),
        KeyConfig(name="guest", key=KEYS["guest"], models=[OK]),
        KeyConfig(name="reader", key=KEYS["reader"], role="read-only"),
        KeyConfig(name="once", key=KEYS["once"], models=[OK], requests_per_minute=1),
    ]
    usage = tmp_path_factory.mktemp("usage") / "usage.db"
    with LiveGateway(
        {"model_path": OK}, {"model_path": OTHER}, keys=keys, usage_path=str(usage)
    ) as gw:
        yield gw


def connect(gateway: Any, app: str) -> Any:
    return mcp_client(f"{gateway.url}/mcp", KEYS[app], timeout=30)


async def tools_of(gateway: LiveGateway, app: str) -> dict[str, dict[str, Any]]:
    async with connect(gateway, app) as client:
        listed = await client.list_tools()
    return {tool.name: tool.input_schema for tool in listed.tools}


def text(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent), block
    return block.text


async def test_the_tools_are_those_of_the_keys_app(gateway: LiveGateway) -> None:
    admin = await tools_of(gateway, "admin")
    assert sorted(admin) == ["ask", "list_models", "load_model", "unload_model"]
    assert admin["ask"]["required"] == ["model", "prompt"]  # two language models
    assert f"{OK}, {OTHER}" in admin["ask"]["properties"]["model"]["description"]
    guest = await tools_of(gateway, "guest")  # scoped to one model: its tools only
    assert sorted(guest) == ["ask", "list_models"]
    assert guest["ask"]["required"] == ["prompt"]
    assert OTHER not in json.dumps(guest)
    assert sorted(await tools_of(gateway, "reader")) == ["list_models"]


def test_mcp_needs_a_key() -> None:
    with LiveGateway({"model_path": OK}, keys=[KeyConfig(name="a", key="k")]) as gw:
        answer = httpx.post(f"{gw.url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "missing_api_key"


def test_every_http_refusal_is_a_json_rpc_error(gateway: LiveGateway) -> None:
    """No stream to open and no session to end (stateless): ``GET`` and ``DELETE``
    are 405 naming POST; a body without a JSON content type is a JSON-RPC error, not
    the SDK's plain text. The client above opened its sessions through these."""
    auth = {"Authorization": f"Bearer {KEYS['admin']}"}
    for method in ("GET", "DELETE"):
        answer = httpx.request(method, f"{gateway.url}/mcp", headers=auth, timeout=10)
        assert answer.status_code == 405 and answer.headers["allow"] == "POST"
        assert "every message is a POST" in answer.json()["error"]["message"]
    plain = httpx.post(f"{gateway.url}/mcp", content=b"ping", headers=auth, timeout=10)
    assert plain.status_code == 400
    body = plain.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None
    assert body["error"]["code"] == -32600 and "Content-Type" in body["error"]["message"]


async def test_a_call_is_a_request_of_the_app(gateway: LiveGateway) -> None:
    async with connect(gateway, "guest") as client:
        result = await client.call_tool("ask", {"prompt": "hello there"})
        listed = await client.call_tool("list_models", {})
    assert not result.is_error and text(result) == "hello there"
    assert [m["id"] for m in json.loads(text(listed))] == [OK]
    usage = httpx.get(
        f"{gateway.url}/v1/usage",
        params={"group_by": "key,model,kind"},
        headers={"Authorization": f"Bearer {KEYS['admin']}"},
    ).json()
    rows = [(r["key"], r["model"], r["kind"]) for r in usage["data"]]
    assert ("guest", OK, "chat") in rows, usage


async def test_bad_calls_are_errors_that_say_what_is_wrong(gateway: LiveGateway) -> None:
    async with connect(gateway, "admin") as client:
        missing = await client.call_tool("ask", {"model": OK})
        unknown_field = await client.call_tool("ask", {"model": OK, "prompt": "x", "temp": 1})
        no_model = await client.call_tool("ask", {"prompt": "x"})
        bad_model = await client.call_tool("ask", {"model": "nope", "prompt": "x"})
        with pytest.raises(MCPError, match="Unknown tool 'speak'"):
            await client.call_tool("speak", {"text": "hi"})
        still = await client.call_tool("ask", {"model": OK, "prompt": "fine"})
    assert missing.is_error and "`prompt`" in text(missing)
    assert unknown_field.is_error and "`temp`" in text(unknown_field)
    assert no_model.is_error and f"({OK}, {OTHER})" in text(no_model)
    assert bad_model.is_error and "nope" in text(bad_model) and OK in text(bad_model)
    assert not still.is_error  # the session goes on


async def test_only_an_admin_loads_and_unloads(gateway: LiveGateway) -> None:
    async with connect(gateway, "guest") as client:
        with pytest.raises(MCPError, match="Unknown tool 'unload_model'"):
            await client.call_tool("unload_model", {"model": OK})
    async with connect(gateway, "admin") as client:
        await client.call_tool("load_model", {"model": OTHER})
        unloaded = await client.call_tool("unload_model", {"model": OTHER})
        assert json.loads(text(unloaded))["state"] != "ready"
        loaded = await client.call_tool("load_model", {"model": OTHER})
    assert json.loads(text(loaded))["state"] == "ready"


async def test_a_refused_limit_is_an_error_naming_it(gateway: LiveGateway) -> None:
    async with connect(gateway, "once") as client:
        await client.list_tools()  # listing is no work: not counted
        first = await client.call_tool("ask", {"prompt": "one"})
        second = await client.call_tool("ask", {"prompt": "two"})
    assert not first.is_error
    assert second.is_error and "requests_per_minute" in text(second)
    assert "app_limit_exceeded" in text(second)


async def test_an_admin_cancels_a_call(gateway: LiveGateway) -> None:
    admin = {"Authorization": f"Bearer {KEYS['admin']}"}
    async with httpx.AsyncClient(base_url=gateway.url, headers=admin) as http:

        async def running() -> list[dict[str, Any]]:
            listed = (await http.get("/v1/requests")).json()["data"]
            return [r for r in listed if r["model"] == OK]

        async with connect(gateway, "guest") as client:
            call = asyncio.ensure_future(client.call_tool("ask", {"prompt": "hang"}))
            try:
                seen: list[list[dict[str, Any]]] = [[]]

                async def poll() -> None:
                    while not seen[0]:
                        seen[0] = await running()

                await asyncio.wait_for(poll(), 15)  # listed as the app's request
                found = seen[0]
                answer = await http.post(f"/v1/requests/{found[0]['id']}/cancel")
                assert answer.status_code == 200
                result = await asyncio.wait_for(call, 15)
            finally:
                call.cancel()
    assert result.is_error and "request_cancelled" in text(result)
