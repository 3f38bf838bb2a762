"""MCP servers the gateway calls tools of: the config's, by label (:class:`McpServers`),
and one a request names by URL (:meth:`McpServers.adhoc`).

A server is connected on first use and kept while used; after
``tools.mcp_idle_timeout`` seconds without calls its connection ends (a stdio
server's process stops) and the next use connects again. Every use has a deadline
(the entry's ``timeout``, else ``tools.mcp_timeout``) that covers starting the server
too. A tool call never raises for what the server did: its error, a server that
cannot start, crashes or does not answer, all become a :class:`ToolOutput` with
``is_error`` and the reason, which goes back to the model.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from mlx_gateway.supervisor.config.tools import McpServerConfig, ToolsConfig
from mlx_gateway.supervisor.errors import GatewayError
from mlx_gateway.supervisor.tools.results import McpTool, ToolOutput

if TYPE_CHECKING:
    import mcp_types

    from mlx_gateway.supervisor.tools.connection import Connection

log = logging.getLogger("mlx_gateway.supervisor.tools")

UrlCheck = Callable[[str], Awaitable[None]]
"""Raises when a request may not make the gateway reach this URL (URL safety)."""

MAX_TOOL_PAGES = 20
"""Pages of ``tools/list`` read at most (a server that pages forever cannot hang us)."""


class McpServerError(GatewayError):
    """An MCP server whose tools cannot be listed (it cannot start, cannot be
    reached, does not answer); OpenAI answers such a request with a 424."""

    status = 424
    type = "external_connector_error"

    def __init__(self, label: str, problem: str) -> None:
        super().__init__(
            f"Error retrieving tool list from MCP server {label!r}: {problem}",
            param="tools",
            code="mcp_list_tools_failed",
        )
        self.label = label
        self.problem = problem


class McpServer:
    """One MCP server: its tools listed, its tools called, its connection kept
    while it is used."""

    def __init__(
        self,
        label: str,
        config: McpServerConfig,
        *,
        timeout: float = 60.0,
        idle_timeout: float = 300.0,
        url_check: UrlCheck | None = None,
    ) -> None:
        self.label = label
        self.config = config
        self.timeout = config.timeout if config.timeout is not None else timeout
        """Seconds one use (list or call, a start included) may take."""
        self.idle_timeout = idle_timeout
        self._url_check = url_check
        self._connection: Connection | None = None
        self._lock = asyncio.Lock()
        self._closed = False
        self.on_close: Callable[[McpServer], None] | None = None

    def __repr__(self) -> str:
        return f"McpServer({self.label!r}, {self.config.transport})"

    @property
    def running(self) -> bool:
        """Whether a connection is open now (a stdio server's process runs)."""
        return self._connection is not None and not self._connection.closing

    # ----------------------------------------------------------------- tools

    async def list_tools(self) -> list[McpTool]:
        """The server's tools (every page of ``tools/list``).

        Raises:
            McpServerError: the server cannot start or be reached, or does not answer
                within the timeout.
            Exception: what the ``url_check`` raised, unchanged.
        """
        from mlx_gateway.supervisor.tools.content import tool_of

        deadline = time.monotonic() + self.timeout
        try:
            async with self._use(deadline) as connection:
                client = await connection.client(_left(deadline))
                tools: list[McpTool] = []
                cursor: str | None = None
                for _ in range(MAX_TOOL_PAGES):
                    page: mcp_types.ListToolsResult = await connection.run(
                        lambda c=cursor: client.list_tools(cursor=c), _left(deadline)
                    )
                    tools += [tool_of(tool) for tool in page.tools]
                    cursor = page.next_cursor
                    if cursor is None:
                        break
        except _UrlRefused as refused:
            raise refused.cause from None
        except Exception as exc:
            problem = self._problem(exc)
            log.warning("MCP server %r: listing its tools failed: %s", self.label, problem)
            raise McpServerError(self.label, problem) from None
        log.debug("MCP server %r: %d tools", self.label, len(tools))
        return tools

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, *, caller: str | None = None
    ) -> ToolOutput:
        """Call ``name`` with ``arguments``; what went wrong (the tool's error, the
        server's failure, the timeout, a refused URL) is an ``is_error`` output.

        ``caller`` (the calling app's name, ``server.keys``) is logged with the call.
        """
        from mlx_gateway.supervisor.tools.content import output_of

        started = time.monotonic()
        deadline = started + self.timeout
        try:
            async with self._use(deadline) as connection:
                client = await connection.client(_left(deadline))
                result: mcp_types.CallToolResult = await connection.run(
                    lambda: client.call_tool(name, arguments or {}), _left(deadline)
                )
            output = output_of(result)
        except _UrlRefused as refused:
            output = ToolOutput(text=f"MCP server {self.label!r}: {refused.cause}", is_error=True)
        except Exception as exc:
            output = ToolOutput(
                text=f"MCP server {self.label!r}: {self._problem(exc)}", is_error=True
            )
        log.info(
            "MCP call %s.%s%s: %s in %.2fs%s",
            self.label,
            name,
            f" (app {caller})" if caller else "",
            "error" if output.is_error else "ok",
            time.monotonic() - started,
            f": {output.text[:200]}" if output.is_error else "",
        )
        return output

    def _problem(self, exc: Exception) -> str:
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED

        from mlx_gateway.supervisor.tools.connection import describe

        if isinstance(exc, TimeoutError):
            return f"no answer within {self.timeout:g}s"
        if isinstance(exc, MCPError):
            if exc.code == CONNECTION_CLOSED:
                return "the server closed the connection (its process exited, or it stopped)"
            return f"error {exc.code}: {exc.message}"
        if isinstance(exc, OSError) and self.config.command is not None:
            return f"cannot start {self.config.command!r}: {describe(exc)}"
        return describe(exc)

    # ----------------------------------------------------------------- the connection

    @contextlib.asynccontextmanager
    async def _use(self, deadline: float) -> Any:
        """The live connection (started or restarted as needed), counted busy while
        the block runs."""
        if self._closed:
            raise ConnectionError("the gateway is shutting down")
        async with asyncio.timeout(_left(deadline)):
            async with self._lock:
                connection = self._connection
                if connection is None or connection.closing:
                    if self._url_check is not None and self.config.url is not None:
                        try:
                            await self._url_check(self.config.url)
                        except Exception as exc:
                            raise _UrlRefused(exc) from None
                    from mlx_gateway.supervisor.tools.connection import Connection

                    connection = Connection(self.label, self.config, self.idle_timeout)
                    self._connection = connection
                connection.busy += 1
        try:
            yield connection
        finally:
            connection.busy -= 1
            connection.last_used = asyncio.get_running_loop().time()
            connection.wake()
            if connection.error is not None and connection is self._connection:
                self._connection = None  # gone: the next use starts a new one

    async def close(self) -> None:
        """End the connection; later uses fail (the gateway stops)."""
        self._closed = True
        await self.stop()
        if self.on_close is not None:
            self.on_close(self)

    async def stop(self) -> None:
        """End the connection now; the next use connects again."""
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.stop()

    async def __aenter__(self) -> McpServer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


