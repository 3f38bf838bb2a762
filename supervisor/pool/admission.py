"""The admission part of a model's handle: the slots (``max_concurrency``), the queue
(``max_queue``, ``queue_timeout``), a drain, the memory budget, the load; and the
:class:`Session` one admitted request uses to reach the worker.

:class:`Admission` counts the requests (in flight, waiting, held back by a drain)
and stamps the model's last use; it starts and stops nothing itself but asks the
handle's owner task through :class:`Control` (the handle), reads the state from the
:class:`~.lifecycle.Lifecycle`, the backoff from the :class:`~.failures.Failures` and
asks the :class:`~.seat.Seat` for room.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Protocol

from mlx_gateway.protocol.frames import Frame
from mlx_gateway.protocol.messages import INTERACTIVE, Generate, Priority
from mlx_gateway.supervisor.config import ModelConfig, ServerConfig
from mlx_gateway.supervisor.errors import ModelUnavailable, TooManyRequests
from mlx_gateway.supervisor.pool.calls import ReplyStream
from mlx_gateway.supervisor.pool.failures import Failures
from mlx_gateway.supervisor.pool.interactive import InteractiveWork
from mlx_gateway.supervisor.pool.keep_alive import lifetime, request_started
from mlx_gateway.supervisor.pool.lifecycle import Lifecycle
from mlx_gateway.supervisor.pool.owner_events import background
from mlx_gateway.supervisor.pool.relay import Relay
from mlx_gateway.supervisor.pool.seat import Seat
from mlx_gateway.supervisor.pool.slots import Slots
from mlx_gateway.supervisor.pool.state import WorkerState


class Control(Protocol):
    """The commands of a model's owner task that admission uses."""

    async def ensure_ready(self) -> None: ...

    async def stop(self, reason: str = "requested", *, if_idle: bool = False) -> None: ...


