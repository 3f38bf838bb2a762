"""Tools in each app's scope (``server.keys[].tools``), through the official SDKs,
with the real ``mcp-server-time`` over stdio and a fake worker writing the calls: a
tool outside a key's scope does not exist for it (the 400 of an unknown one, its
server never started), a model's ``server_tools`` are narrowed to the scope, and a
key without ``tools`` (or a shorthand ``api_keys`` key) may use every tool."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from starlette.applications import Starlette

from mlx_gateway.supervisor.app import create_app
from mlx_gateway.supervisor.config.apps import KeyConfig
from mlx_gateway.supervisor.config.tools import McpServerConfig, ToolsConfig
from mlx_gateway.supervisor.gateway import gateway_of

from ..fakes import fake_command, fake_config
from ..live import LiveGateway
from .clients import realtime_text_turn
from .lm_app import OK
from .test_mcp_tools import TIME_SERVER, TOOLED, mcp_tool, now_call

pytestmark = pytest.mark.slow

OWNER, GUEST, SEARCHER = "sk-owner", "sk-guest", "sk-searcher"


@pytest.fixture
async def app() -> AsyncIterator[Starlette]:
    parsers = {"tool_call_parser": "hermes", "reasoning_parser": "think"}
    config = fake_config(
        {"model_path": OK, **parsers},
        {"model_path": TOOLED, "server_tools": ["time"], **parsers},
        keys=[
            KeyConfig(name="owner", key=OWNER),  # no tools: every tool
            KeyConfig(name="guest", key=GUEST, tools=[]),
            KeyConfig(name="searcher", key=SEARCHER, tools=["web_*"]),
        ],
        api_keys=["sk-plain"],
    )
    config.tools = ToolsConfig(mcp_servers={"time": McpServerConfig(command=TIME_SERVER)})
    app = create_app(config, command=fake_command)
    async with app.router.lifespan_context(app):
        yield app


def openai_for(app: Starlette, key: str) -> openai.AsyncOpenAI:
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app), base_url="http://gw/v1")
    return openai.AsyncOpenAI(base_url="http://gw/v1", api_key=key, http_client=http, max_retries=0)


def anthropic_for(app: Starlette, key: str) -> anthropic.AsyncAnthropic:
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app), base_url="http://gw")
    return anthropic.AsyncAnthropic(
        base_url="http://gw", api_key=key, http_client=http, max_retries=0
    )


async def test_a_config_mcp_server_outside_the_scope_does_not_exist(app: Starlette) -> None:
    mcp = gateway_of(app).mcp
    for key in (GUEST, SEARCHER):
        with pytest.raises(openai.BadRequestError) as refused:
            await openai_for(app, key).responses.create(
                model=OK, input=f"say {now_call()}", tools=[mcp_tool()]
            )
        # The words of an unknown label, listing only the labels in its scope.
        message = refused.value.body["message"]  # type: ignore[index]
        assert "No MCP server labelled 'time'" in message and "(labels: none)" in message
    assert not mcp["time"].running  # never started for them
    allowed = await openai_for(app, OWNER).responses.create(
        model=OK, input=f"say {now_call()}", tools=[mcp_tool()]
    )
    assert [item.type for item in allowed.output][:2] == ["mcp_list_tools", "mcp_call"]
    plain = await openai_for(app, "sk-plain").responses.create(
        model=OK, input=f"say {now_call()}", tools=[mcp_tool()]
    )
    assert plain.output[0].type == "mcp_list_tools"  # the shorthand keys: every tool


async def test_an_mcp_url_and_web_tools_need_their_scope(app: Starlette) -> None:
    url_tool = mcp_tool(server_label="mine", server_url="https://mcp.example.com/mcp")
    with pytest.raises(openai.BadRequestError) as refused:
        await openai_for(app, SEARCHER).responses.create(model=OK, input="hi", tools=[url_tool])
    message = refused.value.body["message"]  # type: ignore[index]
    assert "an MCP server named by its URL is a tool this gateway does not run" in message
    assert "(it runs: web_search, web_fetch)" in message
    guest = anthropic_for(app, GUEST)
    with pytest.raises(anthropic.BadRequestError) as search_refused:
        await guest.messages.create(
            model=OK,
            max_tokens=20,
            messages=[{"role": "user", "content": "hi"}],
            tools=[{"type": "web_search_20250305", "name": "web_search"}],
        )
    assert "'web_search_20250305' is a tool this gateway does not run" in str(search_refused.value)
    assert "(it runs: no server tools)" in str(search_refused.value)
    with pytest.raises(anthropic.BadRequestError):
        await guest.beta.messages.create(
            model=OK,
            max_tokens=20,
            messages=[{"role": "user", "content": "hi"}],
            mcp_servers=[{"type": "url", "url": "https://mcp.example.com/mcp", "name": "x"}],
            betas=["mcp-client-2025-04-04"],
        )


async def test_an_entrys_server_tools_are_narrowed_to_the_scope(
    app: Starlette, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mlx_gateway.supervisor.reply.opening")
    messages: Any = [{"role": "user", "content": f"say {now_call('Europe/Paris')}"}]
    for _ in range(2):
        guest = await openai_for(app, GUEST).chat.completions.create(
            model=TOOLED, messages=messages
        )
        # No tool ran: the model's call came back to the client as text or a call.
        content = guest.choices[0].message
        assert "datetime" not in (content.content or ""), content
    assert not gateway_of(app).mcp["time"].running
    narrowed = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert narrowed == [
        f"app guest on {TOOLED}: server_tools time left out (not in the app's tools)"
    ]  # once per app and model
    owner = await openai_for(app, OWNER).chat.completions.create(model=TOOLED, messages=messages)
    answer = owner.choices[0].message.content or ""
    assert "Europe/Paris" in answer and "datetime" in answer, answer
    assert json.loads(answer)["timezone"] == "Europe/Paris"


async def test_a_realtime_session_obeys_its_apps_scope() -> None:
    """A Realtime text session opened with the guest's key, on a model whose entry
    offers the time server: the server is not offered, its call not run (the same
    session with a key of every tool runs it: test_mcp_tools.py)."""
    parsers = {"tool_call_parser": "hermes", "reasoning_parser": "think"}
    config = fake_config(
        {"model_path": TOOLED, "server_tools": ["time"], **parsers},
        keys=[KeyConfig(name="guest", key=GUEST, tools=["web_search"])],
    )
    config.tools = ToolsConfig(mcp_servers={"time": McpServerConfig(command=TIME_SERVER)})
    with LiveGateway(config=config) as gateway:
        done = await realtime_text_turn(gateway.url, TOOLED, f"say {now_call('UTC')}", GUEST)
    assert done.status == "completed", done
    texts = [part.text for item in done.output for part in item.content or [] if part.text]
    assert not any("datetime" in text for text in texts), done  # the server never ran
    # no tool offered, so the model's call is plain text of its answer
    assert any("time__get_current_time" in text for text in texts), done
