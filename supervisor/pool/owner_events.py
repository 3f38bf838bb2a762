"""What a model's owner task works through, one at a time: the commands callers
post (:class:`EnsureReady`, :class:`StopCommand`, :class:`Kill`) and the events of its
worker process (:class:`FromWorker`, :class:`Exited`, :class:`StartTimeout`), each
tagged with the process *generation* it belongs to; and the record of one started
process (:class:`WorkerProcess`)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from mlx_gateway.protocol.messages import Reply
from mlx_gateway.supervisor.errors import GatewayError
from mlx_gateway.supervisor.pool.spawn import describe_exit

STDERR_LINES_KEPT = 40


@dataclass
class EnsureReady:
    future: asyncio.Future[None]


@dataclass
class StopCommand:
    future: asyncio.Future[None]
    reason: str
    if_idle: bool = False


@dataclass
class FromWorker:
    generation: int
    reply: Reply


@dataclass
class Exited:
    generation: int
    returncode: int


@dataclass
class StartTimeout:
    generation: int


@dataclass
class Kill:
    reason: str


OwnerEvent = EnsureReady | StopCommand | FromWorker | Exited | StartTimeout | Kill


@dataclass
class WorkerProcess:
    """One started worker process (one *generation* of this handle)."""

    generation: int
    worker_id: str
    proc: asyncio.subprocess.Process
    stderr: collections.deque[str] = field(
        default_factory=lambda: collections.deque(maxlen=STDERR_LINES_KEPT)
    )
    load_error: str | None = None
    kill_reason: str | None = None
    stop_reason: str = ""
    stop_requested: bool = False
    stop_error: GatewayError | None = None  # what its unfinished requests fail with
    finished_seen: int = 0  # its heartbeats' ``finished`` count, as last learned from
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)


def exit_reason(proc: WorkerProcess, returncode: int) -> str:
    """Why ``proc`` exited, for logs and errors: its load error, why it was killed or
    stopped, or its exit code or signal with its last log lines."""
    if proc.load_error:
        return f"failed to load: {proc.load_error}"
    if proc.kill_reason:
        return f"was killed: {proc.kill_reason}" + _tail(proc)
    if proc.stop_requested:
        return f"was stopped ({proc.stop_reason})"
    return describe_exit(returncode) + _tail(proc)


def _tail(proc: WorkerProcess) -> str:
    tail = [line for line in proc.stderr if line.strip()][-5:]
    return "; last log lines:\n" + "\n".join(tail) if tail else ""


_BACKGROUND: set[asyncio.Task[Any]] = set()


def background(coro: Coroutine[Any, Any, Any]) -> None:
    """Run ``coro`` as a task that is kept referenced until it ends."""
    task = asyncio.create_task(coro)
    _BACKGROUND.add(task)
    task.add_done_callback(_BACKGROUND.discard)


def signal_group(pid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def fail(future: asyncio.Future[None], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