class Admission:
    """Admission of requests to one model (see module doc).

    ``model`` is the handle: a client's ``keep_alive`` is kept by it
    (:mod:`.keep_alive`); ``open_worker`` names the ready worker a session sends to."""

    def __init__(
        self,
        model: Any,
        config: ModelConfig,
        server: ServerConfig,
        *,
        control: Control,
        lifecycle: Lifecycle,
        failures: Failures,
        seat: Seat,
        relay: Relay,
        open_worker: Callable[[], str],
    ) -> None:
        self.name = config.served_model_name
        self._model = model
        self._config = config
        self._server = server
        self._control = control
        self._lifecycle = lifecycle
        self._failures = failures
        self._seat = seat
        self._relay = relay
        self._open_worker = open_worker
        self._slots = Slots(config.max_concurrency)
        self.interactive: InteractiveWork | None = None
        """The machine's interactive work (set by the registry): batch work elsewhere
        is held while an interactive session here runs."""
        self.inflight = 0
        self.waiting = 0  # requests waiting in the gateway for a slot or the load
        self.held_back = 0  # of those, the ones held back by a drain (they pin nothing)
        self.last_used: float | None = None  # time.monotonic() of the last request's end
        self.last_used_wall: float | None = None
        self.closing = False  # the gateway shuts down: no new request, no new start
        self.closing_reason, self.closing_code = "the gateway is shutting down", "shutting_down"

    def closing_error(self) -> ModelUnavailable:
        return ModelUnavailable(
            f"model '{self.name}' cannot take requests: {self.closing_reason}",
            code=self.closing_code,
        )

    def used_now(self) -> None:
        """Stamp the last use (a worker became ready: its idle time starts now)."""
        self.last_used, self.last_used_wall = time.monotonic(), time.time()

    @contextlib.asynccontextmanager
    async def session(self, priority: Priority = INTERACTIVE) -> AsyncIterator[Session]:
        """Hold the worker for one request of ``priority``.

        Admission: at most ``max_concurrency`` requests hold a slot (a freed slot
        goes to an interactive request before any ``batch`` one, :mod:`.slots`); up to
        ``max_queue`` more wait (for a slot, for room in the memory budget, for the
        load), each at most ``queue_timeout`` seconds (then 503); beyond that 429
        (requests waiting for a load count too: before the worker is ready, at most
        ``max_concurrency + max_queue`` are taken).
        While waiting or holding a slot the request keeps the worker from being
        reaped or evicted, and ``last_used`` is stamped when the request *ends* —
        streams included. A client that leaves while a load runs only for it
        stops that load."""
        if self.closing:
            raise self.closing_error()
        request_started(self._model)  # its keep_alive, or none, is the model's lifetime now
        config = self._config
        if self.inflight + self.waiting >= config.max_concurrency + config.max_queue:
            # Counted whatever they wait for (a slot, the load, room in the budget):
            # a burst at a model that is still loading is held to the same bound.
            raise TooManyRequests(self.name, config.max_concurrency, config.max_queue)
        timeout = config.effective_queue_timeout(self._server)
        self.waiting += 1
        acquired = admitted = False
        deadline = time.monotonic() + timeout
        try:
            async with asyncio.timeout(timeout):
                await self._admit(deadline)
                await self._slots.acquire(priority)
                acquired = True
                # The worker may have crashed while this request waited for the slot:
                # then wait for the restart (within the same deadline), don't fail.
                while not self._lifecycle.ready:
                    await self._admit(deadline)
                admitted = True
        except TimeoutError:
            free = self._lifecycle.down and not self._seat.reserved
            if free and (blocked := self._seat.blocked()) is not None:
                raise blocked from None  # 503 naming the busy models
            waited_for = "a free slot" if self._lifecycle.ready else "the model to load"
            raise ModelUnavailable(
                f"model '{self.name}': the request waited {timeout:g} s (queue_timeout) "
                f"for {waited_for}",
                code="queue_timeout",
            ) from None
        except asyncio.CancelledError:
            if (
                config.on_demand
                and self.waiting == 1
                and self.inflight == 0
                and self._lifecycle.state is WorkerState.STARTING
            ):
                stop = self._control.stop("the only client waiting for the load left", if_idle=True)
                background(stop)
            raise
        finally:
            self.waiting -= 1
            if not admitted:
                if acquired:
                    self._slots.release()
                self._seat.notify()
        self.inflight += 1
        interactive = self.interactive
        answered = False

        def first_answer() -> None:
            nonlocal answered
            if not answered:
                answered = True
                if interactive is not None:
                    interactive.answered(priority)

        if interactive is not None:
            interactive.enter(priority, self._model)
        try:
            yield Session(self.name, self._relay, self._open_worker, first_answer)
        finally:
            if interactive is not None:
                interactive.leave(priority, answered)
            self.inflight -= 1
            self._slots.release()
            self.used_now()
            self._seat.notify()
            if self.idle and lifetime(self._model) == 0:  # a client's keep_alive 0
                stop = self._control.stop("keep_alive 0: unloaded after its request", if_idle=True)
                background(stop)

    async def _admit(self, deadline: float) -> None:
        """Wait out a drain, reserve room in the memory budget, start, await Ready."""
        if self._seat.draining:
            self.held_back += 1
            try:
                while self._seat.draining:
                    await self._lifecycle.changed()
            finally:
                self.held_back -= 1
        if (
            self._lifecycle.state is WorkerState.FAILED
            and (wait := self._failures.backoff_left()) > 0
        ):
            # Refused before the placement: a start that cannot happen claims no
            # room and evicts nobody (a reservation would hold the group).
            raise self._failures.unavailable(f" (next attempt in {wait:.0f} s)")
        if self._lifecycle.down:
            await self._seat.make_room(deadline)
        await self._control.ensure_ready()

    async def load(self) -> None:
        """Admin: start the model now (through the memory budget), clearing a
        failure backoff."""
        self._failures.forgive()
        timeout = self._config.effective_queue_timeout(self._server)
        try:
            async with asyncio.timeout(timeout):
                await self._admit(time.monotonic() + timeout)
        except TimeoutError:
            if self._lifecycle.down and (blocked := self._seat.blocked()) is not None:
                raise blocked from None  # 503 naming the busy models
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
    """One request's access to a READY worker (see :meth:`Admission.session`)."""

    def __init__(
        self,
        name: str,
        relay: Relay,
        open_worker: Callable[[], str],
        first_answer: Callable[[], None] | None = None,
    ) -> None:
        self._name = name
        self._relay = relay
        self._open_worker = open_worker
        self._first_answer = first_answer
        """Told at the first answering reply of the session's calls (the first
        token of a stream: :class:`~.interactive.InteractiveWork` lets batch work
        go on from there)."""

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
        return ReplyStream(
            self._relay,
            self._open_worker,
            msg,
            request_id,
            payloads,
            self._name,
            self._first_answer,
        )
