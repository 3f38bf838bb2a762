"""The replies of one request, as the worker sends them (see ``Session.call``).

A plain async iterator rather than an async generator: besides waiting for the
next reply (``async for``), a reader can take the replies that already arrived
without waiting (:meth:`ReplyStream.take_ready`). A stream under load then writes
everything that piled up in one go instead of one write per generation step.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from mlx_gateway.protocol.frames import Frame
from mlx_gateway.protocol.messages import Cancel, Done, Error, Prefilled, Started
from mlx_gateway.supervisor.errors import GatewayError, WorkerCrashed, from_reply
from mlx_gateway.supervisor.pool.relay import Relay, RequestItem, WithPayloads, WorkerUnreachable

UNREACHABLE_WAIT = 2.0
"""Seconds to wait for the exit of a worker whose socket is gone."""


def as_error(item: RequestItem) -> BaseException:
    """The exception a request raises for the worker's ``Error`` or its death."""
    if isinstance(item, Error):
        return from_reply(item)
    if isinstance(item, BaseException):
        return item
    return GatewayError(f"unexpected reply {type(item).__name__}")


class ReplyStream:
    """Sends one request on first iteration and yields its replies up to and
    including ``Done``; a reply that came with frames is a :class:`WithPayloads`.

    The worker's ``Error`` (or its death) is raised as a :class:`GatewayError`.
    Leaving before ``Done`` (:meth:`aclose`, an exception or a cancellation while
    waiting) unregisters the request and sends ``Cancel`` to the worker."""

    def __init__(
        self,
        relay: Relay,
        opener: Callable[[], str],
        msg: Any,
        request_id: str,
        payloads: Sequence[Frame] = (),
        name: str = "",
        on_answer: Callable[[], None] | None = None,
    ) -> None:
        self._relay = relay
        self._on_answer = on_answer
        """Called once, at the first reply that answers (not ``Started`` or a
        ``Prefilled`` progress report): a first token, embeddings, an error…"""
        self._opener = opener
        self._msg = msg
        self._request_id = request_id
        self._payloads = payloads
        self._name = name
        self._queue: asyncio.Queue[RequestItem] | None = None
        self._worker_id = ""
        self._ended = False  # no more items: finished, failed or left
        self._answered = False  # the worker ended the request itself (no Cancel needed)

    def __aiter__(self) -> ReplyStream:
        return self

    async def __anext__(self) -> Any:
        if self._ended:
            raise StopAsyncIteration
        try:
            if self._queue is None:
                await self._send()
            assert self._queue is not None
            item = await self._queue.get()
        except BaseException:
            self._end()
            raise
        return self._accept(item)

    def take_ready(self) -> Any | None:
        """The next reply if it already arrived, else ``None`` (never waits)."""
        queue = self._queue
        if self._ended or queue is None or queue.empty():
            return None
        return self._accept(queue.get_nowait())

    async def aclose(self) -> None:
        self._end()

    def abort(self, reason: BaseException) -> bool:
        """Stop the request on the worker and end the stream with ``reason`` (raised
        at the next read, so the client gets its API's error); ``False`` when
        there is nothing to abort (not sent yet, or ended)."""
        if self._ended or self._queue is None:
            return False
        self._relay.post(self._worker_id, Cancel(request_id=self._request_id))
        self._queue.put_nowait(reason)
        return True

    async def _send(self) -> None:
        # The opener checks the worker is ready and registers the queue, with no
        # await in between: the owner cannot detach the worker before it is open.
        self._worker_id = self._opener()
        self._queue = self._relay.open(self._worker_id, self._request_id)
        try:
            await self._relay.send(self._worker_id, self._msg, self._payloads)
        except WorkerUnreachable:
            # The worker's socket is gone; its exit (and the error) normally follows.
            try:
                item = await asyncio.wait_for(self._queue.get(), UNREACHABLE_WAIT)
            except TimeoutError:
                item = WorkerCrashed(f"model '{self._name}' worker is unreachable")
            raise as_error(item) from None

    def _accept(self, item: RequestItem) -> Any:
        if self._on_answer is not None and not isinstance(item, Started | Prefilled):
            answered, self._on_answer = self._on_answer, None
            answered()
        match item:
            case Done() | WithPayloads(reply=Done()):
                self._answered = True
                self._end()
                return item
            case Error() | BaseException():
                self._answered = True
                self._end()
                raise as_error(item)
            case _:
                return item

    def _end(self) -> None:
        if self._ended:
            return
        self._ended = True
        if self._queue is None:
            return
        self._relay.close_request(self._request_id)
        if not self._answered:  # the client left (or we raised): free the worker's slot
            self._relay.post(self._worker_id, Cancel(request_id=self._request_id))

    def __del__(self) -> None:
        # Like an async generator's finalizer: a stream dropped unfinished still
        # frees its request on the worker.
        with contextlib.suppress(Exception):
            self._end()
