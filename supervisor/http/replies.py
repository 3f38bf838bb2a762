"""Response classes: JSON encoded by msgspec, and SSE streams that own a generation."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import msgspec
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from mlx_gateway.supervisor.engine.objects import ErrorBody, ErrorEvent
from mlx_gateway.supervisor.errors import GatewayError
from mlx_gateway.supervisor.http import sse
from mlx_gateway.supervisor.http.keepalive import KeepAlive, stream_with_keepalive

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class JSONResponse(Response):
    """A JSON response encoded by msgspec (Structs or builtins)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return msgspec.json.encode(content)


def error_response(exc: GatewayError) -> JSONResponse:
    """The OpenAI-shaped error response of ``exc``."""
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


def error_event(exc: GatewayError) -> bytes:
    """The SSE event that ends a stream which failed after it started."""
    return sse.data(ErrorEvent(ErrorBody(exc.message, exc.type, exc.param, exc.code)))


class Closable(Protocol):
    async def aclose(self) -> None: ...


class SSEStream(StreamingResponse):
    """A ``text/event-stream`` response; with a :class:`KeepAlive`, a keep-alive
    event carrying ``note()`` goes out whenever the stream was quiet that long."""

    def __init__(
        self,
        events: AsyncIterator[bytes],
        keepalive: KeepAlive | None = None,
        note: Callable[[], str] = str,
    ) -> None:
        super().__init__(events, media_type="text/event-stream", headers=SSE_HEADERS)
        self.keepalive = keepalive
        self.note = note

    async def stream_response(self, send: Send) -> None:
        if self.keepalive is None:
            await super().stream_response(send)
            return
        start = {"type": "http.response.start", "status": self.status_code}
        await send({**start, "headers": self.raw_headers})
        await stream_with_keepalive(self.body_iterator, send, self.keepalive, self.note)


class EventStream(SSEStream):
    """An :class:`SSEStream` that closes its generation (a ``Generation`` or a
    ``Turn``) however the response ends: finished, failed, client gone, or never
    iterated at all."""

    def __init__(
        self,
        events: AsyncIterator[bytes],
        generation: Closable,
        keepalive: KeepAlive | None = None,
        note: Callable[[], str] = str,
    ) -> None:
        super().__init__(events, keepalive, note)
        self.generation = generation

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.generation.aclose()
