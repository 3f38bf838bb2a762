"""Request admission of a model's handle: the slots (``max_concurrency``), the queue
(``max_queue``, ``queue_timeout``), a drain, the memory budget, the load; and the
:class:`Session` one admitted request uses to reach the worker.

:class:`Admission` is the part of :class:`~.handle.WorkerHandle` that requests go
through; the handle's owner task (``handle.py``) starts and stops the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from mlx_gateway.protocol.frames import Frame
from mlx_gateway.protocol.messages import Generate
from mlx_gateway.supervisor.config import ModelConfig, ServerConfig
from mlx_gateway.supervisor.errors import ModelUnavailable, TooManyRequests, WorkerCrashed
from mlx_gateway.supervisor.pool.calls import ReplyStream
from mlx_gateway.supervisor.pool.keep_alive import lifetime, request_started
from mlx_gateway.supervisor.pool.owner_events import WorkerProcess, background
from mlx_gateway.supervisor.pool.relay import Relay
from mlx_gateway.supervisor.pool.room import Room
from mlx_gateway.supervisor.pool.state import WorkerState

if TYPE_CHECKING:
    pass


class Admission:
    """Admission of requests to one model (mixed into the handle, whose state it reads)."""

    config: ModelConfig
    name: str
    state: WorkerState
    inflight: int
    waiting: int
    held_back: int
    last_used: float | None
    last_used_wall: float | None
    failures: int
    closing: bool
    last_error: str | None
    placement: Room | None
    _server: ServerConfig
    _relay: Relay
    _slots: asyncio.Semaphore
    _state_changed: asyncio.Event
    _recent_crashes: list[float]
    _proc: WorkerProcess | None

    # provided by the handle
    async def ensure_ready(self) -> None:
        raise NotImplementedError

    async def stop(self, reason: str = "requested", *, if_idle: bool = False) -> None:
        raise NotImplementedError

    @property
    def reserved(self) -> bool:
        raise NotImplementedError

    @property
    def draining(self) -> bool:
        raise NotImplementedError

    def _changed(self) -> None:
        raise NotImplementedError

    def _closing_error(self) -> ModelUnavailable:
        raise NotImplementedError

    def _backoff_left(self) -> float:
        raise NotImplementedError

    def _unavailable(self, suffix: str = "") -> ModelUnavailable:
        raise NotImplementedError

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[Session]:
        """Hold the worker for one request.

        Admission: at most ``max_concurrency`` requests hold a slot; up to
        ``max_queue`` more wait (for a slot, for room in the memory budget, for the
        load), each at most ``queue_timeout`` seconds (then 503); beyond that 429
        (requests waiting for a load count too: before the worker is ready, at most
        ``max_concurrency + max_queue`` are taken).
        While waiting or holding a slot the request keeps the worker from being
        reaped or evicted, and ``last_used`` is stamped when the request *ends* —
        streams included. A client that leaves while a load runs only for it
        stops that load."""
        if self.closing:
            raise self._closing_error()
        request_started(self)  # its keep_alive, or none, is the model's lifetime now
        limit = self.config.max_concurrency + self.config.max_queue
        if self.inflight + self.waiting >= limit:
            # Counted whatever they wait for (a slot, the load, room in the budget):
            # a burst at a model that is still loading is held to the same bound.
            raise TooManyRequests(self.name, self.config.max_concurrency, self.config.max_queue)
        timeout = self.config.effective_queue_timeout(self._server)
        self.waiting += 1
        acquired = admitted = False
        deadline = time.monotonic() + timeout
        try:
            async with asyncio.timeout(timeout):
                await self._admit(deadline)
                await self._slots.acquire()
                acquired = True
                # The worker may have crashed while this request waited for the slot:
                # then wait for the restart (within the same deadline), don't fail.
                while self.state is not WorkerState.READY:
                    await self._admit(deadline)
                admitted = True
        except TimeoutError:
            if (
                self.placement is not None
                and not self.reserved
                and self.state
                in (
                    WorkerState.STOPPED,
                    WorkerState.FAILED,
                )
            ):
                raise self.placement.blocked(self) from None
            raise ModelUnavailable(
                f"model '{self.name}': the request waited {timeout:g} s (queue_timeout) "
                f"for {'a free slot' if self.state is WorkerState.READY else 'the model to load'}",
                code="queue_timeout",
            ) from None
        except asyncio.CancelledError:
            if (
                self.config.on_demand
                and self.waiting == 1
                and self.inflight == 0
                and self.state is WorkerState.STARTING
            ):
                background(self.stop("the only client waiting for the load left", if_idle=True))
            raise
        finally:
            self.waiting -= 1
            if not admitted:
                if acquired:
                    self._slots.release()
                self._changed()
        self.inflight += 1
        try:
            yield Session(self)
        finally:
            self.inflight -= 1
            self._slots.release()
            self.last_used = time.monotonic()
            self.last_used_wall = time.time()
            self._changed()
            if self.idle and lifetime(self) == 0:  # a client's keep_alive 0
                background(self.stop("keep_alive 0: unloaded after its request", if_idle=True))

    async def _admit(self, deadline: float) -> None:
        """Wait out a drain, reserve room in the memory budget, start, await Ready."""
        if self.draining:
            self.held_back += 1
            try:
                while self.draining:
                    await self._state_changed.wait()
            finally:
                self.held_back -= 1
        if self.state is WorkerState.FAILED and (wait := self._backoff_left()) > 0:
            # Refused before the placement: a start that cannot happen claims no
            # room and evicts nobody (a reservation would hold the group).
            raise self._unavailable(f" (next attempt in {wait:.0f} s)")
        if self.placement is not None and self.state in (WorkerState.STOPPED, WorkerState.FAILED):
            await self.placement.make_room(self, deadline)
        await self.ensure_ready()

    async def load(self) -> None:
        """Admin: start the model now (through the memory budget), clearing a
        failure backoff."""
        self.failures = 0
        self._recent_crashes.clear()
        timeout = self.config.effective_queue_timeout(self._server)
        try:
            async with asyncio.timeout(timeout):
                await self._admit(time.monotonic() + timeout)
        except TimeoutError:
            if self.placement is not None and self.state in (
                WorkerState.STOPPED,
                WorkerState.FAILED,
            ):
                raise self.placement.blocked(self) from None  # 503 naming the busy models
            raise ModelUnavailable(
                f"model '{self.name}' did not load within its queue_timeout ({timeout:g} s)",
                code="queue_timeout",
            ) from None

    @property
    def idle(self) -> bool:
        """Nothing in flight and nobody waiting for it (drain-held requests aside)."""
        return self.inflight == 0 and self.waiting == self.held_back

    def idle_for(self, now: float) -> float:
        """Seconds since the last request finished (or since the worker became ready)."""
        return now - self.last_used if self.last_used is not None else 0.0


class Session:
    """One request's access to a READY worker (see :meth:`WorkerHandle.session`)."""

    def __init__(self, handle: Admission) -> None:
        self._handle = handle

    def generate(self, msg: Generate) -> ReplyStream:
        """Send ``msg`` and yield the worker's Started and Chunks, ending with Done.

        Raises a :class:`GatewayError` for the worker's Error (its status) or its
        death (:class:`WorkerCrashed`). Leaving early sends ``Cancel``."""
        return self.call(msg, msg.request_id)

    def call(self, msg: Any, request_id: str, payloads: Sequence[Frame] = ()) -> ReplyStream:
        """Send any request message (with binary ``payloads``) and yield its replies up
        to and including ``Done``; a reply that came with frames is yielded as
        :class:`~.relay.WithPayloads`. Errors and leaving early as for :meth:`generate`.
        Nothing is sent before the first iteration."""
        handle = self._handle

        def opener() -> str:
            proc = handle._proc
            if handle.state is not WorkerState.READY or proc is None:
                raise WorkerCrashed(
                    f"model '{handle.name}' worker {handle.last_error or 'is gone'}"
                )
            return proc.worker_id

        return ReplyStream(handle._relay, opener, msg, request_id, payloads, handle.name)