class _UrlRefused(Exception):
    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.001)


class McpServers:
    """The config's MCP servers by label (``tools.mcp_servers``), and the ad-hoc
    servers of requests; :meth:`close` ends them all (at shutdown)."""

    def __init__(self, config: ToolsConfig) -> None:
        self.config = config
        self._servers = {
            label: McpServer(
                label,
                entry,
                timeout=config.mcp_timeout,
                idle_timeout=config.mcp_idle_timeout,
            )
            for label, entry in config.mcp_servers.items()
        }
        self._adhoc: set[McpServer] = set()

    def __contains__(self, label: object) -> bool:
        return label in self._servers

    def __getitem__(self, label: str) -> McpServer:
        """The config's server of ``label`` (``KeyError`` when there is none)."""
        return self._servers[label]

    @property
    def labels(self) -> list[str]:
        return list(self._servers)

    def get(self, label: str) -> McpServer | None:
        return self._servers.get(label)

    def adhoc(
        self,
        url: str,
        headers: dict[str, str] | None = None,
        *,
        url_check: UrlCheck,
        label: str = "adhoc",
    ) -> McpServer:
        """A server a request names by URL (Responses' ``server_url``, Anthropic's
        ``mcp_servers[].url``), over streamable HTTP with ``headers``.

        ``url_check`` is awaited before each connection (a request may not make the
        gateway reach private addresses); what it raises comes out of
        :meth:`McpServer.list_tools` unchanged, and is an error output of
        :meth:`McpServer.call_tool`. The server is the request's own: close it when
        the request ends (``async with``); the gateway's shutdown closes it too.
        """
        server = McpServer(
            label,
            McpServerConfig(url=url, headers=dict(headers or {})),
            timeout=self.config.mcp_timeout,
            idle_timeout=self.config.mcp_idle_timeout,
            url_check=url_check,
        )
        server.on_close = self._adhoc.discard
        self._adhoc.add(server)
        return server

    async def close(self) -> None:
        """End every connection (stdio servers' processes included)."""
        servers = [*self._servers.values(), *self._adhoc]
        await asyncio.gather(*(server.close() for server in servers), return_exceptions=True)
