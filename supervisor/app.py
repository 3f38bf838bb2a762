"""The Starlette application; its lifespan owns the registry (and so every worker)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette

from mlx_gateway.supervisor.api import exception_handlers, routes
from mlx_gateway.supervisor.config import GatewayConfig
from mlx_gateway.supervisor.http.log_hub import LogHub
from mlx_gateway.supervisor.http.middleware import middleware_for
from mlx_gateway.supervisor.http.recorder import Recorder
from mlx_gateway.supervisor.pool.registry import Registry
from mlx_gateway.supervisor.pool.spawn import WorkerCommand


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
        hub = LogHub()
        root = logging.getLogger()
        root.addHandler(hub)
        app.state.log_hub = hub
        registry = Registry(config, command=command, worker_env=worker_env)
        try:
            await registry.start()
            app.state.registry = registry
            try:
                yield
            finally:
                await registry.close()
        finally:
            root.removeHandler(hub)

    recorder = Recorder()
    app = Starlette(
        routes=routes,
        exception_handlers=exception_handlers,
        middleware=middleware_for(config, recorder),
        lifespan=lifespan,
    )
    app.state.config = config
    app.state.metrics = recorder
    app.state.http_port = config.server.port
    return app
