"""The request body cap: an ASGI middleware answering 413 beyond ``server.max_body_mb``.

Checked twice, so neither a lying nor a missing ``Content-Length`` gets past it: a
declared length over the cap is refused before the body is read, and the bytes
are counted as they arrive (chunked bodies included).

Endpoints that carry files get a larger cap where the configured models allow
larger files (see :func:`.middleware.route_limits`): the audio uploads, image
edits, and chat requests with base64 images. Their handlers then apply the exact
limit of the model the request names.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mlx_gateway.supervisor.errors import GatewayError
from mlx_gateway.supervisor.http.replies import error_response

MIB = 1 << 20


class BodyTooLarge(GatewayError):
    status = 413
    type = "invalid_request_error"

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"The request body is too large: the limit is {limit / MIB:g} MiB "
            "(server.max_body_mb).",
            code="request_too_large",
        )


class BodyLimitMiddleware:
    """Cap request bodies at ``max_body`` bytes; a path starting with a key of
    ``routes`` gets that key's cap instead, if larger."""

    def __init__(self, app: ASGIApp, *, max_body: int, routes: dict[str, int] | None = None):
        self.app = app
        self.max_body = max_body
        self.routes = {prefix: max(limit, max_body) for prefix, limit in (routes or {}).items()}

    def limit_for(self, path: str) -> int:
        for prefix, limit in self.routes.items():
            if path.startswith(prefix):
                return limit
        return self.max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["path"])
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await error_response(BodyTooLarge(limit))(scope, receive, send)
            return

        received = 0
        started = False

        async def counted_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    # Raised inside the handler's body read: the app's exception
                    # handlers turn it into the 413 (or the except below does).
                    raise BodyTooLarge(limit)
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, tracked_send)
        except BodyTooLarge as exc:
            if started:
                raise
            await error_response(exc)(scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() else None
    return None
