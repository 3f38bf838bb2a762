"""MCP servers over streamable HTTP: a real server made with the official SDK
(``servers.py``), started by the test on a free port, that asks for a bearer
token; the config's servers by label and a request's own by URL (``adhoc``)."""

from __future__ import annotations

import pytest

from mlx_gateway.supervisor.config import ToolsConfig
from mlx_gateway.supervisor.config.tools import McpServerConfig
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.tools import McpServer, McpServerError, McpServers

from .servers import free_port, http_server

TOOLS = {"add", "pid", "boom", "bug", "hang", "crash"}


async def test_a_config_server_sends_its_headers_on_every_request() -> None:
    async with http_server("s3cret") as (url, check):
        config = ToolsConfig(
            mcp_servers={
                "calc": McpServerConfig(url=url, headers={"Authorization": "Bearer s3cret"})
            }
        )
        servers = McpServers(config)
        try:
            tools = {tool.name: tool for tool in await servers["calc"].list_tools()}
            assert set(tools) == TOOLS
            assert tools["add"].input_schema["properties"].keys() == {"a", "b"}
            assert tools["add"].description == "Add two numbers."
            output = await servers["calc"].call_tool("add", {"a": 1, "b": 2})
            assert (output.text, output.is_error, output.raw) == ("3", False, {"result": 3})
            failed = await servers["calc"].call_tool("boom", {"why": "over http"})
            assert failed.is_error and "kaboom: over http" in failed.text
        finally:
            await servers.close()
        assert check.seen and all(seen == "Bearer s3cret" for seen in check.seen)


async def test_a_wrong_token_is_a_424_naming_the_server() -> None:
    async with http_server("s3cret") as (url, check):
        server = McpServer(
            "calc", McpServerConfig(url=url, headers={"Authorization": "Bearer nope"})
        )
        with pytest.raises(McpServerError, match=r"'calc'.*401") as caught:
            await server.list_tools()
        assert caught.value.status == 424
        output = await server.call_tool("add", {"a": 1, "b": 2})
        assert output.is_error and "401" in output.text
        await server.close()
        assert check.seen == ["Bearer nope"] * len(check.seen)


async def test_a_server_that_is_not_there() -> None:
    server = McpServer(
        "gone", McpServerConfig(url=f"http://127.0.0.1:{free_port()}/mcp"), timeout=5
    )
    with pytest.raises(McpServerError, match="'gone'"):
        await server.list_tools()
    assert (await server.call_tool("add", {})).is_error
    await server.close()


async def test_an_adhoc_server_is_checked_before_it_is_reached() -> None:
    async with http_server("tok") as (url, check):
        servers = McpServers(ToolsConfig())
        asked: list[str] = []

        async def refuse(target: str) -> None:
            asked.append(target)
            raise BadRequest(f"{target} is a private address", param="tools")

        async def allow(target: str) -> None:
            asked.append(target)

        refused = servers.adhoc(url, {"Authorization": "Bearer tok"}, url_check=refuse)
        with pytest.raises(BadRequest, match="private address"):
            await refused.list_tools()
        output = await refused.call_tool("add", {"a": 1, "b": 1})
        assert output.is_error and "private address" in output.text
        assert check.seen == []  # never reached
        await refused.close()

        async with servers.adhoc(url, {"Authorization": "Bearer tok"}, url_check=allow) as server:
            assert {tool.name for tool in await server.list_tools()} == TOOLS
            assert (await server.call_tool("add", {"a": 20, "b": 22})).text == "42"
        assert asked == [url, url, url]
        assert not server.running
        await servers.close()
