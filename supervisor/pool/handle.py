"""WorkerHandle: one model's worker process, owned by one asyncio task.

Callers never touch the process or the state directly: they post commands
(:meth:`WorkerHandle.ensure_ready`, :meth:`WorkerHandle.stop`) and the owner task
applies them one at a time, together with the events the process produces (its
``Ready``/``Error`` messages, its exit, the start timeout). Concurrent
``ensure_ready`` calls therefore await the same start, and a call made while the
worker stops waits for the stop and then starts it again.

The handle is composed of parts that own their state, each with its own module:

* :class:`~.lifecycle.Lifecycle`: the state and its changes;
* :class:`~.process.Process`: the worker process, generation after generation, and
  the relay to it;
* :class:`~.admission.Admission`: slots, queue, drain; the sessions of requests;
* :class:`~.seat.Seat`: its place in the memory budget (the registry's placement);
* :class:`~.failures.Failures`: errors, crashes, the failure backoff.

The owner task's inbox items are in :mod:`.owner_events`; what the handle reports of
itself is a :class:`~.status.ModelStatus`. Its public properties are the one view
the rest of the gateway has of a model (the registry, the placement, the reaper,
/metrics); they read the parts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import msgspec

from mlx_gateway.protocol.messages import (
    INTERACTIVE,
    Error,
    Heartbeat,
    Memory,
    ModelFacts,
    Priority,
    Progress,
    Ready,
    Reply,
    Request,
    StepProgress,
)
from mlx_gateway.supervisor.config import ModelConfig, ServerConfig
from mlx_gateway.supervisor.errors import GatewayError, ModelUnavailable, WorkerCrashed
from mlx_gateway.supervisor.pool.adapters import AdapterSet
from mlx_gateway.supervisor.pool.admission import Admission, Session
from mlx_gateway.supervisor.pool.failures import Failures
from mlx_gateway.supervisor.pool.lifecycle import Lifecycle
from mlx_gateway.supervisor.pool.memory import KV_KINDS
from mlx_gateway.supervisor.pool.needs import learns_from
from mlx_gateway.supervisor.pool.owner_events import (
    EnsureReady,
    Exited,
    FromWorker,
    Kill,
    OwnerEvent,
    StartTimeout,
    StopCommand,
    fail,
    resolve,
)
from mlx_gateway.supervisor.pool.process import Process, StartFailed
from mlx_gateway.supervisor.pool.relay import Relay
from mlx_gateway.supervisor.pool.room import Room
from mlx_gateway.supervisor.pool.seat import Seat
from mlx_gateway.supervisor.pool.spares import SparePool
from mlx_gateway.supervisor.pool.spawn import WorkerCommand
from mlx_gateway.supervisor.pool.stall import step_now
from mlx_gateway.supervisor.pool.state import WorkerState
from mlx_gateway.supervisor.pool.status import LoadProgress, ModelStatus, facts_fields

log = logging.getLogger("mlx_gateway.worker")

StateListener = Callable[["WorkerHandle", WorkerState, WorkerState], None]


class WorkerHandle:
    """The gateway's side of one model: its parts, its owner task, what its worker
    reported."""

    def __init__(
        self,
        config: ModelConfig,
        server: ServerConfig,
        relay: Relay,
        *,
        command: WorkerCommand | None = None,
        env: dict[str, str] | None = None,
        on_state: StateListener | None = None,
    ) -> None:
        self.config = config
        self.name = config.served_model_name
        self.on_state = on_state
        """Called after each change of state (tests watch the placement with it)."""
        self._inbox: asyncio.Queue[OwnerEvent] = asyncio.Queue()
        self.lifecycle = Lifecycle(self.name)
        self.faults = Failures(self.name)
        self.seat = Seat(self, config)
        self.process = Process(
            config, server, relay, self._inbox.put_nowait, command=command, env=env
        )
        self.admission = Admission(
            self,
            config,
            server,
            control=self,
            lifecycle=self.lifecycle,
            failures=self.faults,
            seat=self.seat,
            relay=relay,
            open_worker=self._open_worker,
        )
        # What the worker reported (kept while it runs; facts until the next Ready).
        self.facts: ModelFacts | None = None
        self.memory: Memory | None = None
        self.progress: Progress | None = None
        self.last_heartbeat = 0.0
        self.step: StepProgress | None = None  # as of the last heartbeat (see .stall)
        self.stalls: dict[str, int] = {}  # workers killed for a stuck step, by its kind
        self.prefill_tps: float | None = None
        """The prefill speed its workers last measured (tokens per second; kept
        across restarts of its worker: the same model on the same machine)."""
        self.evictions = 0  # stops to make room for another model
        self.adapters = AdapterSet(config)
        """The LoRA adapters it serves (language models); its worker gets them at start."""
        self._pinned: bool | None = None  # set at run time by an admin
        self._ready_waiters: list[asyncio.Future[None]] = []
        self._stop_waiters: list[asyncio.Future[None]] = []
        self._owner: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ commands

    def start_owner(self) -> None:
        if self._owner is None:
            self._owner = asyncio.create_task(self._run(), name=f"worker-owner:{self.name}")

    async def ensure_ready(self) -> None:
        """Start the worker if needed and wait for its ``Ready``.

        Raises :class:`ModelUnavailable` with the reason when it cannot load."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._inbox.put_nowait(EnsureReady(future))
        await future

    async def stop(self, reason: str = "requested", *, if_idle: bool = False) -> None:
        """Stop the worker (Shutdown → SIGTERM → SIGKILL) and wait until it exited.

        With ``if_idle`` the stop is skipped when a request arrived meanwhile: the
        owner re-checks ``inflight`` when it applies the command."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._inbox.put_nowait(StopCommand(future, reason, if_idle))
        await future

    async def kill(self, reason: str) -> None:
        """SIGKILL the worker now (it hung); its requests fail with ``reason``."""
        self._inbox.put_nowait(Kill(reason))

    async def close(self, reason: str = "gateway shutting down") -> None:
        """Stop the worker (``reason`` is logged) and end the owner task."""
        if self._owner is None:
            return
        await self.stop(reason)
        if self._owner is not None:
            self._owner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._owner
            self._owner = None

    def session(self, priority: Priority = INTERACTIVE) -> AbstractAsyncContextManager[Session]:
        """Hold the worker for one request (see :meth:`.admission.Admission.session`)."""
        return self.admission.session(priority)

    async def load(self) -> None:
        """Admin: start the model now, clearing a failure backoff."""
        await self.admission.load()

    def post(self, msg: Request) -> None:
        """Send a control message to the running worker, without waiting (dropped
        when none runs)."""
        if self.lifecycle.ready:
            self.process.post(msg)

    def pin(self, pinned: bool) -> None:
        """Pin or unpin at run time (``POST /v1/models/{id}/pin``), until the gateway
        restarts or a config reload replaces this entry."""
        self._pinned = pinned
        log.info("[%s] %s by an admin request", self.name, "pinned" if pinned else "unpinned")
        self.seat.notify()  # a model waiting for room may now evict this one

    def _open_worker(self) -> str:
        """The ready worker a request's session sends to."""
        worker_id = self.process.worker_id
        if not self.lifecycle.ready or worker_id is None:
            error = self.faults.last_error or "is gone"
            raise WorkerCrashed(f"model '{self.name}' worker {error}")
        return worker_id

    # ------------------------------------------------------------ what it is

    @property
    def state(self) -> WorkerState:
        return self.lifecycle.state

    @property
    def ready_since(self) -> float | None:
        return self.lifecycle.ready_since

    @property
    def inflight(self) -> int:
        return self.admission.inflight

    @property
    def waiting(self) -> int:
        return self.admission.waiting

    @property
    def idle(self) -> bool:
        """Nothing in flight and nobody waiting for it (drain-held requests aside)."""
        return self.admission.idle

    def idle_for(self, now: float) -> float:
        return self.admission.idle_for(now)

    @property
    def last_used(self) -> float | None:
        return self.admission.last_used

    @property
    def last_used_wall(self) -> float | None:
        return self.admission.last_used_wall

    @property
    def closing(self) -> bool:
        return self.admission.closing

    def begin_closing(
        self, reason: str = "the gateway is shutting down", code: str = "shutting_down"
    ) -> None:
        """The gateway shuts down, or a reload retired this handle: no new request,
        no new start (each refused with ``reason``)."""
        if not self.admission.closing:
            self.admission.closing = True
            self.admission.closing_reason, self.admission.closing_code = reason, code

    @property
    def last_error(self) -> str | None:
        return self.faults.last_error

    @property
    def failures(self) -> int:
        return self.faults.count

    @property
    def crashes(self) -> int:
        return self.faults.crashes

    @property
    def pid(self) -> int | None:
        return self.process.pid

    @property
    def pinned(self) -> bool:
        """Never evicted: the config's ``pinned``, or what an admin set at run time."""
        return self.config.pinned if self._pinned is None else self._pinned

    @property
    def placement(self) -> Room | None:
        return self.seat.room

    @placement.setter
    def placement(self, room: Room | None) -> None:
        self.seat.room = room

    @property
    def spares(self) -> SparePool | None:
        return self.process.spares

    @spares.setter
    def spares(self, spares: SparePool | None) -> None:
        self.process.spares = spares

    @property
    def measured_bytes(self) -> int:
        return self.seat.measured_bytes

    @property
    def reserved(self) -> bool:
        return self.seat.reserved

    @property
    def draining(self) -> bool:
        return self.seat.draining

    def status(self) -> ModelStatus:
        """What /v1/models and /health show of this model."""
        memory = self.memory if self.state is WorkerState.READY else None
        progress = None
        if self.state is WorkerState.STARTING and self.progress is not None:
            progress = LoadProgress(
                self.progress.stage, self.progress.fraction, self.progress.detail
            )
        need = self.seat.need()
        extra = self.facts.extra if self.facts else {}
        return ModelStatus(
            state=self.state.public,
            pid=self.pid if self.state is not WorkerState.FAILED else None,
            inflight=self.inflight,
            waiting=self.waiting,
            last_used=self.last_used_wall,
            error=self.last_error,
            context_length=self.facts.context_length if self.facts else None,
            memory=memory.rss if memory else None,
            memory_detail=msgspec.structs.asdict(memory) if memory else None,
            memory_need=need.bytes or None,
            memory_need_source=need.source,
            memory_need_parts=need.parts or None,
            load_progress=progress,
            pinned=self.pinned,
            draining=self.draining,
            step=step_now(self.step, self.last_heartbeat) if memory else None,
            crashes=self.crashes,
            stalls=sum(self.stalls.values()),
            evictions=self.evictions,
            prefill_tps=self.prefill_tps,
            **facts_fields(extra),
        )

    # ------------------------------------------------------------ owner task

    async def _run(self) -> None:
        while True:
            event = await self._inbox.get()
            try:
                await self._handle(event)
            except Exception:  # the owner must survive anything; log and go on
                log.exception("[%s] error while handling %s", self.name, type(event).__name__)

    async def _handle(self, event: OwnerEvent) -> None:
        match event:
            case EnsureReady(future):
                await self._on_ensure_ready(future)
            case StopCommand(future, reason, if_idle):
                if if_idle and not self.idle:
                    resolve(future)
                else:
                    self._on_stop(future, reason)
            case FromWorker(generation, reply) if self.process.is_current(generation):
                self._on_reply(reply)
            case Exited(generation, returncode) if self.process.is_current(generation):
                await self._on_exit(returncode)
            case Kill(reason) if self.state in (WorkerState.READY, WorkerState.STARTING):
                self.process.kill(reason)
            case StartTimeout(generation) if self.process.is_current(generation):
                if self.state is WorkerState.STARTING:
                    self.process.timed_out()
            case _:
                pass  # an event from a previous generation of the process

    def _set_state(self, new: WorkerState) -> None:
        old = self.lifecycle.enter(new)
        if new is WorkerState.READY:
            self.last_heartbeat = time.monotonic()
        elif new in (WorkerState.STOPPED, WorkerState.FAILED):
            self.seat.release()
        self.seat.notify()
        if self.on_state is not None:
            self.on_state(self, old, new)

    async def _on_ensure_ready(self, future: asyncio.Future[None]) -> None:
        if self.closing:  # no start (nor restart after a stop) while the gateway stops
            if self.reserved and self.lifecycle.down:
                self.seat.release()
                self.seat.notify()
            fail(future, self.admission.closing_error())
            return
        match self.state:
            case WorkerState.READY:
                resolve(future)
            case WorkerState.STARTING | WorkerState.STOPPING:
                # While stopping: wait for the exit, then start again (see _on_exit).
                self._ready_waiters.append(future)
            case WorkerState.STOPPED:
                self._ready_waiters.append(future)
                await self._spawn()
            case WorkerState.FAILED:
                wait = self.faults.backoff_left()
                if wait > 0:
                    if self.reserved:  # the room granted for this start is not used
                        self.seat.release()
                        self.seat.notify()
                    fail(future, self.faults.unavailable(f" (next attempt in {wait:.0f} s)"))
                else:
                    self._ready_waiters.append(future)
                    await self._spawn()

    def _on_stop(self, future: asyncio.Future[None], reason: str) -> None:
        match self.state:
            case WorkerState.STOPPED | WorkerState.FAILED:
                resolve(future)
            case WorkerState.STOPPING:
                self._stop_waiters.append(future)
            case WorkerState.STARTING | WorkerState.READY:
                log.info("[%s] stopping: %s", self.name, reason)
                self._stop_waiters.append(future)
                self._fail_ready_waiters(
                    ModelUnavailable(
                        f"model '{self.name}' was stopped while loading: {reason}",
                        code="model_stopped",
                    )
                )
                self._set_state(WorkerState.STOPPING)
                self.process.stop(reason)

    def _on_reply(self, reply: Reply) -> None:
        match reply:
            case Ready(facts=facts, memory=memory):
                if self.state is WorkerState.STARTING:
                    self.facts, self.memory, self.progress, self.step = facts, memory, None, None
                    self.seat.measured(memory)
                    self.faults.recovered()
                    self.admission.used_now()
                    self._set_state(WorkerState.READY)
                    if self.admission.interactive is not None:  # held if it runs now
                        self.admission.interactive.joined(self)
                    for waiter in self._ready_waiters:
                        resolve(waiter)
                    self._ready_waiters.clear()
            case Progress():
                self.progress = reply
            case Heartbeat(memory=memory, step=step, prefill_tps=prefill_tps):
                self.memory, self.step, self.last_heartbeat = memory, step, time.monotonic()
                if prefill_tps > 0:
                    self.prefill_tps = prefill_tps
                if self.state is WorkerState.READY and learns_from(reply, self.process.current):
                    self.seat.measured(memory)
            case Error(message=message):
                # A worker-level error: the model could not load; the exit follows.
                self.process.load_failed(message)
                log.error("[%s] %s", self.name, message)

    async def _on_exit(self, returncode: int) -> None:
        record, reason = self.process.exited(returncode)
        if record.stop_requested:
            log.info("[%s] worker pid %d stopped (%s)", self.name, record.proc.pid, reason)
            self._set_state(WorkerState.STOPPED)
            for waiter in self._stop_waiters:
                resolve(waiter)
            self._stop_waiters.clear()
            if self._ready_waiters:  # someone asked for the model while it stopped
                await self._spawn()
            return
        self.faults.exited(reason)
        log.error("[%s] worker pid %d %s", self.name, record.proc.pid, reason)
        if self.state is WorkerState.STARTING:
            self.faults.failed()
            self._set_state(WorkerState.FAILED)
            self._fail_ready_waiters(self.faults.unavailable())
        elif self.faults.crash_loop(reason):  # READY: a crash loop
            self._set_state(WorkerState.FAILED)
        else:  # READY: a crash; the next request starts it again
            self._set_state(WorkerState.STOPPED)

    def _fail_ready_waiters(self, exc: GatewayError) -> None:
        for waiter in self._ready_waiters:
            fail(waiter, exc)
        self._ready_waiters.clear()

    async def _spawn(self) -> None:
        kv_budget = None
        if self.config.worker_kind in KV_KINDS:
            kv_budget = self.seat.kv_budget()
        start = self.process.prepare(kv_budget, self.adapters)
        self._set_state(WorkerState.STARTING)
        self.progress = None
        try:
            await self.process.launch(start)
        except StartFailed as exc:
            self.faults.failed(str(exc))
            self._set_state(WorkerState.FAILED)
            self._fail_ready_waiters(self.faults.unavailable())
