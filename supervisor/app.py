"""The Starlette application; its lifespan owns the registry (and so every worker)
and builds the :class:`~.gateway.Gateway`, the app's services."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import Response
from starlette.types import Scope

from mlx_gateway.supervisor.api import exception_handlers, routes
from mlx_gateway.supervisor.api.anthropic.routes import anthropic_error
from mlx_gateway.supervisor.api.ollama.replies import ollama_error
from mlx_gateway.supervisor.config import GatewayConfig
from mlx_gateway.supervisor.errors import GatewayError
from mlx_gateway.supervisor.gateway import Gateway, gateway_of, install
from mlx_gateway.supervisor.http.log_hub import LogHub
from mlx_gateway.supervisor.http.middleware import body_limit, middleware_for
from mlx_gateway.supervisor.http.replies import error_response
from mlx_gateway.supervisor.mcp_server import PATH as MCP_PATH
from mlx_gateway.supervisor.mcp_server import McpEndpoint
from mlx_gateway.supervisor.peers.directory import PeerDirectory
from mlx_gateway.supervisor.peers.middleware import PeerMiddleware
from mlx_gateway.supervisor.pool.registry import Registry
from mlx_gateway.supervisor.pool.spawn import WorkerCommand
from mlx_gateway.supervisor.recorder import Recorder
from mlx_gateway.supervisor.tools import McpServers
from mlx_gateway.supervisor.usage.store import UsageStore, usage_path


def create_app(
    config: GatewayConfig,
    *,
    command: WorkerCommand | None = None,
    worker_env: dict[str, str] | None = None,
) -> Starlette:
    """Build the gateway app. ``command`` replaces how workers are started (tests
    start a fake worker that speaks the same protocol)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        hub = LogHub()
        root = logging.getLogger()
        root.addHandler(hub)
        registry = Registry(config, command=command, worker_env=worker_env)
        server = config.server
        peers = PeerDirectory(
            server.peers, interval=server.peer_check_interval, timeout=server.peer_timeout
        )
        wyoming = None
        mcp = McpServers(config.tools)  # connects to a server on its first use
        usage = None
        if server.usage:
            usage = UsageStore(usage_path(server.usage_path), server.usage_retention_days)
            usage.start()  # its thread opens the file
            recorder.usage = usage
        try:
            await registry.start()
            await peers.start()
            install(app, Gateway(config, registry, recorder, peers, mcp, hub))
            if server.wyoming is not None:
                # imported only when configured: the wyoming package is not small
                from mlx_gateway.supervisor.api.wyoming.server import WyomingServer

                wyoming = WyomingServer(server.wyoming, registry, recorder)
                await wyoming.start()
            try:
                async with mcp_server.run():  # /mcp: the models as an MCP server
                    yield
            finally:
                if wyoming is not None:
                    await wyoming.stop()
                await registry.close()
        finally:
            if usage is not None:
                recorder.usage = None
                await usage.close()  # what is queued is written
            await mcp.close()  # stdio servers' processes stop
            await peers.close()
            root.removeHandler(hub)

    recorder = Recorder()
    middleware = middleware_for(config, recorder)
    if config.server.peers:
        middleware.append(Middleware(PeerMiddleware, render_error=_error_reply, here=_here))
    mcp_server = McpEndpoint(body_limit(config, MCP_PATH))
    return Starlette(
        routes=[*routes, mcp_server.route],
        exception_handlers=exception_handlers,
        middleware=middleware,
        lifespan=lifespan,
    )


def _here(scope: Scope) -> Gateway:
    """This gateway, as the peer middleware sees it."""
    return gateway_of(scope["app"])


def _error_reply(path: str, exc: GatewayError) -> Response:
    """An error in the shape of the API at ``path``."""
    if path.startswith("/v1/messages"):
        return anthropic_error(exc)
    if path.startswith("/api/"):
        return ollama_error(exc)
    return error_response(exc)
