"""The server tools a request gets, and the scope rules that decide them
(reply/server_tools.py's ToolMaker, reply/opening.py's entry tools, a key's
``tools`` in ``server.keys``): an MCP server, a web tool or an MCP URL outside an
app's scope does not exist for it (the 400 of an unknown one, nothing started),
globs as ``models`` has them, a model's ``server_tools`` narrowed to the scope, and
the URL rules of the tools. The MCP servers are scripted; no tool reaches a
network."""

from __future__ import annotations

import logging
from typing import Any
from uuid import uuid4

import pytest

from mlx_gateway.supervisor.config.apps import KeyConfig
from mlx_gateway.supervisor.engine.ask import Ask, text_model
from mlx_gateway.supervisor.engine.parsers.tool_calls import Function
from mlx_gateway.supervisor.engine.server_tools import ServerTool, ServerToolSpec
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.http.caller import ANONYMOUS, Caller
from mlx_gateway.supervisor.reply.opening import prepare
from mlx_gateway.supervisor.reply.serve import open_turn
from mlx_gateway.supervisor.reply.server_tools import ToolMaker
from mlx_gateway.supervisor.reply.tool_loop import ToolLoop

from ..api.fakes import defaults
from .fakes import FakeMcp, FakeMcpServer, Round, SayRequest, ScriptedHandle, called, said
from .gateway import SAY, client, gateway, mcp_of, say_ask

PUBLIC_MCP = "https://8.8.8.8/mcp"  # an address literal: nothing to resolve
PRIVATE_MCP = "http://127.0.0.1:9/mcp"


def mcp_spec(label: str, url: str | None = None) -> ServerToolSpec:
    return ServerToolSpec("mcp", type="mcp", name=label, server_url=url)


WEB_SEARCH = ServerToolSpec("web_search", type="web_search_20250305", name="web_search")
WEB_FETCH = ServerToolSpec("web_fetch", type="web_fetch", name="web_fetch")


def servers(*labels: str) -> FakeMcp:
    return FakeMcp({label: FakeMcpServer() for label in labels}, {PUBLIC_MCP: FakeMcpServer()})


async def make(
    mcp: FakeMcp,
    caller: Caller,
    *specs: ServerToolSpec,
    messages: list[dict[str, Any]] | None = None,
    **config: Any,
) -> tuple[dict[str, ServerTool], ToolMaker]:
    """The tools ``caller`` gets for ``specs``, made as the serve makes them."""
    app = gateway(mcp=mcp, **config)  # the config's tools settings, as mcp.config
    maker = ToolMaker(mcp_of(app), caller)  # type: ignore[arg-type]
    return await maker.make(specs, messages or []), maker


def refusal(exc: pytest.ExceptionInfo[BadRequest]) -> str:
    assert exc.value.param == "tools"
    return exc.value.message


async def test_an_app_without_tools_may_use_every_tool() -> None:
    mcp = servers("time")
    specs = [mcp_spec("time"), mcp_spec("mine", PUBLIC_MCP), WEB_SEARCH, WEB_FETCH]
    for caller in (ANONYMOUS, Caller(name="owner")):
        tools, maker = await make(mcp, caller, *specs)
        assert sorted(tools) == ["mine__now", "time__now", "web_fetch", "web_search"]
        await maker.aclose()


async def test_a_config_server_outside_the_scope_is_an_unknown_label() -> None:
    mcp = servers("time")
    with pytest.raises(BadRequest) as scoped_out:
        await make(mcp, Caller(name="guest", tools=()), mcp_spec("time"))
    with pytest.raises(BadRequest) as unknown:
        await make(mcp, ANONYMOUS, mcp_spec("nope"))
    assert refusal(scoped_out) == (
        "No MCP server labelled 'time' in the config's tools.mcp_servers (labels: none); "
        "name one, or give its server_url."
    )
    assert refusal(unknown).replace("'nope'", "'time'").replace("time)", "none)") == (
        refusal(scoped_out)
    )  # the same words as for a label the config does not have
    assert not mcp.servers["time"].started  # never started for the guest


