"""Idle reaping: stop a worker when nobody used it for its ``idle_timeout``."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from .state import WorkerState
from .worker import WorkerHandle

log = logging.getLogger("mlx_gateway.reaper")


def reapable(handle: WorkerHandle, now: float) -> bool:
    """Idle means READY, nothing in flight, and ``idle_timeout`` seconds since the
    last request *finished*. Models started at launch (``on_demand: false``) stay."""
    timeout = handle.config.idle_timeout
    return (
        handle.config.on_demand
        and timeout > 0
        and handle.state is WorkerState.READY
        and handle.inflight == 0
        and handle.idle_for(now) >= timeout
    )


def check_interval(handles: Sequence[WorkerHandle]) -> float:
    timeouts = [h.config.idle_timeout for h in handles if h.config.idle_timeout > 0]
    return max(0.2, min([*timeouts, 20.0]) / 4)


async def reap_idle_forever(handles: Sequence[WorkerHandle]) -> None:
    interval = check_interval(handles)
    while True:
        await asyncio.sleep(interval)
        now = time.monotonic()
        for handle in handles:
            if reapable(handle, now):
                log.info("[%s] idle for %.0f s: stopping", handle.name, handle.idle_for(now))
                # Awaited in turn: stops are quick (Shutdown with nothing in flight).
                await handle.stop("idle timeout", if_idle=True)
