"""How a stream starts: at once, or before its model is loaded; and what its
keep-alives say.

A streaming request whose generation has not started within
``GRACE_SECONDS`` (its model is loading, or waits for memory) gets its HTTP 200 and
SSE headers then, keep-alives while the model loads (``: loading qwen 42%``) —
clients ignore them, and proxies see a live connection — and then the normal
events. A load that fails becomes an error event followed by ``data: [DONE]``, as
for any error after a stream started (or the API's own error event: ``failed``).

Every stream, started either way, gets a keep-alive whenever it was quiet for
``server.stream_keepalive`` seconds (:mod:`..http.keepalive`): while the model
loads, while the worker prefills a long prompt (``: prefill 4096/20000 tokens``,
from the worker's ``Prefilled`` progress), while the request waits for a slot.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from starlette.requests import ClientDisconnect
from starlette.responses import StreamingResponse

from mlx_gateway.supervisor.errors import GatewayError
from mlx_gateway.supervisor.http import sse
from mlx_gateway.supervisor.http.keepalive import KeepAlive
from mlx_gateway.supervisor.http.replies import Closable, EventStream, SSEStream, error_event
from mlx_gateway.supervisor.pool.model_handle import ModelHandle

R = TypeVar("R", bound=Closable)
"""What a stream relays: a :class:`Generation`, or a ``Turn`` of several."""

GRACE_SECONDS = 2.0
"""How long a stream waits for its generation to start before it commits to a 200:
a quick rejection (context too long, a load that fails fast) is still a plain HTTP
error."""


def openai_failure(exc: GatewayError) -> bytes:
    """The end of an OpenAI stream that failed before its first event."""
    return error_event(exc) + sse.DONE


def loading_note(handle: ModelHandle) -> str:
    """What a stream waiting for its model shows: ``loading qwen 42%``, or
    ``waiting for a free slot on qwen`` (the model is ready and busy)."""
    status = handle.status()
    if status.state == "ready":
        return f"waiting for a free slot on {handle.name}"
    progress = status.load_progress
    fraction = progress.fraction if progress is not None else None
    stage = progress.stage if progress is not None else status.state
    done = f" {fraction * 100:.0f}%" if isinstance(fraction, int | float) else ""
    waiting = "waiting for memory" if status.state == "unloaded" else stage
    return f"{waiting} {handle.name}{done}".replace("load ", "loading ", 1)


def progress_note(running: Any) -> str:
    """What a started stream (a ``Generation`` or a ``Turn``) waits for, when the
    worker told: ``prefill 4096/20000 tokens``; else ``""`` (a plain keep-alive)."""
    for generation in getattr(running, "generations", None) or [running]:
        prefilled = getattr(generation, "prefilled", None)
        if prefilled is not None:
            return f"prefill {prefilled.done}/{prefilled.total} tokens"
    return ""


async def _events(
    task: asyncio.Future[R],
    relay: Callable[[R], AsyncIterator[bytes]],
    failed: Callable[[GatewayError], bytes],
) -> AsyncIterator[bytes]:
    generation: R | None = None
    try:
        await asyncio.wait({task})
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
    start: Awaitable[R],
    relay: Callable[[R], AsyncIterator[bytes]],
    keepalive: KeepAlive | None = None,
    failed: Callable[[GatewayError], bytes] = openai_failure,
) -> StreamingResponse:
    """The SSE response of a streaming request: a plain stream once ``start`` (a
    :meth:`Generation.start`, or a ``Turn.start``) succeeded within the grace
    period (its errors are raised as HTTP errors), else a stream that shows the
    load's progress first (and ends with ``failed(error)`` if ``start`` fails then).
    Both send ``keepalive`` events while quiet."""
    keepalive = keepalive or KeepAlive()
    task: asyncio.Future[R] = asyncio.ensure_future(start)
    try:
        done, _ = await asyncio.wait({task}, timeout=GRACE_SECONDS)
    except BaseException:
        task.cancel()
        raise
    if done:
        generation = task.result()
        return EventStream(
            relay(generation), generation, keepalive, lambda: progress_note(generation)
        )

    def note() -> str:
        if not task.done():
            return loading_note(handle)
        if task.cancelled() or task.exception() is not None:
            return ""
        return progress_note(task.result())

    return SSEStream(_events(task, relay, failed), keepalive, note)
