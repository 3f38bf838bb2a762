"""One generation on a worker, from the worker's first reply to its last.

The model's session (which counts the request in flight and cancels it on the
worker when left early) is entered in :meth:`Generation.start` and held until
:meth:`Generation.aclose`, so it spans both the wait for the first reply, which
decides between an HTTP error and a stream, and the stream itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import anyio

from mlx_gateway.protocol.messages import Chunk, Done, Error, Generate, Prefilled, Started
from mlx_gateway.supervisor.errors import GatewayError, ModelUnavailable
from mlx_gateway.supervisor.http import recorder


class Handle(Protocol):
    """What a generation needs of a ``WorkerHandle``."""

    def session(self) -> contextlib.AbstractAsyncContextManager[Any]: ...


def _raise_error(reply: Error) -> None:
    raise GatewayError(
        reply.message, status=reply.status, type=reply.type, param=reply.param, code=reply.code
    )


class Generation:
    """A generation the worker accepted (its first reply came).

    Iterate it for the :class:`Chunk` replies and then the final :class:`Done`;
    iteration raises :class:`GatewayError` when the request fails on the worker.
    Always :meth:`aclose` it: leaving before ``Done`` cancels the request."""

    def __init__(self, stack: contextlib.AsyncExitStack, stream: Any, first: Any) -> None:
        self._stack = stack
        self._stream = stream
        self._pending: Any = first
        self._failure: GatewayError | None = None
        self.stream_interval = 0.0
        """Shortest time between two writes of this generation's stream (seconds;
        the model's ``stream_interval``)."""
        self._finished = False
        self._closed = False
        self.started: Started | None = first if isinstance(first, Started) else None
        """The worker's ``Started`` (prompt tokens, whether the output starts in a
        thinking block), when that was its first reply."""
        self.prefilled: Prefilled | None = None
        """The worker's latest prefill progress of a long prompt (``None`` before
        any, and again once the output began)."""

    @classmethod
    async def start(
        cls,
        handle: Handle,
        msg: Generate,
        payloads: Sequence[bytes] = (),
        prepare: Callable[[Generate], Generate] | None = None,
    ) -> Generation:
        """Enter ``handle``'s session (waiting for the model to be ready), send
        ``msg`` (with binary ``payloads``: a vision request's images) and wait for
        the worker's first reply. ``prepare`` may complete ``msg`` once the model is
        ready (what it needs may come from the worker's ``Ready``).

        Raises the request's :class:`GatewayError` (e.g. 400 context too long, 503
        model failed to load) with nothing left open."""
        name = getattr(handle, "name", None)
        if isinstance(name, str):
            recorder.note_model(name)
        stack = contextlib.AsyncExitStack()
        try:
            session = await stack.enter_async_context(handle.session())
            if prepare is not None:
                msg = prepare(msg)
            if payloads:
                stream = session.call(msg, msg.request_id, payloads)
            else:
                stream = session.generate(msg)
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                stack.push_async_callback(aclose)
            first = await _next(stream)
            if isinstance(first, Error):
                _raise_error(first)
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                await stack.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        generation = cls(stack, stream, first)
        interval = getattr(getattr(handle, "config", None), "stream_interval", 0.0)
        generation.stream_interval = interval if isinstance(interval, int | float) else 0.0
        return generation

    def __aiter__(self) -> Generation:
        return self

    async def __anext__(self) -> Chunk | Done:
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure
        while not self._finished:
            if self._pending is not None:
                reply, self._pending = self._pending, None
            else:
                try:
                    reply = await _next(self._stream)
                except GatewayError:
                    recorder.note_outcome("error")
                    raise
            accepted = self._accept(reply)
            if accepted is not None:
                return accepted
        raise StopAsyncIteration

    def ready(self) -> list[Chunk | Done]:
        """The chunks (and the ``Done``) that already arrived, taken without waiting.

        A stream that fell behind the worker writes them all at once instead of
        one write per generation step. A failure among them is kept for the next
        iteration, so the chunks before it still reach the client."""
        take = getattr(self._stream, "take_ready", None)
        replies: list[Chunk | Done] = []
        try:
            while take is not None and not self._finished and self._failure is None:
                if self._pending is not None:
                    reply, self._pending = self._pending, None
                else:
                    reply = take()
                    if reply is None:
                        break
                accepted = self._accept(reply)
                if accepted is not None:
                    replies.append(accepted)
        except GatewayError as exc:
            recorder.note_outcome("error")
            self._failure = exc
        return replies

    def _accept(self, reply: Any) -> Chunk | Done | None:
        """What the client gets of a worker reply (``None``: nothing)."""
        match reply:
            case Chunk():
                self.prefilled = None
                recorder.note_output(reply.tokens)
                return reply
            case Prefilled():
                self.prefilled = reply
            case Done(usage=usage):
                self._finished = True
                recorder.note_done(
                    reply.finish_reason, usage.prompt_tokens, usage.completion_tokens
                )
                return reply
            case Error():
                recorder.note_outcome("error")
                _raise_error(reply)
            case Started():
                recorder.note_started(reply.prompt_tokens)
            # Anything else carries nothing for the client.
        return None

    async def collect(self) -> tuple[str, Done]:
        """Run the generation to its end: the whole text and the final ``Done``."""
        parts: list[str] = []
        async for reply in self:
            if isinstance(reply, Done):
                return "".join(parts), reply
            parts.append(reply.text)
        raise AssertionError("unreachable: iteration ends only after Done")

    async def aclose(self) -> None:
        """Leave the session (idempotent); cancels the request if it did not finish.
        Shielded, so that it completes inside a cancelled task too."""
        if self._closed:
            return
        self._closed = True
        if not self._finished:
            recorder.note_outcome("client_left")
        with anyio.CancelScope(shield=True):
            await self._stack.aclose()


async def _next(stream: Any) -> Any:
    try:
        return await anext(stream)
    except StopAsyncIteration:
        raise ModelUnavailable(
            "The worker ended the request without a result.", code="incomplete_generation"
        ) from None
