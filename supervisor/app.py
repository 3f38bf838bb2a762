"""The Starlette application; its lifespan owns the registry (and so every worker)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from starlette.applications import Starlette

from .api import exception_handlers, routes
from .config import GatewayConfig
from .process import WorkerCommand
from .registry import Registry


def create_app(
    config: GatewayConfig,
    *,
    command: WorkerCommand | None = None,
    worker_env: dict[str, str] | None = None,
) -> Starlette:
    """Build the gateway app. ``command`` replaces how workers are started (tests
    start a fake worker that speaks the same protocol)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        registry = Registry(config, command=command, worker_env=worker_env)
        await registry.start()
        app.state.registry = registry
        try:
            yield
        finally:
            await registry.close()

    return Starlette(routes=routes, exception_handlers=exception_handlers, lifespan=lifespan)
