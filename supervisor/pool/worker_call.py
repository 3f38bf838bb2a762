"""One request on a worker, as every API surface makes it: the one worker-call API.

A :class:`WorkerCall` holds the model's session (admission, in-flight accounting,
``last_used``) from before the request is sent until it is closed, so one call spans
both the wait for the worker's first reply, which decides between an HTTP error and
a result, and the replies after it. Closing it is shielded (it completes inside a
cancelled task) and, before ``Done``, cancels the request on the worker.

Two ways to hold one::

    async with WorkerCall(handle, msg) as call:      # scoped: read it to the end
        async for reply in call: ...

    call = WorkerCall(handle, msg, payloads)         # kept: a stream, a job
    first = await call.first()                        # closed again if this raises
    ...
    await call.aclose()
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

import anyio

from mlx_gateway.protocol.messages import INTERACTIVE, Error
from mlx_gateway.supervisor.errors import ModelUnavailable
from mlx_gateway.supervisor.pool.calls import as_error
from mlx_gateway.supervisor.pool.model_handle import ModelHandle
from mlx_gateway.supervisor.pool.relay import WithPayloads


class HasRequestId(Protocol):
    """A request message: every one names its request."""

    request_id: str


M = TypeVar("M", bound=HasRequestId)


def unwrap(item: Any) -> tuple[Any, list[bytes]]:
    """A reply and the binary frames it came with (none for most replies)."""
    if isinstance(item, WithPayloads):
        return item.reply, item.payloads
    return item, []


class WorkerCall(Generic[M]):
    """Sends ``msg`` (with binary ``payloads``) to ``target``'s worker and yields its
    replies up to and including ``Done``; a reply with frames is a ``WithPayloads``.

    The worker's ``Error`` (or its death) is raised as a ``GatewayError``.
    ``prepare`` may complete ``msg`` once the session is held (the model is ready).
    Replies that end before what :meth:`first` or :meth:`next` waits for raise a
    503 saying the worker ended the ``what`` without a result, with ``code``."""

    def __init__(
        self,
        target: ModelHandle,
        msg: M,
        payloads: Sequence[Any] = (),
        *,
        prepare: Callable[[M], M] | None = None,
        what: str = "request",
        code: str = "incomplete_generation",
    ) -> None:
        self.msg = msg
        self._target = target
        self._payloads = payloads  # not copied: the caller may clear it once sent
        self._prepare = prepare
        self._what = what
        self._code = code
        self._stack = contextlib.AsyncExitStack()
        self._replies: Any = None
        self._closed = False

    async def open(self) -> None:
        """Hold the session (waiting for the model to be ready) and open the request
        (sent on the first read). Raises the session's error with nothing held."""
        if self._replies is not None:
            return
        try:
            priority = getattr(self.msg, "priority", INTERACTIVE)  # Generate, Embed
            session = await self._stack.enter_async_context(self._target.session(priority))
            if self._prepare is not None:
                self.msg = self._prepare(self.msg)
            replies = session.call(self.msg, self.msg.request_id, self._payloads)
            aclose = getattr(replies, "aclose", None)
            if aclose is not None:
                self._stack.push_async_callback(aclose)
            self._replies = replies
        except BaseException as exc:
            await self._abandon(exc)
            raise

    async def first(self, until: type | tuple[type, ...] | None = None) -> Any:
        """Open the call and wait for the worker's first reply (with ``until``: the
        first whose message is of that type, skipping the others). Raises the
        request's error (400 context too long, 503 the model failed to load, …), and
        on any failure or cancellation the call is closed again."""
        try:
            await self.open()
            item = await self.next()
            while until is not None and not isinstance(unwrap(item)[0], until):
                item = await self.next()
        except BaseException as exc:
            await self._abandon(exc)
            raise
        return item

    async def next(self) -> Any:
        """The next reply; the worker ending the call without one is a 503."""
        try:
            return await self.__anext__()
        except StopAsyncIteration:
            raise ModelUnavailable(
                f"The worker ended the {self._what} without a result.", code=self._code
            ) from None

    def __aiter__(self) -> WorkerCall[M]:
        return self

    async def __anext__(self) -> Any:
        if self._closed:
            raise StopAsyncIteration
        await self.open()
        return _checked(await anext(self._replies))

    def take_ready(self) -> Any | None:
        """The next reply if it already arrived, else ``None`` (never waits)."""
        take = getattr(self._replies, "take_ready", None)
        return _checked(take()) if take is not None else None

    def abort(self, reason: BaseException) -> bool:
        """Stop the request and end its replies with ``reason`` (see
        ``ReplyStream.abort``); ``False`` when it was not sent or has ended."""
        abort = getattr(self._replies, "abort", None)
        return bool(abort(reason)) if abort is not None and not self._closed else False

    async def aclose(self) -> None:
        """Leave the session (idempotent); cancels the request if it did not finish.
        Shielded, so that it completes inside a cancelled task too."""
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            await self._stack.aclose()

    async def __aenter__(self) -> WorkerCall[M]:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _abandon(self, exc: BaseException) -> None:
        """Close after a failure, handing it to the session like ``async with`` would."""
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            await self._stack.__aexit__(type(exc), exc, exc.__traceback__)


def _checked(item: Any) -> Any:
    """``item``, or the worker's ``Error`` raised (a stream that yields it as a reply)."""
    if isinstance(item, Error):
        raise as_error(item)
    return item
