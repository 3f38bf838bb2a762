"""Close the connection after an answer sent before the request body was read.

The gateway refuses some requests without reading their body: a wrong API key
(401/403), a ``Content-Length`` over the cap (413), a body cut off as it passes
the cap, an unknown path. Over HTTP/1.1 the rest of that body is still on its way,
so the connection cannot carry another request; a client that keeps it in its
pool would send its next request into a connection the server is about to drop.
Such answers say ``Connection: close``, so the client opens a fresh one.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class CloseUnreadBodyMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("http_version") not in ("1.0", "1.1"):
            await self.app(scope, receive, send)
            return
        if not _has_body(scope):
            await self.app(scope, receive, send)
            return
        body_read = False

        async def tracked_receive() -> Message:
            nonlocal body_read
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                body_read = True
            return message

        async def guarded_send(message: Message) -> None:
            if message["type"] == "http.response.start" and not body_read:
                headers = [
                    (name, value)
                    for name, value in message.get("headers", ())
                    if name.lower() != b"connection"
                ]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, tracked_receive, guarded_send)


def _has_body(scope: Scope) -> bool:
    """A body follows the headers: a non-zero ``Content-Length`` or chunked."""
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding":
            return True
        if name == b"content-length":
            return value.strip() not in (b"0", b"")
    return False
