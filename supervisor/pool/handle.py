"""WorkerHandle: one model's worker process, owned by one asyncio task.

Callers never touch the process or the state directly: they post commands
(:meth:`WorkerHandle.ensure_ready`, :meth:`WorkerHandle.stop`) and the owner task
applies them one at a time, together with the events the process produces (its
``Ready``/``Error`` messages, its exit, the start timeout). Concurrent
``ensure_ready`` calls therefore await the same start, and a call made while the
worker stops waits for the stop and then starts it again.

Requests reach the worker through :class:`~.admission.Admission` (slots, queue,
memory budget); the owner task's inbox items are in :mod:`.owner_events`; what the
handle reports of itself is a :class:`~.status.ModelStatus`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
import uuid
from collections.abc import Callable

import msgspec

from mlx_gateway.protocol.messages import (
    Assign,
    Error,
    Heartbeat,
    Memory,
    ModelFacts,
    Progress,
    Ready,
    Reply,
    Request,
    Shutdown,
    StepProgress,
)
from mlx_gateway.protocol.spec import SPAWNED_AT_ENV, WorkerSpec
from mlx_gateway.supervisor.config import ModelConfig, ServerConfig
from mlx_gateway.supervisor.errors import (
    GatewayError,
    ModelUnavailable,
    WorkerCrashed,
)
from mlx_gateway.supervisor.pool.adapters import AdapterSet
from mlx_gateway.supervisor.pool.admission import Admission
from mlx_gateway.supervisor.pool.auto_context import context_at_start
from mlx_gateway.supervisor.pool.memory import KV_KINDS, Need, local_ranks, measured_need
from mlx_gateway.supervisor.pool.needs import learns_from
from mlx_gateway.supervisor.pool.owner_events import (
    EnsureReady,
    Exited,
    FromWorker,
    Kill,
    OwnerEvent,
    StartTimeout,
    StopCommand,
    WorkerProcess,
    background,
    exit_reason,
    fail,
    resolve,
    signal_group,
)
from mlx_gateway.supervisor.pool.relay import Relay, WorkerUnreachable
from mlx_gateway.supervisor.pool.room import Room
from mlx_gateway.supervisor.pool.spares import SpareKey, SparePool, spare_key
from mlx_gateway.supervisor.pool.spawn import (
    WorkerCommand,
    start_process,
)
from mlx_gateway.supervisor.pool.stall import step_now
from mlx_gateway.supervisor.pool.state import WorkerState, check_transition, failure_backoff
from mlx_gateway.supervisor.pool.status import LoadProgress, ModelStatus, facts_fields
from mlx_gateway.supervisor.pool.worker_spec import (
    default_command,
    spec_for,
    start_options,
    worker_environment,
)

log = logging.getLogger("mlx_gateway.worker")

STDERR_LINES_KEPT = 40
KILL_WAIT = 3.0  # seconds between SIGTERM and SIGKILL
CRASH_LOOP = 3  # crashes of a ready worker within CRASH_WINDOW that make it FAILED
CRASH_WINDOW = 60.0


class WorkerHandle(Admission):
    """The gateway's side of one model: state, process, in-flight accounting."""

    def __init__(
        self,
        config: ModelConfig,
        server: ServerConfig,
        relay: Relay,
        *,
        command: WorkerCommand | None = None,
        env: dict[str, str] | None = None,
        on_state: Callable[[WorkerHandle, WorkerState, WorkerState], None] | None = None,
    ) -> None:
        self.config = config
        self.name = config.served_model_name
        self._server = server
        self._relay = relay
        self._command = command or default_command(config)
        self._env = env or {}
        self._on_state = on_state
        self.state = WorkerState.STOPPED
        self.inflight = 0
        self.last_used: float | None = None  # time.monotonic() of the last request's end
        self.last_used_wall: float | None = None
        self.facts: ModelFacts | None = None
        self.memory: Memory | None = None
        self.progress: Progress | None = None
        self.last_error: str | None = None
        self.failures = 0
        self.adapters = AdapterSet(config)
        """The LoRA adapters it serves (language models); its worker gets them at start."""
        self.placement: Room | None = None  # set by the registry
        self.spares: SparePool | None = None  # set by the registry (server.spare_workers)
        self._pinned: bool | None = None  # set at run time by an admin
        self.closing = False  # the gateway shuts down: no new request, no new start
        self.ready_since: float | None = None
        self.last_heartbeat = 0.0
        self.step: StepProgress | None = None  # as of the last heartbeat (see .stall)
        self.stalls: dict[str, int] = {}  # workers killed for a stuck step, by its kind
        self.prefill_tps: float | None = None
        """The prefill speed its workers last measured (tokens per second; kept
        across restarts of its worker: the same model on the same machine)."""
        self.measured_bytes = 0  # the most its workers reported (kept after a stop)
        self._slots = asyncio.Semaphore(config.max_concurrency)
        self._state_changed = asyncio.Event()
        self._recent_crashes: list[float] = []
        self.crashes = 0  # exits we did not ask for, since the gateway started
        self.evictions = 0  # stops to make room for another model
        self.waiting = 0  # requests waiting in the gateway for a slot or the load
        self.held_back = 0  # of those, the ones held back by a drain (they pin nothing)
        self._failed_at = 0.0
        self._generation = 0
        self._proc: WorkerProcess | None = None
        self._ready_waiters: list[asyncio.Future[None]] = []
        self._stop_waiters: list[asyncio.Future[None]] = []
        self._inbox: asyncio.Queue[OwnerEvent] = asyncio.Queue()
        self._owner: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ public surface

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

    @property
    def pid(self) -> int | None:
        return self._proc.proc.pid if self._proc else None

    def status(self) -> ModelStatus:
        """What /v1/models and /health show of this model."""
        memory = self.memory if self.state is WorkerState.READY else None
        progress = None
        if self.state is WorkerState.STARTING and self.progress is not None:
            progress = LoadProgress(
                self.progress.stage, self.progress.fraction, self.progress.detail
            )
        need = self._need()
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

    def _need(self) -> Need:
        if self.placement is not None:
            return self.placement.need(self)
        if self.measured_bytes:
            return Need(self.measured_bytes, "measured")
        return Need(0, "unknown")

    def post(self, msg: Request) -> None:
        """Send a control message to the running worker, without waiting (dropped
        when none runs)."""
        if self._proc is not None and self.state is WorkerState.READY:
            self._relay.post(self._proc.worker_id, msg)

    @property
    def pinned(self) -> bool:
        """Never evicted: the config's ``pinned``, or what an admin set at run time."""
        return self.config.pinned if self._pinned is None else self._pinned

    def pin(self, pinned: bool) -> None:
        """Pin or unpin at run time (``POST /v1/models/{id}/pin``), until the gateway
        restarts or a config reload replaces this entry."""
        self._pinned = pinned
        log.info("[%s] %s by an admin request", self.name, "pinned" if pinned else "unpinned")
        if self.placement is not None:
            self.placement.notify()  # a model waiting for room may now evict this one

    @property
    def reserved(self) -> bool:
        """The placement granted it room; it is about to start."""
        return self.placement is not None and self.placement.is_reserved(self)

    @property
    def draining(self) -> bool:
        """It takes no new requests until stopped: another model waits for room."""
        return self.placement is not None and self.placement.is_draining(self)

    def _release_room(self) -> None:
        """Its reservation and drain end (it stopped, or will not start now)."""
        if self.placement is not None:
            self.placement.released(self)

    def _measured(self, memory: Memory) -> None:
        # rank 0 of a sharded model measures itself: its peers on this machine hold as much
        need = measured_need(memory) * local_ranks(self.config)
        if need <= 0:
            return
        if self.placement is not None:
            need = self.placement.measured(self, need)
        self.measured_bytes = max(self.measured_bytes, need)

    def _changed(self) -> None:
        if self.placement is not None:
            self.placement.notify()

    async def kill(self, reason: str) -> None:
        """SIGKILL the worker now (it hung); its requests fail with ``reason``."""
        self._inbox.put_nowait(Kill(reason))

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
            case FromWorker(generation, reply) if self._is_current(generation):
                self._on_reply(reply)
            case Exited(generation, returncode) if self._is_current(generation):
                await self._on_exit(returncode)
            case Kill(reason) if self._proc is not None and self.state in (
                WorkerState.READY,
                WorkerState.STARTING,
            ):
                log.error("[%s] killing worker pid %d: %s", self.name, self._proc.proc.pid, reason)
                self._proc.kill_reason = reason
                signal_group(self._proc.proc.pid, signal.SIGKILL)
            case StartTimeout(generation) if self._is_current(generation):
                if self.state is WorkerState.STARTING:
                    assert self._proc is not None
                    timeout = self._start_timeout()
                    self._proc.load_error = (
                        f"the worker sent no Ready within {timeout:g} s (start_timeout)"
                    )
                    self._terminate(self._proc)
            case _:
                pass  # an event from a previous generation of the process

    def _is_current(self, generation: int) -> bool:
        return self._proc is not None and self._proc.generation == generation

    def _set_state(self, new: WorkerState) -> None:
        old = self.state
        check_transition(old, new)
        self.state = new
        log.info("[%s] %s → %s", self.name, old.public, new.public)
        if new is WorkerState.READY:
            self.ready_since = self.last_heartbeat = time.monotonic()
        elif new in (WorkerState.STOPPED, WorkerState.FAILED):
            self._release_room()
            self.ready_since = None
        self._state_changed.set()
        self._state_changed = asyncio.Event()
        self._changed()
        if self._on_state is not None:
            self._on_state(self, old, new)

    async def _on_ensure_ready(self, future: asyncio.Future[None]) -> None:
        if self.closing:  # no start (nor restart after a stop) while the gateway stops
            if self.reserved and self.state in (WorkerState.STOPPED, WorkerState.FAILED):
                self._release_room()
                self._changed()
            fail(future, self._closing_error())
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
                wait = self._backoff_left()
                if wait > 0:
                    if self.reserved:  # the room granted for this start is not used
                        self._release_room()
                        self._changed()
                    fail(future, self._unavailable(f" (next attempt in {wait:.0f} s)"))
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
                assert self._proc is not None
                log.info("[%s] stopping: %s", self.name, reason)
                self._stop_waiters.append(future)
                self._fail_ready_waiters(
                    ModelUnavailable(
                        f"model '{self.name}' was stopped while loading: {reason}",
                        code="model_stopped",
                    )
                )
                self._set_state(WorkerState.STOPPING)
                self._proc.stop_requested = True
                self._proc.stop_reason = reason
                self._proc.stop_error = ModelUnavailable(
                    f"model '{self.name}' was stopped before the request finished: {reason}",
                    code="model_stopped",
                )
                self._relay.stopping(self._proc.worker_id, self._proc.stop_error)
                self._proc.tasks.append(asyncio.create_task(self._escalate_stop(self._proc)))

    def _on_reply(self, reply: Reply) -> None:
        assert self._proc is not None
        match reply:
            case Ready(facts=facts, memory=memory):
                if self.state is WorkerState.STARTING:
                    self.facts, self.memory, self.progress, self.step = facts, memory, None, None
                    self._measured(memory)
                    self.failures, self.last_error = 0, None
                    self.last_used, self.last_used_wall = time.monotonic(), time.time()
                    self._set_state(WorkerState.READY)
                    for waiter in self._ready_waiters:
                        resolve(waiter)
                    self._ready_waiters.clear()
            case Progress():
                self.progress = reply
            case Heartbeat(memory=memory, step=step, prefill_tps=prefill_tps):
                self.memory, self.step, self.last_heartbeat = memory, step, time.monotonic()
                if prefill_tps > 0:
                    self.prefill_tps = prefill_tps
                if self.state is WorkerState.READY and learns_from(reply, self._proc):
                    self._measured(memory)
            case Error(message=message):
                # A worker-level error: the model could not load; the exit follows.
                self._proc.load_error = message
                log.error("[%s] %s", self.name, message)

    async def _on_exit(self, returncode: int) -> None:
        assert self._proc is not None
        proc, self._proc = self._proc, None
        for task in proc.tasks:
            task.cancel()
        expected = proc.stop_requested
        reason = exit_reason(proc, returncode)
        crash = WorkerCrashed(f"model '{self.name}' worker {reason}")
        self._relay.detach(
            proc.worker_id, proc.stop_error if expected and proc.stop_error else crash
        )
        if expected:
            log.info("[%s] worker pid %d stopped (%s)", self.name, proc.proc.pid, reason)
            self._set_state(WorkerState.STOPPED)
            for waiter in self._stop_waiters:
                resolve(waiter)
            self._stop_waiters.clear()
            if self._ready_waiters:  # someone asked for the model while it stopped
                await self._spawn()
            return
        self.last_error = reason
        self.crashes += 1
        log.error("[%s] worker pid %d %s", self.name, proc.proc.pid, reason)
        if self.state is WorkerState.STARTING:
            self.failures += 1
            self._failed_at = time.monotonic()
            self._set_state(WorkerState.FAILED)
            self._fail_ready_waiters(self._unavailable())
        else:  # READY: a crash; the next request starts it again, unless it crash-loops
            now = time.monotonic()
            self._recent_crashes = [t for t in self._recent_crashes if now - t < CRASH_WINDOW]
            self._recent_crashes.append(now)
            if len(self._recent_crashes) >= CRASH_LOOP:
                self.failures += 1
                self._failed_at = now
                self.last_error = (
                    f"crash loop: {len(self._recent_crashes)} crashes within "
                    f"{CRASH_WINDOW:g} s; last: {reason}"
                )
                self._set_state(WorkerState.FAILED)
            else:
                self._set_state(WorkerState.STOPPED)

    def _closing_error(self) -> ModelUnavailable:
        return ModelUnavailable(
            f"model '{self.name}' cannot take requests: the gateway is shutting down",
            code="shutting_down",
        )

    def _backoff_left(self) -> float:
        """Seconds until a FAILED worker may be tried again (≤ 0: now)."""
        return self._failed_at + failure_backoff(self.failures) - time.monotonic()

    def _unavailable(self, suffix: str = "") -> ModelUnavailable:
        return ModelUnavailable(
            f"model '{self.name}' is unavailable: {self.last_error or 'unknown error'}{suffix}",
            code="model_load_failed",
        )

    def _fail_ready_waiters(self, exc: GatewayError) -> None:
        for waiter in self._ready_waiters:
            fail(waiter, exc)
        self._ready_waiters.clear()

    def _start_timeout(self) -> float:
        return self.config.start_timeout or self._server.start_timeout

    # ------------------------------------------------------------ process

    async def _spawn(self) -> None:
        self._generation += 1
        generation = self._generation
        worker_id = f"{self.name[:180]}#{generation}-{uuid.uuid4().hex[:6]}"
        beat = min(2.0, self._server.hang_timeout / 4)
        spec = spec_for(self.config, worker_id, heartbeat_interval=beat)
        kv_budget = None
        if self.placement is not None and self.config.worker_kind in KV_KINDS:
            kv_budget = self.placement.kv_budget(self)
        spec.options.update(start_options(self.config, self._server, kv_budget, self.adapters))
        if self.config.context_length == "auto":
            spec.context_length = context_at_start(self.config, self.name, kv_budget)
        argv = list(self._command(spec, self._relay.endpoint))
        env = worker_environment(self.config, self._server, self._env)
        self._set_state(WorkerState.STARTING)
        self.progress = None

        def on_reply(reply: Reply, _payloads: list[bytes]) -> None:
            self._inbox.put_nowait(FromWorker(generation, reply))

        key = spare_key(spec.kind, argv, env)
        proc = await self._take_spare(key, spec, on_reply)
        if proc is not None:
            worker_id = spec.worker_id
        else:
            self._relay.attach(worker_id, on_reply)
            try:
                proc = await start_process(argv, {**env, SPAWNED_AT_ENV: f"{time.time():.6f}"})
            except OSError as exc:
                self._relay.detach(worker_id, WorkerCrashed(str(exc)))
                self.last_error = f"could not start the worker ({argv[0]}): {exc}"
                self.failures += 1
                self._failed_at = time.monotonic()
                self._set_state(WorkerState.FAILED)
                self._fail_ready_waiters(self._unavailable())
                return
            log.info("[%s] started worker pid %d (%s)", self.name, proc.pid, self.config.model_path)
        self._proc = handle = WorkerProcess(generation, worker_id, proc)
        handle.tasks += [
            asyncio.create_task(self._pump_output(handle)),
            asyncio.create_task(self._start_timer(generation)),
        ]
        # Not in handle.tasks: _on_exit cancels those, and this one posts _on_exit.
        background(self._watch_exit(handle))
        if (spares := self._spare_pool) is not None:  # the next start of this kind finds one
            spare = spares.spec(spec.kind, beat)
            command = list(self._command(spare, self._relay.endpoint))
            background(spares.want(key, spare, command, env))

    @property
    def _spare_pool(self) -> SparePool | None:
        """The spares this model may use: none for a distributed model (its worker
        is a group of processes started by a launcher)."""
        return self.spares if self.config.distributed is None else None

    async def _take_spare(
        self, key: SpareKey, spec: WorkerSpec, on_reply: Callable[[Reply, list[bytes]], None]
    ) -> asyncio.subprocess.Process | None:
        """Hand ``spec`` to a ready spare worker of ``key`` (``spec.worker_id`` becomes
        the spare's); its process, or ``None`` when there is no spare (or it is gone)."""
        if (spares := self._spare_pool) is None or (spare := spares.take(key)) is None:
            return None
        self._relay.attach(spare.worker_id, on_reply)
        try:
            await self._relay.send(spare.worker_id, Assign(spec=spec))
        except WorkerUnreachable:
            self._relay.detach(spare.worker_id, WorkerCrashed("the spare worker is gone"))
            signal_group(spare.proc.pid, signal.SIGKILL)
            log.warning("[%s] the spare worker was gone; starting a new worker", self.name)
            return None
        spec.worker_id = spare.worker_id
        log.info(
            "[%s] loading in spare worker pid %d (%s)",
            self.name,
            spare.proc.pid,
            self.config.model_path,
        )
        return spare.proc

    async def _pump_output(self, handle: WorkerProcess) -> None:
        assert handle.proc.stdout is not None
        prefix = f"[{self.name}]"
        worker_log = logging.getLogger("mlx_gateway.worker.output")
        while line := await handle.proc.stdout.readline():
            text = line.decode(errors="replace").rstrip()
            handle.stderr.append(text)
            worker_log.info("%s %s", prefix, text)

    async def _watch_exit(self, handle: WorkerProcess) -> None:
        returncode = await handle.proc.wait()
        self._inbox.put_nowait(Exited(handle.generation, returncode))

    async def _start_timer(self, generation: int) -> None:
        await asyncio.sleep(self._start_timeout())
        self._inbox.put_nowait(StartTimeout(generation))

    async def _escalate_stop(self, handle: WorkerProcess) -> None:
        grace = self._server.shutdown_grace
        with contextlib.suppress(WorkerUnreachable):
            await self._relay.send(handle.worker_id, Shutdown(grace=grace))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(handle.proc.wait()), grace + 1.0)
            return
        log.warning("[%s] no exit after Shutdown; sending SIGTERM", self.name)
        self._terminate(handle)

    def _terminate(self, handle: WorkerProcess) -> None:
        signal_group(handle.proc.pid, signal.SIGTERM)

        async def kill_later() -> None:
            await asyncio.sleep(KILL_WAIT)
            if handle.proc.returncode is None:
                log.warning("[%s] no exit after SIGTERM; sending SIGKILL", self.name)
                signal_group(handle.proc.pid, signal.SIGKILL)

        background(kill_later())
