"""What ``/mcp`` answers over HTTP around the SDK's transport: JSON-RPC errors only.

The server is stateless (:mod:`.endpoint`), so there is no session to end and no
stream a server could push on: ``GET`` (a stream held open for nothing) and
``DELETE`` are ``405`` with ``Allow: POST``, as MCP's transport allows. An error the
SDK answers in plain text (a missing or wrong ``Content-Type``) is rewritten as a
JSON-RPC error, so every ``4xx`` of ``/mcp`` is ``{"jsonrpc", "id", "error": {code,
message}}`` whatever the client sent.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

INVALID_REQUEST = -32600
"""JSON-RPC's code for a request that is not one (what the SDK itself uses for HTTP
level refusals)."""


def error_body(message: str, code: int = INVALID_REQUEST) -> bytes:
    """A JSON-RPC error answer to no request (``id: null``)."""
    error = {"code": code, "message": message}
    return json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()


async def _answer(send: Send, status: int, body: bytes, headers: list[Any]) -> None:
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *headers,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class JsonRpcTransport:
    """The gateway's models as MCP tools (streamable HTTP: JSON-RPC 2.0 in a POST).

    The first line is ``/mcp``'s summary in ``/openapi.json``. This wraps the SDK's
    transport app: ``POST`` only, and every error a JSON-RPC one."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            message = (
                f"Method Not Allowed: {scope['method']} {scope['path']}. This MCP server "
                "is stateless: every message is a POST (no session to end, no stream "
                "to open)."
            )
            await _answer(send, 405, error_body(message), [(b"allow", b"POST")])
            return
        held: Message | None = None
        body = b""

        async def relay(message: Message) -> None:
            nonlocal held, body
            if message["type"] == "http.response.start" and _plain_error(message):
                held = message  # its text body follows: rewritten once it is whole
                return
            if held is None or message["type"] != "http.response.body":
                await send(message)
                return
            body += message.get("body", b"")
            if not message.get("more_body", False):
                text = body.decode("utf-8", "replace").strip() or "Invalid request"
                await _answer(send, held["status"], error_body(f"{text}."), [])

        await self.app(scope, receive, relay)


def _plain_error(start: Message) -> bool:
    if start["status"] < 400:
        return False
    for name, value in start.get("headers", ()):
        if name.lower() == b"content-type":
            return not value.lower().startswith(b"application/json")
    return True
