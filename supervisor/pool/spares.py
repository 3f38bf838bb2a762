"""Spare workers: one pre-started worker process per kind in use, its backend
imported and no model loaded, handed to the next model of that kind that starts.

A model start that takes a spare skips the interpreter start and the backend
imports (seconds for MLX and mlx-lm); the worker only loads the weights. After a
start (with or without a spare) the :class:`WorkerHandle` asks for a new spare of
its kind, so the next swap finds one.

A spare is keyed by what its process cannot change after start: the worker kind,
the interpreter and the environment (``worker_env``, the OpenBLAS preload). Its
memory (the RSS its ``Ready`` reports; :data:`SPARE_ESTIMATE` before that) counts
in the memory budget; the placement discards spares before it evicts a model.

A spare that dies is only logged and forgotten: the next start of its kind spawns
a fresh worker as without spares, and asks for a new spare (not sooner than
:data:`RETRY_AFTER` seconds after a spare of that key died, so a broken interpreter
does not crash-loop).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import signal
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mlx_gateway.protocol.messages import Ready, Reply, Shutdown
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.supervisor.errors import WorkerCrashed
from mlx_gateway.supervisor.pool.relay import Relay, WorkerUnreachable
from mlx_gateway.supervisor.pool.spawn import describe_exit, start_process

log = logging.getLogger("mlx_gateway.spares")

SPARE_ESTIMATE = 400 * 2**20
"""Bytes a spare counts in the budget until its Ready reports its RSS."""
RETRY_AFTER = 10.0
"""Seconds after a spare of a key died before another is started for it."""
STDERR_LINES_KEPT = 40

SpareKey = tuple[str, str, tuple[tuple[str, str], ...]]
"""(kind, argv[0] — the interpreter, the environment entries that differ from ours)."""


def spare_key(kind: str, argv: Sequence[str], env: dict[str, str]) -> SpareKey:
    own = os.environ
    extra = tuple(sorted((k, v) for k, v in env.items() if own.get(k) != v))
    return kind, argv[0] if argv else "", extra


@dataclass
class Spare:
    """One spare process."""

    key: SpareKey
    worker_id: str
    proc: asyncio.subprocess.Process
    ready: bool = False
    rss: int = 0
    started: float = field(default_factory=time.monotonic)
    stderr: collections.deque[str] = field(
        default_factory=lambda: collections.deque(maxlen=STDERR_LINES_KEPT)
    )
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        return self.rss if self.ready and self.rss else SPARE_ESTIMATE


class SparePool:
    """The gateway's spares (at most one per key)."""

    def __init__(self, relay: Relay, heartbeat_interval: float = 2.0) -> None:
        self._relay = relay
        self._heartbeat = heartbeat_interval
        self._spares: dict[SpareKey, Spare] = {}
        self._died_at: dict[SpareKey, float] = {}
        self._closing = False
        self.taken = 0  # spares handed to a model since the gateway started
        self.deaths = 0  # spares that exited without being asked to
        self.fits: Any = None
        """``fits(nbytes) -> bool``: whether the budget has room for a spare (set by
        the placement); ``None``: always."""

    # ------------------------------------------------------------ queries

    def nbytes(self) -> int:
        return sum(spare.nbytes for spare in self._spares.values())

    def status(self) -> list[dict[str, Any]]:
        return [
            {
                "kind": spare.key[0],
                "pid": spare.proc.pid,
                "ready": spare.ready,
                "memory": spare.nbytes,
            }
            for spare in self._spares.values()
        ]

    def get(self, key: SpareKey) -> Spare | None:
        return self._spares.get(key)

    # ------------------------------------------------------------ hand-over

    def take(self, key: SpareKey) -> Spare | None:
        """The ready spare for ``key``, now the caller's (it attaches its own reply
        handler and watches the process); ``None`` when there is none."""
        spare = self._spares.get(key)
        if spare is None or not spare.ready or spare.proc.returncode is not None:
            return None
        del self._spares[key]
        for task in spare.tasks:
            task.cancel()
        self.taken += 1
        log.info("spare %s worker pid %d handed over", key[0], spare.proc.pid)
        return spare

    async def want(
        self, key: SpareKey, spec: WorkerSpec, command: Sequence[str], env: dict[str, str]
    ) -> None:
        """Start a spare for ``key`` unless there is one, the gateway closes, one
        died less than :data:`RETRY_AFTER` s ago, or the budget has no room."""
        if self._closing or key in self._spares:
            return
        if time.monotonic() - self._died_at.get(key, -RETRY_AFTER) < RETRY_AFTER:
            return
        if self.fits is not None and not self.fits(SPARE_ESTIMATE):
            log.info("no spare %s worker: the memory budget has no room for one", key[0])
            return
        await self._start(key, spec.worker_id, command, env)

    @staticmethod
    def spec(kind: str, heartbeat_interval: float) -> WorkerSpec:
        """The spec of a new spare of ``kind`` (its worker id is fresh)."""
        return WorkerSpec(
            worker_id=f"spare-{kind}-{uuid.uuid4().hex[:8]}",
            kind=kind,
            model_path="",
            served_model_name="",
            heartbeat_interval=heartbeat_interval,
            spare=True,
        )

    async def _start(
        self, key: SpareKey, worker_id: str, command: Sequence[str], env: dict[str, str]
    ) -> None:
        try:
            proc = await start_process(command, env)
        except OSError as exc:
            log.warning("could not start a spare %s worker: %s", key[0], exc)
            self._died_at[key] = time.monotonic()
            return
        spare = Spare(key, worker_id, proc)
        self._spares[key] = spare

        def on_reply(reply: Reply, _payloads: list[bytes]) -> None:
            if isinstance(reply, Ready) and self._spares.get(key) is spare:
                spare.ready, spare.rss = True, reply.memory.rss
                log.info(
                    "spare %s worker pid %d ready in %.1f s",
                    key[0],
                    proc.pid,
                    time.monotonic() - spare.started,
                )

        self._relay.attach(worker_id, on_reply)
        spare.tasks += [
            asyncio.create_task(_pump(spare)),
            asyncio.create_task(self._watch(spare)),
        ]
        log.info("started a spare %s worker, pid %d", key[0], proc.pid)

    async def _watch(self, spare: Spare) -> None:
        returncode = await spare.proc.wait()
        if self._spares.get(spare.key) is spare:
            del self._spares[spare.key]
        self._relay.detach(spare.worker_id, WorkerCrashed("the spare worker exited"))
        if self._closing:
            return
        self.deaths += 1
        self._died_at[spare.key] = time.monotonic()
        tail = [line for line in spare.stderr if line.strip()][-3:]
        log.warning(
            "spare %s worker pid %d %s (harmless: the next start spawns a worker)%s",
            spare.key[0],
            spare.proc.pid,
            describe_exit(returncode),
            "; last log lines:\n" + "\n".join(tail) if tail else "",
        )

    # ------------------------------------------------------------ shutdown

    async def discard_all(self, reason: str) -> None:
        """Stop every spare (the budget needs their room, or the gateway stops)."""
        spares, self._spares = list(self._spares.values()), {}
        for spare in spares:
            log.info(
                "stopping the spare %s worker pid %d: %s", spare.key[0], spare.proc.pid, reason
            )
        await asyncio.gather(*(self._stop(spare) for spare in spares))

    async def close(self) -> None:
        self._closing = True
        await self.discard_all("the gateway is shutting down")

    async def _stop(self, spare: Spare) -> None:
        for task in spare.tasks:
            task.cancel()
        with contextlib.suppress(WorkerUnreachable):
            await self._relay.send(spare.worker_id, Shutdown(grace=0.0))
        try:
            await asyncio.wait_for(asyncio.shield(spare.proc.wait()), 2.0)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(spare.proc.pid, signal.SIGKILL)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(spare.proc.wait(), 5.0)
        self._relay.detach(spare.worker_id, WorkerCrashed("the spare worker was stopped"))


async def _pump(spare: Spare) -> None:
    """Keep the spare's output (logged at debug; the last lines name a crash)."""
    assert spare.proc.stdout is not None
    out = logging.getLogger("mlx_gateway.worker.output")
    while line := await spare.proc.stdout.readline():
        text = line.decode(errors="replace").rstrip()
        spare.stderr.append(text)
        out.debug("[spare %s] %s", spare.key[0], text)
