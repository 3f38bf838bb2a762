"""Stopping the gateway (SIGINT/SIGTERM) without cutting an answer mid-body.

When the signal arrives the registry begins its shutdown at once: new requests
are refused (503 ``shutting_down``) and every worker is told to stop, so requests
in flight get ``shutdown_grace`` seconds to finish; whatever is still running then
fails with "the gateway is shutting down" (a stream: its error event and its
terminal event, ``data: [DONE]`` for the OpenAI APIs). Meanwhile Hypercorn stops
accepting and waits for the open connections; its limit is the grace plus the
time the stop escalation may take (SIGTERM, then SIGKILL), so those last events
are written before it closes the connections.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from mlx_gateway.supervisor.config import ServerConfig
from mlx_gateway.supervisor.gateway import started
from mlx_gateway.supervisor.pool.process import KILL_WAIT

if TYPE_CHECKING:
    import asyncio

    from starlette.applications import Starlette

FLUSH_MARGIN = 2.0
"""Seconds, beyond the worst case of a worker's stop, to write the final events."""


def graceful_timeout(server: ServerConfig) -> float:
    """How long Hypercorn may wait for open connections after the signal: the
    grace, the stop's escalation (Shutdown → +1 s → SIGTERM → KILL_WAIT → SIGKILL)
    and a margin to write what the failed requests still owe their clients."""
    return server.shutdown_grace + 1.0 + KILL_WAIT + FLUSH_MARGIN


def shutdown_trigger(app: Starlette, stop: asyncio.Event) -> Callable[[], Awaitable[None]]:
    """Hypercorn's ``shutdown_trigger``: returns once ``stop`` is set, after the
    registry began its shutdown (so the grace runs while Hypercorn drains)."""

    async def trigger() -> None:
        await stop.wait()
        gateway = started(app)
        if gateway is not None:
            gateway.registry.begin_shutdown()
            gateway.log_hub.close()  # the web UI's live log streams end now

    return trigger
