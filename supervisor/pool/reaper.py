"""The housekeeping loop: stop idle workers, kill hung ones, release drained ones.

* Idle: READY, nothing in flight or waiting, ``on_demand``, ``idle_timeout > 0``, and
  ``idle_timeout`` seconds since the last request *finished* (a client's
  ``keep_alive`` replaces ``idle_timeout``: see :mod:`.keep_alive`).
* Hung: READY with requests in flight but no heartbeat for ``hang_timeout`` seconds
  (e.g. the process was stopped); it is SIGKILLed and its requests fail at once.
* Stuck: READY, heartbeating, but its current step has made no progress past its
  ``step_timeout`` (see :mod:`.stall`); SIGKILLed the same way.
* Drained (see :mod:`.placement`): once idle it is stopped so the waiting model fits.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from mlx_gateway.supervisor.config import ServerConfig
from mlx_gateway.supervisor.pool.handle import WorkerHandle
from mlx_gateway.supervisor.pool.keep_alive import lifetime
from mlx_gateway.supervisor.pool.stall import stalled
from mlx_gateway.supervisor.pool.state import WorkerState

log = logging.getLogger("mlx_gateway.reaper")


def reapable(handle: WorkerHandle, now: float) -> bool:
    """Whether ``handle`` has been idle past its ``idle_timeout`` (see module doc)."""
    timeout = lifetime(handle)
    return (
        timeout is not None
        and handle.state is WorkerState.READY
        and handle.idle
        and handle.idle_for(now) >= timeout
    )


def hung(handle: WorkerHandle, now: float, hang_timeout: float) -> bool:
    return (
        handle.state is WorkerState.READY
        and handle.inflight > 0
        and now - handle.last_heartbeat > hang_timeout
    )


def check_interval(handles: Sequence[WorkerHandle], server: ServerConfig) -> float:
    timeouts = [t for h in handles if (t := lifetime(h)) is not None]
    if server.step_timeout is not None:
        timeouts.append(server.step_timeout)
    return max(0.2, min([*timeouts, server.hang_timeout, 20.0]) / 4)


async def housekeeping_forever(
    handles: Callable[[], Sequence[WorkerHandle]], server: ServerConfig
) -> None:
    """Run the checks every few seconds; ``handles`` is read anew each round (a
    config reload may change the list)."""
    killed: set[int] = set()  # pids sent SIGKILL (their exit may take a moment)
    while True:
        await asyncio.sleep(check_interval(handles(), server))
        now = time.monotonic()
        live = {h.pid for h in handles()}
        killed &= live
        for handle in handles():
            if handle.pid in killed:
                continue
            if hung(handle, now, server.hang_timeout):
                silent = now - handle.last_heartbeat
                await handle.kill(
                    f"hung: no heartbeat for {silent:.0f} s with {handle.inflight} request(s) "
                    "in flight (hang_timeout)"
                )
            elif handle.state is WorkerState.READY and (
                stall := stalled(handle.step, handle.last_heartbeat, now, server)
            ):
                handle.stalls[stall.phase] = handle.stalls.get(stall.phase, 0) + 1
                killed.add(handle.pid or 0)
                await handle.kill(stall.describe(handle.inflight))
            elif handle.draining and handle.idle and handle.state is WorkerState.READY:
                await handle.stop("drained for a waiting model", if_idle=True)
            elif reapable(handle, now):
                log.info("[%s] idle for %.0f s: stopping", handle.name, handle.idle_for(now))
                # Awaited in turn: stops are quick (Shutdown with nothing in flight).
                await handle.stop("idle timeout", if_idle=True)
