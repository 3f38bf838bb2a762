"""Helpers to run the real supervisor against the fake worker."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from mlx_gateway.protocol.messages import Chunk, Done, Generate, SamplingParams
from mlx_gateway.protocol.spec import WorkerSpec, encode_spec
from mlx_gateway.supervisor.config import GatewayConfig, ServerConfig
from mlx_gateway.supervisor.config.kinds import model_entry
from mlx_gateway.supervisor.errors import ModelUnavailable
from mlx_gateway.supervisor.pool.handle import WorkerHandle
from mlx_gateway.supervisor.pool.registry import Registry

FAKE_WORKER = Path(__file__).parent / "processes" / "fake_worker.py"


def fake_command(spec: WorkerSpec, endpoint: str) -> list[str]:
    """Start the fake worker exactly as the real one is started."""
    return [
        sys.executable,
        str(FAKE_WORKER),
        "--endpoint",
        endpoint,
        "--spec",
        encode_spec(spec),
        "--parent-pid",
        str(os.getpid()),
    ]


def fake_config(*models: dict[str, Any], **server: Any) -> GatewayConfig:
    """A config of fake models: each dict gives at least ``model_path='fake/<mode>'``."""
    server.setdefault("shutdown_grace", 1.0)
    return GatewayConfig(
        server=ServerConfig(**server),
        models=[model_entry(**{"served_model_name": m["model_path"], **m}) for m in models],
    )


async def start_with_probe(config: GatewayConfig, command: Any) -> None:
    """Start the model ``fake/ok`` of ``config`` once with ``command``: a probe that
    records what its process saw and exits, so the start fails (ModelUnavailable)."""
    registry = Registry(config, command=command)
    await registry.start()
    try:
        with pytest.raises(ModelUnavailable):
            await registry.resolve("fake/ok").ensure_ready()
    finally:
        await registry.close()


@pytest.fixture
async def make_registry() -> AsyncIterator[Any]:
    registries: list[Registry] = []

    async def make(*models: dict[str, Any], **server: Any) -> Registry:
        registry = Registry(fake_config(*models, **server), command=fake_command)
        await registry.start()
        registries.append(registry)
        return registry

    yield make
    for registry in registries:
        await registry.close()


def chat(text: str, request_id: str = "r1", **sampling: Any) -> Generate:
    return Generate(
        request_id=request_id,
        messages=[{"role": "user", "content": text}],
        sampling=SamplingParams(**sampling),
    )


async def run(handle: WorkerHandle, msg: Generate) -> tuple[str, Done]:
    text = ""
    async with handle.session() as session:
        async for reply in session.generate(msg):
            match reply:
                case Chunk():
                    text += reply.text
                case Done():
                    return text, reply
    raise AssertionError("no Done")


def alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def wait_for(predicate: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


def worker_output(handle: WorkerHandle) -> list[str]:
    """The fake worker's output lines so far, as the gateway read them."""
    return handle.process.output()


async def reached_worker(handle: WorkerHandle, request_id: str) -> None:
    """Wait until the fake worker holds the ``hang`` request ``request_id``."""
    await wait_for(lambda: f"hanging {request_id}" in worker_output(handle))


async def barrier(handle: WorkerHandle, request_id: str = "barrier") -> None:
    """Wait until the fake worker has handled everything sent to it before now: a
    ``hang`` request is sent and cancelled, and its cancellation's log line read.
    Messages on the socket and lines of the output keep their order, so whatever
    an earlier message made the worker print is in :func:`worker_output` by then."""

    async def held() -> None:
        async with handle.session() as session:
            async for _ in session.generate(chat("hang", request_id=request_id)):
                pass

    task = asyncio.create_task(held())
    await reached_worker(handle, request_id)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await wait_for(lambda: f"cancelled {request_id}" in worker_output(handle))
