"""Response classes: JSON encoded by msgspec, and SSE streams that own their work
(a generation, a transcription, an image job)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, Protocol, cast

import msgspec
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from mlx_gateway.supervisor.errors import GatewayError
from mlx_gateway.supervisor.http import sse
from mlx_gateway.supervisor.http.error_body import ErrorBody, ErrorEvent
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
    """Work a stream owns: a generation, a transcription, an image job."""

    async def aclose(self) -> None: ...


async def ended(
    events: AsyncGenerator[bytes, None], work: Closable, log: logging.Logger, what: str = "stream"
) -> AsyncIterator[bytes]:
    """``events`` and then ``[DONE]``, closing ``work`` however they end. A failure
    after the stream started ends it with an error event (then ``[DONE]``), logged
    to ``log`` as ``what`` failing."""
    try:
        async with contextlib.aclosing(events):
            async for event in events:
                yield event
    except GatewayError as exc:
        log.warning("%s failed after it started: %s", what, exc.message)
        yield error_event(exc)
    except Exception:
        log.exception("%s failed after it started", what)
        yield error_event(GatewayError("The server had an error while streaming the response."))
    finally:
        await work.aclose()
    yield sse.DONE


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
        events = cast(AsyncIterator[bytes], self.body_iterator)  # built from bytes events
        await stream_with_keepalive(events, send, self.keepalive, self.note)


class EventStream(SSEStream):
    """An :class:`SSEStream` that closes its ``work`` (a generation or a turn, a
    transcription, an image job) however the response ends: finished, failed,
    client gone, or never iterated at all."""

    def __init__(
        self,
        events: AsyncIterator[bytes],
        work: Closable,
        keepalive: KeepAlive | None = None,
        note: Callable[[], str] = str,
    ) -> None:
        super().__init__(events, keepalive, note)
        self.work = work

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.work.aclose()
