"""One generation on a worker, from the worker's first reply to its last.

The generation's :class:`~mlx_gateway.supervisor.pool.worker_call.WorkerCall` (which
holds the model's session and cancels the request on the worker when left early) is
opened in :meth:`Generation.start` and closed by :meth:`Generation.aclose`, so it
spans both the wait for the first reply, which decides between an HTTP error and a
stream, and the stream itself.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from mlx_gateway.protocol.messages import Chunk, Done, Generate, Prefilled, Started
from mlx_gateway.supervisor import recorder
from mlx_gateway.supervisor.config.text import TextModelConfig
from mlx_gateway.supervisor.errors import GatewayError
from mlx_gateway.supervisor.pool.model_handle import ModelHandle
from mlx_gateway.supervisor.pool.worker_call import WorkerCall

log = logging.getLogger("mlx_gateway.requests")


class ReplySource(Protocol):
    """What a generation reads its replies from (a :class:`WorkerCall`)."""

    async def next(self) -> Any: ...

    def take_ready(self) -> Any | None: ...

    async def aclose(self) -> None: ...


class Generation:
    """A generation the worker accepted (its first reply came).

    Iterate it for the :class:`Chunk` replies and then the final :class:`Done`;
    iteration raises :class:`GatewayError` when the request fails on the worker.
    Always :meth:`aclose` it: leaving before ``Done`` cancels the request."""

    def __init__(
        self,
        call: ReplySource,
        first: Any,
        model: str = "",
        request_id: str = "",
        begun: float | None = None,
    ) -> None:
        self._call = call
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
        self.model = model
        self.request_id = request_id
        self._begun = time.monotonic() if begun is None else begun
        """When the request was sent (the log line of a generation left early)."""
        self._failed = False
        self._tokens = 0

    @classmethod
    async def start(
        cls,
        handle: ModelHandle,
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
        recorder.note_model(handle.name)
        call = WorkerCall(handle, msg, payloads, prepare=prepare)
        recorder.note_abort(call.abort)
        begun = time.monotonic()
        generation = cls(call, await call.first(), handle.name, msg.request_id, begun)
        if isinstance(handle.config, TextModelConfig):
            generation.stream_interval = handle.config.stream_interval
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
                    reply = await self._call.next()
                except GatewayError:
                    self._failed = True
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
        replies: list[Chunk | Done] = []
        try:
            while not self._finished and self._failure is None:
                if self._pending is not None:
                    reply, self._pending = self._pending, None
                else:
                    reply = self._call.take_ready()
                    if reply is None:
                        break
                accepted = self._accept(reply)
                if accepted is not None:
                    replies.append(accepted)
        except GatewayError as exc:
            self._failed = True
            recorder.note_outcome("error")
            self._failure = exc
        return replies

    def _accept(self, reply: Any) -> Chunk | Done | None:
        """What the client gets of a worker reply (``None``: nothing)."""
        match reply:
            case Chunk():
                self.prefilled = None
                self._tokens += reply.tokens
                recorder.note_output(reply.tokens)
                return reply
            case Prefilled():
                self.prefilled = reply
                recorder.note_prefilled(reply.done, reply.total)
            case Done(usage=usage):
                self._finished = True
                recorder.note_done(
                    reply.finish_reason,
                    usage.prompt_tokens,
                    usage.completion_tokens,
                    usage.draft_proposed,
                    usage.draft_accepted,
                    cached_tokens=usage.cached_tokens,
                    streamed=self._tokens,
                )
                return reply
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
            if not self._failed:
                self._log_left()
        await self._call.aclose()

    def _log_left(self) -> None:
        """One line for a generation whose reader left before its end (a client that
        hung up or timed out): otherwise nothing in the log would tell."""
        if self.prefilled is not None:
            where = f"at prefill {self.prefilled.done}/{self.prefilled.total} tokens"
        elif self._tokens:
            where = f"after {self._tokens} output tokens"
        else:
            where = "before its first token"
        seconds = time.monotonic() - self._begun
        log.info(
            "[%s] %s left %s, %.1f s in: cancelled on the worker",
            self.model,
            self.request_id,
            where,
            seconds,
        )
