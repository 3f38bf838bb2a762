"""Stop waiting for work whose client has gone away."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

from starlette.requests import ClientDisconnect, Request
from starlette.types import Receive

T = TypeVar("T")


async def _disconnected(receive: Receive) -> None:
    # Only called once the body was read: the next ASGI message is the disconnect.
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await ``work``, unless the client disconnects first: then cancel it (it must
    clean up after itself when cancelled) and raise :class:`ClientDisconnect`.

    Call only after the request body was read."""
    return await unless_gone(request.receive, work)


async def unless_gone(receive: Receive, work: Awaitable[T]) -> T:
    """:func:`unless_disconnected` for an ASGI ``receive`` (middleware has no
    :class:`Request`)."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait((task, watch), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        raise ClientDisconnect()
    return task.result()
