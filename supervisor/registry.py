"""The registry: served names and aliases → WorkerHandle, plus shared resources
(the relay socket, the private runtime directory, the idle reaper)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
from pathlib import Path

from .config import GatewayConfig
from .errors import ModelNotFound
from .process import WorkerCommand
from .reaper import reap_idle_forever
from .relay import Relay
from .worker import WorkerHandle

log = logging.getLogger("mlx_gateway.registry")


def make_runtime_dir(configured: str | None) -> tuple[Path, bool]:
    """A directory only this user can enter, for the ZeroMQ socket.

    Returns the path and whether we created it (and so remove it at exit)."""
    if configured:
        path = Path(configured).expanduser()
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(path, 0o700)
        return path, False
    return Path(tempfile.mkdtemp(prefix="mlx-gateway-")), True  # mkdtemp makes it 0700


class Registry:
    """Owns every model's :class:`WorkerHandle`."""

    def __init__(
        self,
        config: GatewayConfig,
        *,
        command: WorkerCommand | None = None,
        worker_env: dict[str, str] | None = None,
    ) -> None:
        self.config = config
        self._runtime_dir, self._owns_runtime_dir = make_runtime_dir(config.server.runtime_dir)
        self.relay = Relay(f"ipc://{self._runtime_dir / 'gateway.sock'}")
        self.handles: list[WorkerHandle] = [
            WorkerHandle(model, config.server, self.relay, command=command, env=worker_env)
            for model in config.models
        ]
        self._by_name: dict[str, WorkerHandle] = {}
        for handle in self.handles:
            for name in handle.config.names:
                self._by_name[name] = handle
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False

    def resolve(self, name: str) -> WorkerHandle:
        """The handle serving ``name`` (a served name or an alias)."""
        handle = self._by_name.get(name)
        if handle is None:
            raise ModelNotFound(name, self.served_names())
        return handle

    def served_names(self) -> list[str]:
        return [handle.name for handle in self.handles]

    async def start(self) -> None:
        await self.relay.start()
        for handle in self.handles:
            handle.start_owner()
        for handle in self.handles:
            if not handle.config.on_demand:
                self._tasks.append(asyncio.create_task(self._preload(handle)))
        self._tasks.append(asyncio.create_task(reap_idle_forever(self.handles)))

    async def _preload(self, handle: WorkerHandle) -> None:
        try:
            await handle.ensure_ready()
        except Exception as exc:  # visible in /health and /v1/models; requests retry
            log.error("[%s] could not start at launch: %s", handle.name, exc)

    async def close(self) -> None:
        """Stop every worker (in parallel) and release the socket and directory."""
        if self._closed:
            return
        self._closed = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await asyncio.gather(*(handle.close() for handle in self.handles), return_exceptions=True)
        await self.relay.close()
        if self._owns_runtime_dir:
            shutil.rmtree(self._runtime_dir, ignore_errors=True)
