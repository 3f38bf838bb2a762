"""The registry: a request's model name → WorkerHandle (the one lookup of
:mod:`.names`), plus shared resources (the relay socket, the private runtime
directory, the memory placement, the housekeeping loop) and the admin operations
(load, unload, reload)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil

from mlx_gateway.supervisor.config import GatewayConfig, ModelConfig
from mlx_gateway.supervisor.errors import GatewayError, ModelNotFound
from mlx_gateway.supervisor.pool.handle import WorkerHandle
from mlx_gateway.supervisor.pool.interactive import InteractiveWork
from mlx_gateway.supervisor.pool.names import Match, NameIndex
from mlx_gateway.supervisor.pool.placement import Placement
from mlx_gateway.supervisor.pool.reaper import housekeeping_forever
from mlx_gateway.supervisor.pool.relay import Relay
from mlx_gateway.supervisor.pool.routes import Route, RouteNotServed, RouteTable
from mlx_gateway.supervisor.pool.runtime_dir import make_runtime_dir
from mlx_gateway.supervisor.pool.scope import allows, allows_name
from mlx_gateway.supervisor.pool.spares import SparePool
from mlx_gateway.supervisor.pool.spawn import WorkerCommand
from mlx_gateway.supervisor.pool.state import WorkerState

log = logging.getLogger("mlx_gateway.registry")

SHUTDOWN_REASON = "the gateway is shutting down"


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
        self._command = command
        self._worker_env = worker_env
        self._runtime_dir, self._owns_runtime_dir = make_runtime_dir(config.server.runtime_dir)
        self.relay = Relay(f"ipc://{self._runtime_dir / 'gateway.sock'}")
        self.handles: list[WorkerHandle] = []
        # What the placement counts: the served handles and the retiring ones (a
        # replaced worker finishing its requests still holds memory and its group).
        self._placed: list[WorkerHandle] = []
        self._retired: set[WorkerHandle] = set()
        self.placement = Placement(self._placed, config.server)
        self.interactive = InteractiveWork(self._placed, duty=config.server.batch_duty)
        """Interactive sessions on every model: batch work is held meanwhile."""
        self.spares: SparePool | None = None
        if config.server.spare_workers:
            self.spares = SparePool(self.relay)
            self.placement.attach_spares(self.spares)
        self.handles += [self._new_handle(model) for model in config.models]
        self._sync_placed()
        self._names: NameIndex[WorkerHandle] = NameIndex(self.handles)
        self.routes: RouteTable[WorkerHandle] = self._route_table(None)
        self._tasks: list[asyncio.Task[None]] = []
        self._retiring: set[asyncio.Task[None]] = set()
        self._stopping: asyncio.Future[list[BaseException | None]] | None = None
        self._closed = False

    def _new_handle(self, model: ModelConfig) -> WorkerHandle:
        handle = WorkerHandle(
            model, self.config.server, self.relay, command=self._command, env=self._worker_env
        )
        handle.placement = self.placement
        handle.admission.interactive = self.interactive
        handle.spares = self.spares
        return handle

    def _route_table(self, old: RouteTable[WorkerHandle] | None) -> RouteTable[WorkerHandle]:
        by_name = {name: h for h in self.handles for name in h.config.names}
        return RouteTable(self.config.routes, by_name, old)

    def _sync_placed(self) -> None:
        self._placed[:] = [*self.handles, *(h for h in self._retired if h not in self.handles)]

    def lookup(self, name: str) -> Match[WorkerHandle] | None:
        """The handle ``name`` names and the name it matched (see :mod:`.names`);
        ``None`` also for a model outside the request's key scope (:mod:`.scope`)."""
        found = self._names.find(name)
        return found if found is None or allows(found.handle.config) else None

    def resolve(self, name: str) -> WorkerHandle:
        """The handle serving ``name``: a served name, an alias or a ``model_path``
        (as mlx-vlm's server allows), with or without ``:latest``, in any case (the
        order of :mod:`.names`); a 404 naming the served models otherwise. Every
        surface finds its model here. A model outside the request's key scope
        (:mod:`.scope`) is a 404 too, and is not named in it."""
        found = self.lookup(name)
        if found is None:
            if (route := self.route(name)) is not None:
                raise RouteNotServed(route)
            routes = [route.name for route in self.visible_routes()]
            raise ModelNotFound(name, [*self.served_names(), *routes])
        return found.handle

    def visible(self) -> list[WorkerHandle]:
        """The handles the current request may see (all of them but under a key
        scoped to some models): what every listing shows."""
        return [handle for handle in self.handles if allows(handle.config)]

    def route(self, name: str) -> Route[WorkerHandle] | None:
        """The route ``name`` names, if it names no model (see :mod:`.routes`) and
        the request's key scope takes it in (a key scoped to a route uses its models
        through it)."""
        if self.lookup(name) is not None:
            return None
        route = self.routes.find(name)
        return route if route is not None and allows_name(route.name) else None

    def visible_routes(self) -> list[Route[WorkerHandle]]:
        """The routes the current request may see (as :meth:`visible`)."""
        return [route for route in self.routes.routes if allows_name(route.name)]

    def served_names(self) -> list[str]:
        """The served names the current request may see."""
        return [handle.name for handle in self.visible()]

    async def start(self) -> None:
        await self.relay.start()
        for handle in self.handles:
            handle.start_owner()
        for handle in self.handles:
            if not handle.config.on_demand:
                self._preload(handle)
        self._tasks.append(
            asyncio.create_task(housekeeping_forever(lambda: self.handles, self.config.server))
        )

    def _preload(self, handle: WorkerHandle) -> None:
        async def run() -> None:
            try:
                await handle.load()
            except Exception as exc:  # visible in /health and /v1/models; requests retry
                log.error("[%s] could not start at launch: %s", handle.name, exc)

        self._tasks.append(asyncio.create_task(run()))

    # ------------------------------------------------------------ admin

    async def load(self, name: str, *, force: bool = False) -> WorkerHandle:
        """Start a model now (clearing a failure backoff); returns once it is ready.
        With ``force`` it starts past a refusal of the memory budget
        (:meth:`.placement.Placement.force_room`)."""
        handle = self.resolve(name)
        if force and self.placement is not None:
            await self.placement.force_room(handle)
        await handle.load()
        return handle

    async def unload(self, name: str, *, force: bool = False) -> WorkerHandle:
        """Stop a model. A busy one is refused (409) unless ``force``: then its
        in-flight requests fail with a clear error."""
        handle = self.resolve(name)
        if not force and not handle.idle:
            raise GatewayError(
                f"model '{handle.name}' is busy ({handle.inflight} in flight, "
                f"{handle.waiting} waiting); retry later or pass force=true",
                status=409,
                type="invalid_request_error",
                code="model_busy",
            )
        await handle.stop("unloaded by an admin request")
        return handle

    async def unload_idle(self) -> list[WorkerHandle]:
        """Stop every ready model that has no request in flight or waiting
        (``POST /unload``); busy ones keep running. Returns those stopped."""
        stopped = [h for h in self.handles if h.state is WorkerState.READY and h.idle]
        for handle in stopped:
            await handle.stop("unloaded by an admin request")
        return stopped

    async def reload(self, new: GatewayConfig) -> dict[str, list[str]]:
        """Apply a new config: unchanged models keep running; changed ones are
        replaced (the old worker finishes its in-flight requests first); new ones
        appear; removed ones stop. Returns what changed, by name."""
        old = {h.name: h for h in self.handles}
        report: dict[str, list[str]] = {"added": [], "changed": [], "removed": [], "kept": []}
        handles: list[WorkerHandle] = []
        for model in new.models:
            current = old.pop(model.served_model_name, None)
            if current is not None and current.config == model:
                handles.append(current)
                report["kept"].append(current.name)
                continue
            handle = self._new_handle(model)
            handle.start_owner()
            handles.append(handle)
            if current is None:
                report["added"].append(handle.name)
            else:
                report["changed"].append(handle.name)
                self._retire(current, "its config entry changed (reload, pull, copy or delete)")
            if not model.on_demand:
                self._preload(handle)
        for gone in old.values():
            report["removed"].append(gone.name)
            self._retire(gone, "its config entry was removed (reload or delete)")
        # The server section (ports, budget…) needs a restart; models and routes reload.
        self.config = GatewayConfig(server=self.config.server, models=new.models, routes=new.routes)
        self.handles[:] = handles
        self._sync_placed()
        self._names = NameIndex(self.handles)
        self.routes = self._route_table(self.routes)
        log.info(
            "config reloaded: %s",
            "; ".join(f"{k} {', '.join(v)}" for k, v in report.items() if v and k != "kept")
            or "no model changed",
        )
        return report

    def _retire(self, handle: WorkerHandle, reason: str) -> None:
        """Stop routing to ``handle``; stop it once its in-flight requests are done."""

        async def run() -> None:
            while not handle.idle:
                await asyncio.sleep(0.1)
            # From here no request may enter it (none waits: it is idle), or one that
            # came late (the re-run of an answer whose worker died) would wait
            # for a start that never comes.
            handle.begin_closing(f"{reason}; send the request again", "model_replaced")
            await handle.close(reason)

        def done(task: asyncio.Task[None]) -> None:
            self._retiring.discard(task)
            self._retired.discard(handle)
            self._sync_placed()
            self.placement.notify()

        self._retired.add(handle)
        task = asyncio.create_task(run())
        self._retiring.add(task)
        task.add_done_callback(done)

    def begin_shutdown(self) -> None:
        """The gateway stops: refuse new requests and tell every worker to stop
        now, so in-flight requests get ``shutdown_grace`` and then fail with
        "the gateway is shutting down" (see :mod:`..shutdown`). Idempotent."""
        if self._stopping is not None:
            return
        log.info(
            "shutting down: stopping every worker (grace %g s)", self.config.server.shutdown_grace
        )
        everyone = list(self._placed)  # retiring handles too
        for handle in everyone:
            handle.begin_closing()
        self._stopping = asyncio.gather(
            *(handle.stop(SHUTDOWN_REASON) for handle in everyone), return_exceptions=True
        )

    async def close(self) -> None:
        """Stop every worker (in parallel) and release the socket and directory."""
        if self._closed:
            return
        self._closed = True
        everyone = list(self._placed)  # before the retiring tasks end (and drop theirs)
        self.begin_shutdown()
        for task in [*self._tasks, *self._retiring]:
            task.cancel()
        for task in [*self._tasks, *self._retiring]:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._stopping is not None:
            await self._stopping
        await asyncio.gather(*(handle.close() for handle in everyone), return_exceptions=True)
        if self.spares is not None:
            await self.spares.close()
        await self.relay.close()
        if self._owns_runtime_dir:
            shutil.rmtree(self._runtime_dir, ignore_errors=True)
