"""Streams that start before their model is loaded.

A streaming request whose generation has not started within
``GRACE_SECONDS`` (its model is loading, or waits for memory) gets its HTTP 200 and
SSE headers then, and a comment line every second while the model loads
(``: loading qwen 42%``) — clients ignore comments, and proxies see a live
connection — and then the normal events. A load that fails becomes an error event
followed by ``data: [DONE]``, as for any error after a stream started (or the
API's own error event: ``failed``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.requests import ClientDisconnect
from starlette.responses import StreamingResponse

from mlx_gateway.supervisor.engine.generation import Generation
from mlx_gateway.supervisor.errors import GatewayError
from mlx_gateway.supervisor.http import sse
from mlx_gateway.supervisor.http.replies import SSE_HEADERS, EventStream, error_event
from mlx_gateway.supervisor.pool.model_handle import ModelHandle

KEEPALIVE_SECONDS = 1.0
GRACE_SECONDS = 2.0
"""How long a stream waits for its generation to start before it commits to a 200:
a quick rejection (context too long, a load that fails fast) is still a plain HTTP
error."""


def loading_comment(handle: ModelHandle) -> bytes:
    status = handle.status()
    progress = status.get("load_progress") or {}
    fraction = progress.get("fraction")
    stage = progress.get("stage") or status["state"]
    done = f" {fraction * 100:.0f}%" if isinstance(fraction, int | float) else ""
    waiting = "waiting for memory" if status["state"] == "unloaded" else stage
    return sse.comment(f"{waiting} {handle.name}{done}".replace("load ", "loading ", 1))


def openai_failure(exc: GatewayError) -> bytes:
    """The end of an OpenAI stream that failed before its first event."""
    return error_event(exc) + sse.DONE


async def _events(
    handle: ModelHandle,
    start: Awaitable[Generation],
    relay: Callable[[Generation], AsyncIterator[bytes]],
    failed: Callable[[GatewayError], bytes],
) -> AsyncIterator[bytes]:
    task: asyncio.Future[Generation] = asyncio.ensure_future(start)
    generation: Generation | None = None
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=KEEPALIVE_SECONDS)
            if done:
                break
            yield loading_comment(handle)
        try:
            generation = task.result()
        except GatewayError as exc:
            yield failed(exc)
            return
        except ClientDisconnect:
            return
        async for event in relay(generation):
            yield event
    finally:
        if not task.done():  # the client left while the model loaded
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        elif generation is None and not task.cancelled() and task.exception() is None:
            generation = task.result()
        if generation is not None:
            await generation.aclose()


async def start_stream(
    handle: ModelHandle,
    start: Awaitable[Generation],
    relay: Callable[[Generation], AsyncIterator[bytes]],
    failed: Callable[[GatewayError], bytes] = openai_failure,
) -> StreamingResponse:
    """The SSE response of a streaming request: a plain stream once ``start`` (a
    :meth:`Generation.start`) succeeded within the grace period (its errors are
    raised as HTTP errors), else a stream that shows the load's progress first
    (and ends with ``failed(error)`` if ``start`` fails then)."""
    task: asyncio.Future[Generation] = asyncio.ensure_future(start)
    try:
        done, _ = await asyncio.wait({task}, timeout=GRACE_SECONDS)
    except BaseException:
        task.cancel()
        raise
    if done:
        generation = task.result()
        return EventStream(relay(generation), generation)
    return StreamingResponse(
        _events(handle, task, relay, failed), media_type="text/event-stream", headers=SSE_HEADERS
    )
