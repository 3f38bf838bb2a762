"""One ``tools/call``: a request of the caller's app like any other.

Its arguments are checked first; then it is admitted against the app's limits
(:mod:`...http.app_limits`: a refused limit is the call's error, naming it), runs
within the app's model scope and priority, is recorded under the route ``mcp
<tool>`` (``/metrics``, ``/v1/usage``), is listed in ``/v1/requests`` and can be
cancelled there (or by the client leaving). A gateway error is the tool's error
result (``isError``, its message and code), which an agent reads and can act on;
the gateway's own bugs stay in its log.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from mcp_types import CallToolResult, TextContent
from starlette.requests import ClientDisconnect, Request

from mlx_gateway.supervisor import recorder
from mlx_gateway.supervisor.errors import GatewayError
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.http.app_limits import limits_of
from mlx_gateway.supervisor.http.caller import caller_of
from mlx_gateway.supervisor.http.disconnect import unless_disconnected
from mlx_gateway.supervisor.mcp_server.args import decode
from mlx_gateway.supervisor.mcp_server.catalog import ToolDef, model_for
from mlx_gateway.supervisor.pool.scope import scoped

logger = logging.getLogger(__name__)

ROUTE = "mcp {}"
"""The route a tool call is counted under (``mcp generate_image``)."""


async def call(request: Request, tool: ToolDef, arguments: dict[str, Any] | None) -> CallToolResult:
    """Run ``tool`` for the app of ``request``'s key (see the module docstring)."""
    record = recorder.current()
    if record is not None:
        record.route = ROUTE.format(tool.name)
    limits = limits_of(request.scope)
    caller = caller_of(request.scope)
    try:
        with scoped(caller.models):
            args = decode(arguments, tool.args)
            registry = gateway_of(request).registry
            name = getattr(args, "model", None)
            model = (
                model_for(tool, name, registry.visible(), registry) if tool.serves or name else ""
            )
            if limits is not None:
                limits.admit()
            try:
                work = asyncio.ensure_future(tool.run(request, args, model))
                if record is not None:
                    record.task = work  # an admin's cancel ends the tool's work
                content = await unless_disconnected(request, work)
            finally:
                if limits is not None:
                    limits.release(recorder.tokens_used())
    except GatewayError as exc:
        recorder.note_outcome("error")
        return failed(exc.message, exc.code or exc.type)
    except ClientDisconnect:
        recorder.note_outcome("client_left")
        return failed(
            "The call was cancelled (an admin's cancel, or the client left).", "request_cancelled"
        )
    return CallToolResult(content=content)


def failed(message: str, code: str) -> CallToolResult:
    """A tool error an agent reads: the gateway's message, and its code."""
    logger.info("an MCP tool call failed (%s): %s", code, message)
    return CallToolResult(content=[TextContent(text=f"{message} ({code})")], is_error=True)
