"""MCP servers' tools run by the gateway's tool loop, through the official SDKs:
the real ``mcp-server-time`` over stdio from the config (the Responses API's
``mcp`` tool, its approval round trip, chat completions through an entry's
``server_tools``) and a streamable-HTTP server made with the official SDK
(Anthropic's ``mcp_servers``), with a fake worker that speaks the real protocol
writing the calls."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from starlette.applications import Starlette

from mlx_gateway.supervisor.app import create_app
from mlx_gateway.supervisor.config.tools import McpServerConfig, ToolsConfig

from ..fakes import fake_command, fake_config
from ..live import LiveGateway
from ..tools.servers import http_server
from .clients import asgi_client, realtime_text_turn, strict_sdk
from .lm_app import OK, hermes_call
from .test_anthropic_api import client_for

TIME_SERVER = str(Path(sys.executable).with_name("mcp-server-time"))
TOOLED = "lab/fake/tooled"
"""An entry whose ``server_tools`` offer the time server on every surface."""


def now_call(zone: str = "Asia/Tokyo") -> str:
    return hermes_call("time__get_current_time", json.dumps({"timezone": zone}))


def _app(**tools: Any) -> Starlette:
    parsers = {"tool_call_parser": "hermes", "reasoning_parser": "think"}
    config = fake_config(
        {"model_path": OK, **parsers},
        {"model_path": TOOLED, "server_tools": ["time"], **parsers},
    )
    time_server = McpServerConfig(command=TIME_SERVER)
    config.tools = ToolsConfig(mcp_servers={"time": time_server}, **tools)
    return create_app(config, command=fake_command)


@pytest.fixture
async def app() -> AsyncIterator[Starlette]:
    app = _app()
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
async def open_app() -> AsyncIterator[Starlette]:
    """Tools may reach this machine (the test's MCP server listens on 127.0.0.1)."""
    app = _app(allow_private_urls=True)
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
async def http(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(app, timeout=30.0) as client:
        yield client


@pytest.fixture
def sdk(http: httpx.AsyncClient) -> openai.AsyncOpenAI:
    return strict_sdk(http)


def mcp_tool(**extra: Any) -> Any:
    return {"type": "mcp", "server_label": "time", "require_approval": "never", **extra}


async def test_responses_mcp_tool_from_the_config(sdk: openai.AsyncOpenAI) -> None:
    response = await sdk.responses.create(
        model=OK,
        input=f"say {now_call()}",
        tools=[mcp_tool()],
        tool_choice={"type": "mcp", "server_label": "time", "name": "get_current_time"},
    )
    kinds = [item.type for item in response.output]
    assert kinds == ["mcp_list_tools", "mcp_call", "message"], kinds
    listed, call = response.output[0], response.output[1]
    assert {t.name for t in listed.tools} >= {"get_current_time", "convert_time"}  # type: ignore[union-attr]
    assert call.name == "get_current_time" and call.server_label == "time"  # type: ignore[union-attr]
    assert call.error is None  # type: ignore[union-attr]
    output = json.loads(call.output)  # type: ignore[union-attr, arg-type]
    assert output["timezone"] == "Asia/Tokyo" and "+09:00" in output["datetime"]
    assert "Asia/Tokyo" in response.output_text  # the next round read the answer


async def test_responses_mcp_streamed(http: httpx.AsyncClient) -> None:
    body = {"model": OK, "input": f"say {now_call('UTC')}", "tools": [mcp_tool()], "stream": True}
    async with http.stream("POST", "/v1/responses", json=body) as reply:
        text = (await reply.aread()).decode()
    kinds = [line[len("event: ") :] for line in text.splitlines() if line.startswith("event: ")]
    for kind in (
        "response.mcp_list_tools.completed",
        "response.mcp_call_arguments.done",
        "response.mcp_call.completed",
    ):
        assert kind in kinds, kinds
    assert kinds[-1] == "response.completed"


async def test_an_approval_round_trip(sdk: openai.AsyncOpenAI) -> None:
    first = await sdk.responses.create(
        model=OK, input=f"say {now_call()}", tools=[mcp_tool(require_approval="always")]
    )
    request = next(item for item in first.output if item.type == "mcp_approval_request")
    assert request.name == "get_current_time"  # type: ignore[union-attr]
    assert not [item for item in first.output if item.type == "mcp_call"]  # nothing ran
    second = await sdk.responses.create(
        model=OK,
        previous_response_id=first.id,
        input=[
            {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}
        ],
        tools=[mcp_tool(require_approval="always")],
    )
    call = next(item for item in second.output if item.type == "mcp_call")
    assert "Asia/Tokyo" in call.output  # type: ignore[union-attr, operator]


async def test_a_refused_approval_runs_nothing(sdk: openai.AsyncOpenAI) -> None:
    first = await sdk.responses.create(
        model=OK, input=f"say {now_call()}", tools=[mcp_tool(require_approval="always")]
    )
    request = next(item for item in first.output if item.type == "mcp_approval_request")
    second = await sdk.responses.create(
        model=OK,
        previous_response_id=first.id,
        input=[
            {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": False}
        ],
        tools=[mcp_tool(require_approval="always")],
    )
    call = next(item for item in second.output if item.type == "mcp_call")
    assert call.output is None and call.status == "failed"  # type: ignore[union-attr]
    assert "did not approve" in str(call.error)  # type: ignore[union-attr]


async def test_chat_completions_through_an_entrys_server_tools(sdk: openai.AsyncOpenAI) -> None:
    reply = await sdk.chat.completions.create(
        model=TOOLED, messages=[{"role": "user", "content": f"say {now_call('Europe/Paris')}"}]
    )
    # the tool ran between the rounds; the answer is the model's last round
    assert "Europe/Paris" in (reply.choices[0].message.content or "")
    assert reply.choices[0].finish_reason == "stop"


async def test_anthropic_mcp_servers_over_streamable_http(open_app: Starlette) -> None:
    call = hermes_call("tests__add", json.dumps({"a": 2, "b": 40}))
    async with http_server("s3cret") as (url, check), client_for(open_app) as client:
        message = await client.beta.messages.create(
            model=OK,
            max_tokens=200,
            messages=[{"role": "user", "content": f"say {call}"}],
            mcp_servers=[
                {"type": "url", "url": url, "name": "tests", "authorization_token": "s3cret"}
            ],
            betas=["mcp-client-2025-04-04"],
        )
    blocks = [block.model_dump() for block in message.content]
    kinds = [block["type"] for block in blocks]
    assert kinds[:2] == ["mcp_tool_use", "mcp_tool_result"], kinds
    use, result = blocks[0], blocks[1]
    assert use["name"] == "add" and use["server_name"] == "tests"
    assert use["input"] == {"a": 2, "b": 40}
    assert result["tool_use_id"] == use["id"] and result["is_error"] is False
    assert result["content"][0]["text"] == "42"
    assert set(check.seen) == {"Bearer s3cret"}


async def test_a_request_cannot_name_a_server_on_the_gateways_machine(
    http: httpx.AsyncClient,
) -> None:
    reply = await http.post(
        "/v1/responses",
        json={
            "model": OK,
            "input": "hi",
            "tools": [mcp_tool(server_label="mine", server_url="http://127.0.0.1:9/mcp")],
        },
    )
    assert reply.status_code == 400
    assert "tools.allow_private_urls" in reply.json()["error"]["message"]


async def test_a_realtime_session_runs_an_entrys_server_tools() -> None:
    """A Realtime text session on a model whose entry offers the time server: the
    response's turn runs the call between its rounds, as the HTTP surfaces do."""
    parsers = {"tool_call_parser": "hermes", "reasoning_parser": "think"}
    config = fake_config({"model_path": TOOLED, "server_tools": ["time"], **parsers})
    config.tools = ToolsConfig(mcp_servers={"time": McpServerConfig(command=TIME_SERVER)})
    with LiveGateway(config=config) as gateway:
        done = await realtime_text_turn(gateway.url, TOOLED, f"say {now_call('UTC')}")
    assert done.status == "completed", done
    texts = [part.text for item in done.output for part in item.content or [] if part.text]
    # the second round echoes the time server's answer (the call itself has no datetime)
    assert any("datetime" in text and "UTC" in text for text in texts), done


async def test_responses_mcp_streamed_through_the_sdk(sdk: openai.AsyncOpenAI) -> None:
    stream = await sdk.responses.create(
        model=OK, input=f"say {now_call('UTC')}", tools=[mcp_tool()], stream=True
    )
    kinds = []
    async for event in stream:
        kinds.append(event.type)
        if event.type == "response.completed":
            final = event.response
    assert "response.mcp_call.completed" in kinds, kinds
    call = next(item for item in final.output if item.type == "mcp_call")
    assert call.status == "completed" and "UTC" in (call.output or "")  # type: ignore[union-attr]
