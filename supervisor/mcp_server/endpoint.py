"""``/mcp``: the gateway's models as an MCP server, over MCP's streamable HTTP
transport, made with the official SDK's low-level server.

The transport runs stateless with JSON answers: every message is one HTTP request
through the gateway's middleware, so a tool call carries its key (``Authorization:
Bearer``) and its app (:class:`...http.caller.Caller`) like any other request, and
is watched for the client leaving. ``tools/list`` answers the tools of the
caller's app (:mod:`.catalog`); ``tools/call`` runs one (:mod:`.calls`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    Tool,
)
from starlette.requests import Request
from starlette.routing import Route

from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.http.caller import caller_of
from mlx_gateway.supervisor.mcp_server.calls import call
from mlx_gateway.supervisor.mcp_server.catalog import ToolDef, offered, schema_of
from mlx_gateway.supervisor.mcp_server.table import TOOLS
from mlx_gateway.supervisor.mcp_server.transport import JsonRpcTransport
from mlx_gateway.supervisor.pool.model_handle import ModelHandle
from mlx_gateway.supervisor.pool.scope import scoped

PATH = "/mcp"
NAME = "mlx-gateway"
INSTRUCTIONS = (
    "This machine's local models as tools: pictures (generate_image, edit_image), speech "
    "(transcribe, speak), embeddings and reranking, and a local language model (ask). "
    "list_models names them; a tool's 'model' may be left out where one model serves it."
)


def _request(ctx: Any) -> Request:
    request = ctx.request
    if not isinstance(request, Request):  # only the HTTP transport mounts this server
        raise MCPError(INVALID_PARAMS, "The gateway's MCP server answers over HTTP only.")
    return request


def _scope_tools(request: Request) -> tuple[list[ToolDef], Sequence[ModelHandle]]:
    """The caller's tools and the models in its scope."""
    registry = gateway_of(request).registry
    caller = caller_of(request.scope)
    with scoped(caller.models):
        handles = registry.visible()
    return offered(TOOLS, caller, registry.config.server, handles), handles


async def list_tools(ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
    tools, handles = _scope_tools(_request(ctx))
    listed = [
        Tool(name=t.name, description=t.description, input_schema=schema_of(t, handles))
        for t in tools
    ]
    return ListToolsResult(tools=listed)


async def call_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
    request = _request(ctx)
    tools, _ = _scope_tools(request)
    found = next((t for t in tools if t.name == params.name), None)
    if found is None:
        names = ", ".join(t.name for t in tools)
        raise MCPError(
            INVALID_PARAMS,
            f"Unknown tool '{params.name}': this key's tools are {names} (tools/list; a "
            "tool exists only for the models the key's app may use).",
        )
    return await call(request, found, params.arguments)


class McpEndpoint:
    """The MCP server of one app: its route, and its session manager to run in the
    app's lifespan (:meth:`run`)."""

    def __init__(self, max_body: int) -> None:
        self.server: Server[Any] = Server(
            NAME,
            version=_version(),
            instructions=INSTRUCTIONS,
            on_list_tools=list_tools,
            on_call_tool=call_tool,
        )
        self.manager = StreamableHTTPSessionManager(
            self.server, json_response=True, stateless=True, max_request_body_size=max_body
        )
        self.route = Route(
            PATH,
            JsonRpcTransport(StreamableHTTPASGIApp(self.manager)),
            methods=["GET", "POST", "DELETE"],
        )

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """The session manager, for the app's lifespan. It runs in a task of its own:
        its task group must be left by the task that entered it, and whoever holds
        the lifespan (a test's fixture, above all) may close it from another task."""
        started, stop = asyncio.Event(), asyncio.Event()

        async def hold() -> None:
            async with self.manager.run():
                started.set()
                await stop.wait()

        task = asyncio.create_task(hold(), name="mcp session manager")
        waiting = asyncio.create_task(started.wait())
        await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():  # it failed to start: say why
            waiting.cancel()
            await asyncio.gather(waiting, return_exceptions=True)
            task.result()
        try:
            yield
        finally:
            stop.set()
            await task


def _version() -> str:
    try:
        return version("mlx-gateway")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return ""
