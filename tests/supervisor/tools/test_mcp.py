"""MCP servers over stdio, through the official SDK: the real ``mcp-server-time``
from a config entry, and the tests' own server (``servers.py``) for what goes wrong:
a tool that raises, one that never answers, a process that dies, an idle server."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mlx_gateway.supervisor.config import load_config
from mlx_gateway.supervisor.config.tools import McpServerConfig
from mlx_gateway.supervisor.tools import McpServer, McpServerError, McpServers

from .servers import STDIO_ARGS

TIME_SERVER = Path(sys.executable).with_name("mcp-server-time")
MODELS = "models:\n  - model_path: mlx-community/Qwen3-0.6B-4bit\n    server_tools: [time]\n"


def stdio_server(**options: float) -> McpServer:
    config = McpServerConfig(command=sys.executable, args=STDIO_ARGS)
    return McpServer("tests", config, **options)


async def test_the_time_server_from_the_config(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            tools:
              mcp_servers:
                time:
                  command: {TIME_SERVER}
                  args: ["--local-timezone=UTC"]
            """
        )
        + MODELS
    )
    servers = McpServers(load_config(path).tools)
    assert servers.labels == ["time"]
    time_server = servers["time"]
    try:
        tools = {tool.name: tool for tool in await time_server.list_tools()}
        assert set(tools) == {"get_current_time", "convert_time"}  # not zero (Rapid-MLX #985)
        schema = tools["get_current_time"].input_schema
        assert schema["type"] == "object" and "timezone" in schema["properties"]
        assert "time" in tools["get_current_time"].description.lower()

        with caplog.at_level(logging.INFO, "mlx_gateway.supervisor.tools"):
            output = await time_server.call_tool(
                "get_current_time", {"timezone": "Asia/Tokyo"}, caller="chat-app"
            )
        assert not output.is_error, output.text
        assert output.raw["timezone"] == "Asia/Tokyo"
        said = datetime.fromisoformat(output.raw["datetime"])
        assert said.utcoffset() is not None and said.utcoffset().total_seconds() == 9 * 3600
        assert abs((said - datetime.now(UTC)).total_seconds()) < 120
        assert '"timezone": "Asia/Tokyo"' in output.text  # the text content, as the model reads it
        assert "MCP call time.get_current_time (app chat-app): ok in" in caplog.text

        wrong = await time_server.call_tool("get_current_time", {"timezone": "Mars/Olympus"})
        assert wrong.is_error and "Mars/Olympus" in wrong.text
        unknown = await time_server.call_tool("get_weather", {})
        assert unknown.is_error and "get_weather" in unknown.text
        assert time_server.running
    finally:
        await servers.close()
    assert not time_server.running
    after = await time_server.call_tool("get_current_time", {"timezone": "UTC"})
    assert after.is_error and "shutting down" in after.text


async def test_an_idle_server_stops_and_starts_again_on_the_next_use() -> None:
    server = stdio_server(idle_timeout=0.5)
    try:
        first = await server.call_tool("pid", {})
        assert not first.is_error, first.text
        pid = int(first.text)
        assert server.running
        await asyncio.sleep(0.2)  # not a wait: used again within its idle timeout
        assert int((await server.call_tool("pid", {})).text) == pid  # kept while used
        deadline = time.monotonic() + 10
        while server.running and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert not server.running
        await _gone(pid)
        again = await server.call_tool("pid", {})
        assert not again.is_error and int(again.text) != pid
    finally:
        await server.close()


async def test_a_tool_that_raises_is_an_error_result() -> None:
    server = stdio_server()
    try:
        output = await server.call_tool("boom", {"why": "on purpose"})
        assert output.is_error
        assert "kaboom: on purpose" in output.text
        bug = await server.call_tool("bug", {})
        assert bug.is_error and bug.text == "Error executing tool bug"
        assert (await server.call_tool("add", {"a": 2, "b": 3})).text == "5"  # still serving
    finally:
        await server.close()


async def test_a_tool_that_does_not_answer_is_an_error_within_the_timeout() -> None:
    server = stdio_server(timeout=5)
    try:
        await server.list_tools()  # started: the call's own time is measured
        server.timeout = 1.0
        started = time.monotonic()
        output = await server.call_tool("hang", {})
        assert time.monotonic() - started < 3
        assert output.is_error and "no answer within 1s" in output.text
        assert (await server.call_tool("add", {"a": 1, "b": 1})).text == "2"
    finally:
        await server.close()


async def test_a_server_that_never_starts_fails_within_the_timeout() -> None:
    config = McpServerConfig(command=sys.executable, args=["-c", "import time; time.sleep(60)"])
    server = McpServer("mute", config, timeout=1.0)
    try:
        started = time.monotonic()
        output = await server.call_tool("anything", {})
        assert output.is_error and "no answer within 1s" in output.text
        with pytest.raises(McpServerError, match=r"'mute'.*no answer within 1s") as caught:
            await server.list_tools()
        assert caught.value.status == 424
        assert time.monotonic() - started < 6
    finally:
        await server.close()


async def test_a_server_that_dies_mid_call_is_an_error_then_starts_again() -> None:
    server = stdio_server(timeout=30)
    try:
        pid = int((await server.call_tool("pid", {})).text)
        started = time.monotonic()
        output = await server.call_tool("crash", {})
        assert output.is_error, output.text
        assert time.monotonic() - started < 10  # not the call's 30 s timeout
        again = await server.call_tool("pid", {})
        assert not again.is_error, again.text
        assert int(again.text) != pid
    finally:
        await server.close()


async def test_a_command_that_does_not_exist_says_so() -> None:
    server = McpServer("nope", McpServerConfig(command="/no/such/mcp-server"), timeout=5)
    output = await server.call_tool("x", {})
    assert output.is_error and "cannot start '/no/such/mcp-server'" in output.text
    with pytest.raises(McpServerError, match="cannot start"):
        await server.list_tools()
    await server.close()


async def test_concurrent_calls_share_one_process() -> None:
    server = stdio_server()
    try:
        outputs = await asyncio.gather(*(server.call_tool("pid", {}) for _ in range(5)))
        assert len({output.text for output in outputs}) == 1
        sums = await asyncio.gather(*(server.call_tool("add", {"a": i, "b": i}) for i in range(5)))
        assert [output.text for output in sums] == [str(2 * i) for i in range(5)]
    finally:
        await server.close()


async def _gone(pid: int) -> None:
    """Wait until process ``pid`` has exited."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the idle server's process {pid} still runs")
