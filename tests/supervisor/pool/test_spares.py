"""Spare workers (supervisor/pool/spares.py) with real language-model workers: the
hand-over of a spare to the next model, and a spare that crashes."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from mlx_gateway.supervisor.config import GatewayConfig, ServerConfig
from mlx_gateway.supervisor.config.kinds import model_entry
from mlx_gateway.supervisor.pool import spares as spares_module
from mlx_gateway.supervisor.pool.registry import Registry
from mlx_gateway.supervisor.pool.spares import SparePool
from tests.supervisor.fakes import alive, chat, run

pytestmark = pytest.mark.slow

MakeRegistry = Callable[[], Awaitable[Registry]]


@pytest.fixture
async def make_spare_registry(tiny_lm_path: Path) -> AsyncIterator[MakeRegistry]:
    registries: list[Registry] = []

    async def make() -> Registry:
        models = [
            model_entry(served_model_name=name, model_path=str(tiny_lm_path)) for name in "ab"
        ]
        config = GatewayConfig(
            server=ServerConfig(spare_workers=True, shutdown_grace=1.0, preload_openblas=False),
            models=models,
        )
        registry = Registry(config)
        await registry.start()
        registries.append(registry)
        return registry

    yield make
    for registry in registries:
        await registry.close()


async def until(predicate: Callable[[], Any], what: str, timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def ready_spare(pool: SparePool) -> int | None:
    """The pid of the ready spare, if any."""
    ready = [s["pid"] for s in pool.status() if s["ready"]]
    return ready[0] if ready else None


async def test_the_next_model_loads_in_the_spare(make_spare_registry: MakeRegistry) -> None:
    registry = await make_spare_registry()
    pool = registry.spares
    assert pool is not None and pool.status() == []
    a = await registry.load("a")  # no spare yet: a fresh worker; a spare starts after it
    spare_pid = await until(lambda: ready_spare(pool), "a ready spare")
    assert spare_pid != a.pid
    (status,) = pool.status()
    assert status["kind"] == "lm" and status["memory"] > 0
    # The spare's memory counts in the budget beside model a's need.
    summary = registry.placement.summary()
    assert summary["reserved"] == registry.placement.need_of(a) + status["memory"]

    b = await registry.load("b")
    assert b.pid == spare_pid and pool.taken == 1
    text, done = await run(b, chat("hello there", max_tokens=4, temperature=0.0))
    assert done.usage.completion_tokens > 0 and text
    text_a, _ = await run(a, chat("hello there", max_tokens=4, temperature=0.0))
    assert text == text_a  # the same weights answer the same in the spare-born worker
    # A new spare for the next swap.
    new_pid = await until(lambda: ready_spare(pool), "a new spare")
    assert new_pid not in (spare_pid, a.pid)

    # The handed-over worker is an ordinary one: it stops as any other.
    await registry.unload("b")
    await until(lambda: not alive(spare_pid), "the stopped worker to exit", 30)
    # Closing the gateway stops the spare too.
    await registry.close()
    await until(lambda: not alive(new_pid), "the spare to exit at close", 30)


async def test_a_crashed_spare_is_harmless(
    make_spare_registry: MakeRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spares_module, "RETRY_AFTER", 0.0)
    registry = await make_spare_registry()
    pool = registry.spares
    assert pool is not None
    await registry.load("a")
    spare_pid = await until(lambda: ready_spare(pool), "a ready spare")
    os.kill(spare_pid, signal.SIGKILL)
    await until(lambda: pool.deaths == 1 and pool.status() == [], "the spare's death noticed")
    assert registry.placement.summary()["reserved"] == registry.placement.need_of(
        registry.resolve("a")
    )  # its memory no longer counts

    b = await registry.load("b")  # no spare: a fresh worker, as without spares
    assert b.pid != spare_pid and pool.taken == 0
    text, done = await run(b, chat("hello", max_tokens=3, temperature=0.0))
    assert done.usage.completion_tokens > 0 and text
    # The start of b asked for a new spare.
    assert await until(lambda: ready_spare(pool), "a new spare") != spare_pid
