"""The Starlette application; its lifespan owns the registry (and so every worker)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import Response

from mlx_gateway.supervisor.api import exception_handlers, routes
from mlx_gateway.supervisor.api.anthropic.diagnostics import MessageDigests
from mlx_gateway.supervisor.api.anthropic.routes import anthropic_error
from mlx_gateway.supervisor.api.ollama.replies import ollama_error
from mlx_gateway.supervisor.config import GatewayConfig
from mlx_gateway.supervisor.engine.prompt_parts import PromptHistory
from mlx_gateway.supervisor.errors import GatewayError
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
        app.state.log_hub = hub
        registry = Registry(config, command=command, worker_env=worker_env)
        server = config.server
        peers = PeerDirectory(
            server.peers, interval=server.peer_check_interval, timeout=server.peer_timeout
        )
        wyoming = None
        mcp = McpServers(config.tools)  # connects to a server on its first use
        app.state.mcp = mcp
        usage = None
        if server.usage:
            usage = UsageStore(usage_path(server.usage_path), server.usage_retention_days)
            usage.start()  # its thread opens the file
            recorder.usage = app.state.usage = usage
        try:
            await registry.start()
            await peers.start()
            app.state.registry = registry
            app.state.peers = peers
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
                recorder.usage = app.state.usage = None
                await usage.close()  # what is queued is written
            await mcp.close()  # stdio servers' processes stop
            await peers.close()
            root.removeHandler(hub)

    recorder = Recorder()
    middleware = middleware_for(config, recorder)
    if config.server.peers:
        middleware.append(Middleware(PeerMiddleware, render_error=_error_reply))
    mcp_server = McpEndpoint(body_limit(config, MCP_PATH))
    app = Starlette(
        routes=[*routes, mcp_server.route],
        exception_handlers=exception_handlers,
        middleware=middleware,
        lifespan=lifespan,
    )
    app.state.config = config
    app.state.metrics = recorder
    app.state.prompt_history = PromptHistory()
    app.state.message_digests = MessageDigests()
    app.state.http_port = config.server.port
    return app


def _error_reply(path: str, exc: GatewayError) -> Response:
    """An error in the shape of the API at ``path``."""
    if path.startswith("/v1/messages"):
        return anthropic_error(exc)
    if path.startswith("/api/"):
        return ollama_error(exc)
    return error_response(exc)
