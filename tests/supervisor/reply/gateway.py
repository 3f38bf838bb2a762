"""The one place where the reply tests build the gateway's services and the app
they are reached through: each test file asks :func:`gateway` for an app (its
services one typed :class:`~mlx_gateway.supervisor.gateway.Gateway`, installed as the
lifespan installs it) and reaches the services as the code under test does, through
:func:`services` (``registry``, ``mcp``, ``config``). When the way to them changes,
this file changes alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Scope

from mlx_gateway.supervisor.config import GatewayConfig, ServerConfig
from mlx_gateway.supervisor.config.apps import KeyConfig
from mlx_gateway.supervisor.config.routes import RouteConfig
from mlx_gateway.supervisor.config.tools import McpServerConfig, ToolsConfig
from mlx_gateway.supervisor.engine.parsers.tool_calls import Function
from mlx_gateway.supervisor.engine.server_tools import ServerToolSpec
from mlx_gateway.supervisor.engine.tools import ToolSpec
from mlx_gateway.supervisor.gateway import Gateway, gateway_of, install
from mlx_gateway.supervisor.http import read_json
from mlx_gateway.supervisor.http.auth import AuthMiddleware
from mlx_gateway.supervisor.http.exceptions import exception_handlers
from mlx_gateway.supervisor.http.log_hub import LogHub
from mlx_gateway.supervisor.peers.directory import PeerDirectory
from mlx_gateway.supervisor.recorder import Recorder
from mlx_gateway.supervisor.reply.serve import Ask, serve

from .fakes import FakeMcp, SayRequest, ScriptedHandle, ScriptedRegistry, Transcript

SAY = "/v1/say"


def say_ask(req: SayRequest) -> Ask:
    """The test dialect's into half: its request as an :class:`Ask`."""
    specs = [ServerToolSpec("mcp", type="mcp", name=label) for label in req.mcp]
    specs += [
        ServerToolSpec("mcp", type="mcp", name=f"url{i}", server_url=url)
        for i, url in enumerate(req.mcp_urls)
    ]
    specs += [ServerToolSpec("web_search", type="web_search")] * req.web_search
    specs += [ServerToolSpec("web_fetch", type="web_fetch")] * req.web_fetch
    functions = [Function(name, {"type": "object", "properties": {}}) for name in req.functions]
    return Ask(
        model=req.model,
        endpoint=SAY,
        sampling=req,
        id_prefix="say-",
        messages=[{"role": "user", "content": req.text}],
        keep_alive=req.keep_alive,
        ttl=req.ttl,
        tools=ToolSpec(functions),
        server_tools=specs,
    )


async def say(request: Request) -> Response:
    req = await read_json(request, SayRequest)
    return await serve(request, say_ask(req), Transcript(req.ollama), stream=req.stream)


def gateway(
    *handles: ScriptedHandle,
    routes: Sequence[RouteConfig] = (),
    mcp: FakeMcp | None = None,
    max_rounds: int = 8,
    allow_private_urls: bool | list[str] = False,
    keys: Sequence[KeyConfig] = (),
    **server: Any,
) -> Starlette:
    """An app serving ``handles`` (and ``routes`` over them) at :data:`SAY`, with the
    MCP servers of ``mcp`` as the config's ``tools.mcp_servers``; with ``keys``,
    behind the real auth middleware (each key's app and its scopes)."""
    mcp = mcp if mcp is not None else FakeMcp()
    tools = ToolsConfig(
        max_rounds=max_rounds,
        allow_private_urls=allow_private_urls,
        mcp_servers={label: McpServerConfig(command="scripted") for label in mcp.servers},
    )
    registry = ScriptedRegistry(*handles, routes=routes)
    config = GatewayConfig(
        server=ServerConfig(keys=list(keys), **server),
        models=registry.config.models,
        tools=tools,
    )
    say_route = Route(SAY, say, methods=["POST"])
    app = Starlette(routes=[say_route], exception_handlers=exception_handlers)
    mcp.config = tools
    # the scripted registry and MCP servers stand where the real ones do: the
    # Gateway's fields are read by attribute, never checked by type
    services = Gateway(config, registry, Recorder(), PeerDirectory([]), mcp, LogHub())  # type: ignore[arg-type]
    install(app, services)
    if keys:
        app.add_middleware(AuthMiddleware, keys=keys)  # type: ignore[arg-type]
    return app


def services(app: Starlette) -> Gateway:
    """The gateway's services, reached as a route reaches them."""
    return gateway_of(app)


def registry_of(app: Starlette) -> ScriptedRegistry:
    registry = services(app).registry
    assert isinstance(registry, ScriptedRegistry)
    return registry


def mcp_of(app: Starlette) -> FakeMcp:
    mcp = services(app).mcp
    assert isinstance(mcp, FakeMcp)
    return mcp


@contextlib.asynccontextmanager
async def client(app: ASGIApp, key: str | None = None) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client talking to ``app`` in process (with ``key`` as its bearer)."""
    transport = httpx.ASGITransport(app, raise_app_exceptions=False)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx.AsyncClient(
        transport=transport, base_url="http://gw", headers=headers, timeout=30
    ) as http:
        yield http


@dataclass
class Exchange:
    """One request driven over raw ASGI, so that a test sees the moment its headers
    go out (``answering``) and chooses the moment its client leaves (``leave``)."""

    app: ASGIApp
    payload: dict[str, Any]
    answering: asyncio.Event = field(default_factory=asyncio.Event)
    leave: asyncio.Event = field(default_factory=asyncio.Event)
    status: int = 0
    chunks: list[bytes] = field(default_factory=list)

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)

    async def run(self) -> Exchange:
        sent = False

        async def receive() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                body = json.dumps(self.payload).encode()
                return {"type": "http.request", "body": body, "more_body": False}
            await self.leave.wait()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.status = message["status"]
                self.answering.set()
            elif message["type"] == "http.response.body":
                self.chunks.append(message.get("body", b""))

        scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": SAY,
            "raw_path": SAY.encode(),
            "root_path": "",
            "query_string": b"",
            "headers": [(b"content-type", b"application/json"), (b"host", b"gw")],
            "client": ("127.0.0.1", 50000),
            "server": ("gw", 80),
        }
        await self.app(scope, receive, send)
        return self
