"""The process part of a model's handle: its worker process and the relay to it.

One :class:`WorkerProcess` at a time, each a new *generation*: started fresh or
handed to a ready spare (:mod:`.spares`), its output kept and logged, its exit and
its start timeout posted to the owner task's inbox (tagged with the generation,
so a late event of an earlier process is ignored), and a stop escalated from
``Shutdown`` to SIGTERM to SIGKILL. The owner task (:mod:`.handle`) decides; this
part carries it out and owns the process record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from mlx_gateway.protocol.messages import Assign, Reply, Request, Shutdown
from mlx_gateway.protocol.spec import SPAWNED_AT_ENV, WorkerSpec
from mlx_gateway.supervisor.config import ModelConfig, ServerConfig
from mlx_gateway.supervisor.errors import GatewayError, ModelUnavailable, WorkerCrashed
from mlx_gateway.supervisor.pool.adapters import AdapterSet
from mlx_gateway.supervisor.pool.auto_context import context_at_start
from mlx_gateway.supervisor.pool.owner_events import (
    Exited,
    FromWorker,
    OwnerEvent,
    StartTimeout,
    WorkerProcess,
    background,
    exit_reason,
    signal_group,
)
from mlx_gateway.supervisor.pool.relay import Relay, WorkerUnreachable
from mlx_gateway.supervisor.pool.spares import SpareKey, SparePool, spare_key
from mlx_gateway.supervisor.pool.spawn import WorkerCommand, start_process
from mlx_gateway.supervisor.pool.worker_spec import (
    default_command,
    spec_for,
    start_options,
    worker_environment,
)

log = logging.getLogger("mlx_gateway.worker")

KILL_WAIT = 3.0  # seconds between SIGTERM and SIGKILL


class StartFailed(Exception):
    """The worker process could not be started (the message says why)."""


@dataclass
class Launch:
    """A start prepared by :meth:`Process.prepare`: what :meth:`Process.launch` runs."""

    generation: int
    spec: WorkerSpec
    argv: list[str]
    env: dict[str, str]
    key: SpareKey


class Process:
    """One model's worker process, generation after generation (see module doc).

    ``post`` puts an event in the owner task's inbox."""

    def __init__(
        self,
        config: ModelConfig,
        server: ServerConfig,
        relay: Relay,
        post: Callable[[OwnerEvent], None],
        *,
        command: WorkerCommand | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = config.served_model_name
        self.config = config
        self.relay = relay
        self.current: WorkerProcess | None = None
        self.generation = 0  # of the last process started
        self.spares: SparePool | None = None  # set by the registry (server.spare_workers)
        self._server = server
        self._post = post
        self._command = command or default_command(config)
        self._env = env or {}

    # ------------------------------------------------------------ what it is

    @property
    def pid(self) -> int | None:
        return self.current.proc.pid if self.current else None

    @property
    def worker_id(self) -> str | None:
        return self.current.worker_id if self.current else None

    def is_current(self, generation: int) -> bool:
        return self.current is not None and self.current.generation == generation

    def output(self) -> list[str]:
        """The last lines the running worker wrote."""
        return list(self.current.stderr) if self.current else []

    def start_timeout(self) -> float:
        return self.config.start_timeout or self._server.start_timeout

    # ------------------------------------------------------------ start

    def prepare(self, kv_budget: int | None, adapters: AdapterSet) -> Launch:
        """The next generation's spec, command line and environment."""
        self.generation += 1
        worker_id = f"{self.name[:180]}#{self.generation}-{uuid.uuid4().hex[:6]}"
        spec = spec_for(self.config, worker_id, heartbeat_interval=self._heartbeat())
        spec.options.update(start_options(self.config, self._server, kv_budget, adapters))
        if self.config.context_length == "auto":
            spec.context_length = context_at_start(self.config, self.name, kv_budget)
        argv = list(self._command(spec, self.relay.endpoint))
        env = worker_environment(self.config, self._server, self._env)
        return Launch(self.generation, spec, argv, env, spare_key(spec.kind, argv, env))

    def _heartbeat(self) -> float:
        return min(2.0, self._server.hang_timeout / 4)

    async def launch(self, start: Launch) -> None:
        """Start ``start``'s process (in a spare when one is ready); it becomes
        :attr:`current`. Raises :class:`StartFailed` when it cannot be started."""
        generation = start.generation

        def on_reply(reply: Reply, _payloads: list[bytes]) -> None:
            self._post(FromWorker(generation, reply))

        worker_id = start.spec.worker_id
        proc = await self._take_spare(start, on_reply)
        if proc is not None:
            worker_id = start.spec.worker_id
        else:
            self.relay.attach(worker_id, on_reply)
            try:
                env = {**start.env, SPAWNED_AT_ENV: f"{time.time():.6f}"}
                proc = await start_process(start.argv, env)
            except OSError as exc:
                self.relay.detach(worker_id, WorkerCrashed(str(exc)))
                raise StartFailed(f"could not start the worker ({start.argv[0]}): {exc}") from exc
            log.info("[%s] started worker pid %d (%s)", self.name, proc.pid, self.config.model_path)
        self.current = record = WorkerProcess(generation, worker_id, proc)
        record.tasks += [
            asyncio.create_task(self._pump_output(record)),
            asyncio.create_task(self._start_timer(generation)),
        ]
        # Not in record.tasks: exited() cancels those, and this one posts the exit.
        background(self._watch_exit(record))
        if (spares := self._spare_pool) is not None:  # the next start of this kind finds one
            spare = spares.spec(start.spec.kind, self._heartbeat())
            command = list(self._command(spare, self.relay.endpoint))
            background(spares.want(start.key, spare, command, start.env))

    @property
    def _spare_pool(self) -> SparePool | None:
        """The spares this model may use: none for a distributed model (its worker
        is a group of processes started by a launcher)."""
        return self.spares if self.config.distributed is None else None

    async def _take_spare(
        self, start: Launch, on_reply: Callable[[Reply, list[bytes]], None]
    ) -> asyncio.subprocess.Process | None:
        """Hand the spec to a ready spare worker of its key (``spec.worker_id`` becomes
        the spare's); its process, or ``None`` when there is no spare (or it is gone)."""
        if (spares := self._spare_pool) is None or (spare := spares.take(start.key)) is None:
            return None
        self.relay.attach(spare.worker_id, on_reply)
        try:
            await self.relay.send(spare.worker_id, Assign(spec=start.spec))
        except WorkerUnreachable:
            self.relay.detach(spare.worker_id, WorkerCrashed("the spare worker is gone"))
            signal_group(spare.proc.pid, signal.SIGKILL)
            log.warning("[%s] the spare worker was gone; starting a new worker", self.name)
            return None
        start.spec.worker_id = spare.worker_id
        log.info(
            "[%s] loading in spare worker pid %d (%s)",
            self.name,
            spare.proc.pid,
            self.config.model_path,
        )
        return spare.proc

    async def _pump_output(self, record: WorkerProcess) -> None:
        assert record.proc.stdout is not None
        prefix = f"[{self.name}]"
        worker_log = logging.getLogger("mlx_gateway.worker.output")
        while line := await record.proc.stdout.readline():
            text = line.decode(errors="replace").rstrip()
            record.stderr.append(text)
            worker_log.info("%s %s", prefix, text)

    async def _watch_exit(self, record: WorkerProcess) -> None:
        returncode = await record.proc.wait()
        self._post(Exited(record.generation, returncode))

    async def _start_timer(self, generation: int) -> None:
        await asyncio.sleep(self.start_timeout())
        self._post(StartTimeout(generation))

    # ------------------------------------------------------------ while it runs

    def post(self, msg: Request) -> None:
        """Send a control message to the worker, without waiting (dropped when none runs)."""
        if self.current is not None:
            self.relay.post(self.current.worker_id, msg)

    def load_failed(self, message: str) -> None:
        """The worker said its model could not load (its exit follows)."""
        if self.current is not None:
            self.current.load_error = message

    def timed_out(self) -> None:
        """No ``Ready`` within the start timeout: terminate it."""
        if self.current is not None:
            timeout = self.start_timeout()
            self.current.load_error = (
                f"the worker sent no Ready within {timeout:g} s (start_timeout)"
            )
            self._terminate(self.current)

    def kill(self, reason: str) -> None:
        """SIGKILL it now (it hung); its requests fail with ``reason`` (see :func:`exit_reason`)."""
        if self.current is not None:
            log.error("[%s] killing worker pid %d: %s", self.name, self.current.proc.pid, reason)
            self.current.kill_reason = reason
            signal_group(self.current.proc.pid, signal.SIGKILL)

    # ------------------------------------------------------------ stop and exit

    def stop(self, reason: str) -> None:
        """Ask it to stop (Shutdown, then SIGTERM, then SIGKILL); its unfinished
        requests fail as stopped."""
        record = self.current
        if record is None:
            return
        record.stop_requested = True
        record.stop_reason = reason
        record.stop_error = ModelUnavailable(
            f"model '{self.name}' was stopped before the request finished: {reason}",
            code="model_stopped",
        )
        self.relay.stopping(record.worker_id, record.stop_error)
        record.tasks.append(asyncio.create_task(self._escalate_stop(record)))

    def exited(self, returncode: int) -> tuple[WorkerProcess, str]:
        """The current process exited: it is no longer current, its requests fail
        (as stopped when asked to stop, else as crashed). Returns it and why it ended."""
        record, self.current = self.current, None
        assert record is not None
        for task in record.tasks:
            task.cancel()
        reason = exit_reason(record, returncode)
        error: GatewayError = WorkerCrashed(f"model '{self.name}' worker {reason}")
        if record.stop_requested and record.stop_error:
            error = record.stop_error
        self.relay.detach(record.worker_id, error)
        return record, reason

    async def _escalate_stop(self, record: WorkerProcess) -> None:
        grace = self._server.shutdown_grace
        with contextlib.suppress(WorkerUnreachable):
            await self.relay.send(record.worker_id, Shutdown(grace=grace))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(record.proc.wait()), grace + 1.0)
            return
        log.warning("[%s] no exit after Shutdown; sending SIGTERM", self.name)
        self._terminate(record)

    def _terminate(self, record: WorkerProcess) -> None:
        signal_group(record.proc.pid, signal.SIGTERM)

        async def kill_later() -> None:
            # ends with the process: no task outlives the worker it watches
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(record.proc.wait()), KILL_WAIT)
            if record.proc.returncode is None:
                log.warning("[%s] no exit after SIGTERM; sending SIGKILL", self.name)
                signal_group(record.proc.pid, signal.SIGKILL)

        background(kill_later())