async def test_tools_take_globs_and_name_only_the_labels_in_scope() -> None:
    mcp = servers("home-lights", "home-locks", "git")
    caller = Caller(name="kids", tools=("home-l*",))
    tools, _ = await make(mcp, caller, mcp_spec("home-lights"), mcp_spec("home-locks"))
    assert sorted(tools) == ["home-lights__now", "home-locks__now"]
    with pytest.raises(BadRequest) as refused:
        await make(mcp, caller, mcp_spec("git"))
    assert "(labels: home-lights, home-locks)" in refusal(refused)
    assert not mcp.servers["git"].started


async def test_a_web_tool_outside_the_scope_is_one_the_gateway_does_not_run() -> None:
    mcp = servers("time")
    caller = Caller(name="searcher", tools=("web_search", "time"))
    tools, _ = await make(mcp, caller, WEB_SEARCH)
    assert list(tools) == ["web_search"]
    with pytest.raises(BadRequest) as refused:
        await make(mcp, caller, WEB_FETCH)
    assert refusal(refused) == (
        "tools: 'web_fetch' is a tool this gateway does not run (it runs: web_search, time)."
    )
    with pytest.raises(BadRequest) as none:
        await make(mcp, Caller(name="guest", tools=()), WEB_SEARCH)
    assert "'web_search_20250305' is a tool" in refusal(none)
    assert "(it runs: no server tools)" in refusal(none)


async def test_an_mcp_url_needs_mcp_url_in_the_scope() -> None:
    mcp = servers()
    with pytest.raises(BadRequest) as refused:
        await make(mcp, Caller(name="searcher", tools=("web_*",)), mcp_spec("mine", PUBLIC_MCP))
    assert refusal(refused).startswith(
        "tools: an MCP server named by its URL is a tool this gateway does not run "
        "(it runs: web_search, web_fetch)"
    )
    assert mcp.made == []  # no server made for it
    tools, maker = await make(
        mcp, Caller(name="agent", tools=("mcp_url",)), mcp_spec("mine", PUBLIC_MCP)
    )
    assert list(tools) == ["mine__now"]
    (server,) = mcp.made
    await maker.aclose()  # the request's own servers end with it
    assert server.closed


async def test_the_scope_is_checked_before_any_server_starts() -> None:
    mcp = servers("time")
    with pytest.raises(BadRequest):
        await make(mcp, Caller(name="timer", tools=("time",)), mcp_spec("time"), WEB_SEARCH)
    assert not mcp.servers["time"].started


async def test_a_tool_search_runs_nothing_and_needs_no_scope() -> None:
    deferred = [Function("weather", {"type": "object"}, "The weather somewhere.")]
    search = ServerToolSpec("tool_search", type="tool_search", deferred=deferred)
    tools, _ = await make(servers(), Caller(name="guest", tools=()), search)
    (found,) = tools.values()
    outcome = await found.run({"query": "weather"})
    assert [f.name for f in outcome.loaded] == ["weather"]


async def test_an_mcp_url_to_a_private_address_is_the_requests_error() -> None:
    mcp = FakeMcp(by_url={PRIVATE_MCP: FakeMcpServer()})
    with pytest.raises(BadRequest) as refused:
        await make(mcp, ANONYMOUS, mcp_spec("mine", PRIVATE_MCP))
    assert "127.0.0.1" in refused.value.message and "allow_private_urls" in refused.value.message
    tools, _ = await make(mcp, ANONYMOUS, mcp_spec("mine", PRIVATE_MCP), allow_private_urls=True)
    assert list(tools) == ["mine__now"]


async def test_web_fetch_fetches_only_the_conversations_urls() -> None:
    said_url = [{"role": "user", "content": "read https://example.com/a please"}]
    tools, _ = await make(servers(), ANONYMOUS, WEB_FETCH, messages=said_url)
    fetch = tools["web_fetch"]
    assert fetch.function.parameters["properties"]["url"]["enum"] == ["https://example.com/a"]
    outcome = await fetch.run({"url": "https://example.com/other"})
    assert outcome.is_error and outcome.data == "url_not_allowed"
    assert "https://example.com/a" in outcome.text


# ---------------------------------------------------------------- a model's server_tools


