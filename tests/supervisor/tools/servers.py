"""MCP servers for the tests, made with the official SDK's server side
(``MCPServer``, 2.x's FastMCP): the same tools over stdio (``python servers.py``)
and over streamable HTTP (:func:`http_server`, on a free port of this process)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError


def make_server(log_level: str = "INFO") -> MCPServer:
    server = MCPServer("gateway-tests", log_level=log_level)  # type: ignore[arg-type]

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @server.tool()
    def pid() -> int:
        """The server's process id."""
        return os.getpid()

    @server.tool()
    def boom(why: str) -> str:
        """Always fails, saying why."""
        raise ToolError(f"kaboom: {why}")

    @server.tool()
    def bug() -> str:
        """Fails as a bug does (its text stays on the server)."""
        raise ValueError("a secret detail")

    @server.tool()
    async def hang() -> str:
        """Never answers (in time)."""
        await asyncio.sleep(3600)  # not a wait: the tool that never answers
        return "late"

    @server.tool()
    def crash() -> str:
        """The process dies mid-call."""
        os._exit(3)

    return server


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class HeaderCheck:
    """ASGI middleware: 401 unless ``authorization`` is the one expected; records
    what each request carried."""

    def __init__(self, app: Any, expected: str) -> None:
        self.app = app
        self.expected = expected
        self.seen: list[str | None] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            got = headers.get(b"authorization")
            self.seen.append(got.decode() if got is not None else None)
            if got is None or got.decode() != self.expected:
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await self.app(scope, receive, send)


@contextlib.asynccontextmanager
async def http_server(token: str) -> AsyncIterator[tuple[str, HeaderCheck]]:
    """The test server over streamable HTTP at ``http://127.0.0.1:<port>/mcp``, asking
    for ``Authorization: Bearer <token>``; yields its URL and the header check."""
    import uvicorn

    port = free_port()
    check = HeaderCheck(make_server().streamable_http_app(), f"Bearer {token}")
    config = uvicorn.Config(check, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    deadline = time.monotonic() + 10
    while not server.started:
        if task.done() or time.monotonic() > deadline:
            raise RuntimeError("the test MCP server did not start")
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/mcp", check
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


STDIO_ARGS = [os.path.abspath(__file__)]
"""``sys.executable`` with these runs the test server over stdio."""

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    make_server("CRITICAL").run("stdio")
