"""The request body cap: an ASGI middleware answering 413 beyond ``server.max_body_mb``.

Checked twice, so neither a lying nor a missing ``Content-Length`` gets past it: a
declared length over the cap is refused before the body is read, and the bytes
are counted as they arrive (chunked bodies included). Upload endpoints
(``multipart/form-data``: audio now, images later) get the larger of the cap and
the largest ``max_upload_mb`` of any model (plus room for the form's other
fields); their handler then applies the exact limit of the model named in the
form (see :mod:`.upload`).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import GatewayError
from .responses import error_response

MIB = 1 << 20
FORM_OVERHEAD = 64 * 1024
"""Room beyond the largest file for a form's other fields and part headers (as
the upload reader allows)."""

UPLOAD_PREFIXES = ("/v1/audio/", "/v1/images/edits", "/v1/images/variations")
"""Paths whose bodies are file uploads (multipart forms)."""


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
    """Cap request bodies at ``max_body`` bytes (``upload_max`` on upload paths)."""

    def __init__(self, app: ASGIApp, *, max_body: int, upload_max: int) -> None:
        self.app = app
        self.max_body = max_body
        self.upload_max = max(upload_max + FORM_OVERHEAD, max_body)

    def limit_for(self, path: str) -> int:
        return self.upload_max if path.startswith(UPLOAD_PREFIXES) else self.max_body

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