def tooled(*script: Round, server_tools: tuple[str, ...] = ("time", "git")) -> ScriptedHandle:
    return ScriptedHandle(
        "org/tooled", config=defaults(server_tools=list(server_tools)), script=list(script)
    )


def plain_ask(**fields: Any) -> Ask:
    return say_ask(SayRequest(model="org/tooled", text="hi", **fields))


async def test_a_models_server_tools_are_narrowed_to_the_apps_scope(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="mlx_gateway.supervisor.reply.opening")
    mcp = servers("time", "git")
    handle = tooled()
    app = gateway(handle, mcp=mcp)
    model = text_model(handle, ("lm",), SAY)
    app_name = f"timer-{uuid4().hex[:6]}"  # logged once per app and model: a fresh one
    caller = Caller(name=app_name, tools=("time",))
    for _ in range(2):
        opening = await prepare(mcp_of(app), model, plain_ask(), None, "t", caller)
        assert sorted(opening.tools) == ["time__now"]
    assert not mcp.servers["git"].started
    notes = [r.getMessage() for r in caplog.records if app_name in r.getMessage()]
    assert notes == [
        f"app {app_name} on org/tooled: server_tools git left out (not in the app's tools)"
    ]
    everyone = await prepare(mcp_of(app), model, plain_ask(), None, "t", ANONYMOUS)
    assert sorted(everyone.tools) == ["git__now", "time__now"]


async def test_a_server_the_request_names_is_not_offered_twice() -> None:
    mcp = servers("time", "git")
    handle = tooled()
    app = gateway(handle, mcp=mcp)
    model = text_model(handle, ("lm",), SAY)
    opening = await prepare(mcp_of(app), model, plain_ask(mcp=["time"]), None, "t")
    assert sorted(opening.tools) == ["git__now", "time__now"]
    assert mcp.servers["time"].listings == 1


async def test_a_turn_opened_outside_http_obeys_its_apps_scope() -> None:
    # Realtime and Wyoming start their turns with open_turn and their session's caller.
    mcp = servers("time", "git")
    handle = tooled(Round(said("hi")), Round(said("hi")), Round(said("hi")))
    app = gateway(handle, mcp=mcp)
    model = text_model(handle, ("lm",), SAY)
    guest = Caller(name=f"guest-{uuid4().hex[:6]}", tools=())
    running = await open_turn(mcp_of(app), model, plain_ask(), guest)
    try:
        assert not isinstance(running, ToolLoop)  # no server tool left for it
        assert [e async for e in running.choice(0)]
    finally:
        await running.aclose()
    assert not mcp.servers["time"].started and not mcp.servers["git"].started
    owner = await open_turn(mcp_of(app), model, plain_ask(), ANONYMOUS)
    try:
        assert isinstance(owner, ToolLoop) and sorted(owner.tools) == ["git__now", "time__now"]
    finally:
        await owner.aclose()


# ---------------------------------------------------------------- keys, through the serve

OWNER, GUEST = "sk-owner", "sk-guest"
KEYS = [KeyConfig(name="owner", key=OWNER), KeyConfig(name="guest", key=GUEST, tools=[])]


async def test_a_keys_scope_holds_through_the_serve() -> None:
    time_server = FakeMcpServer()
    mcp = FakeMcp({"time": time_server})
    handle = tooled(
        Round(said("hi")), Round(called("time__now", x="UTC")), Round(said("noon")),
        server_tools=("time",),
    )  # fmt: skip
    app = gateway(handle, mcp=mcp, keys=KEYS)
    payload = {"model": "org/tooled", "text": "time?"}
    async with client(app, GUEST) as guest:
        named = await guest.post(SAY, json={**payload, "mcp": ["time"]})
        plain = await guest.post(SAY, json=payload)
    assert named.status_code == 400
    assert "No MCP server labelled 'time'" in named.json()["error"]["message"]
    assert plain.status_code == 200  # the model's server_tools are not the guest's
    assert [row for row in plain.json() if "listed" in row] == []
    assert not time_server.started
    async with client(app, OWNER) as owner:
        answer = await owner.post(SAY, json=payload)
    rows = answer.json()
    assert {"listed": "time", "tools": ["time__now"], "error": None} in rows
    assert time_server.calls == [("now", {"x": "UTC"}, "owner")]  # the call names its app
