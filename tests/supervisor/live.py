"""The real gateway app served by Hypercorn over real TCP, with fake workers.

:class:`LiveGateway` runs the app on its own event loop in a thread, so a test can
talk to it with any HTTP client (sync or async, the OpenAI SDK, schemathesis) and
still read the app's services (``gateway_of(gateway.app).registry``) directly.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import msgspec
from starlette.applications import Starlette

from mlx_gateway.supervisor.app import create_app
from mlx_gateway.supervisor.config import GatewayConfig
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.gateway import started as gateway_started
from mlx_gateway.supervisor.shutdown import graceful_timeout, shutdown_trigger

from .fakes import fake_command, fake_config

T = TypeVar("T")


class LiveGateway:
    """``with LiveGateway(models…, **server) as gw:`` serves on ``gw.url``.

    The socket is bound before the server starts (port 0, handed to Hypercorn as
    ``fd://``), so there is no race for a free port."""

    def __init__(
        self, *models: dict[str, Any], config: GatewayConfig | None = None, **server: Any
    ) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(1024)
        self.port: int = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        if config is not None:  # a config as loaded from a file (its port replaced)
            self.config = msgspec.structs.replace(
                config, server=msgspec.structs.replace(config.server, port=self.port)
            )
        else:
            self.config = fake_config(*models, port=self.port, **server)
        self.app: Starlette = create_app(self.config, command=fake_command)
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve_forever, name="live-gateway")
        self._error: BaseException | None = None

    def __enter__(self) -> LiveGateway:
        self._thread.start()
        if not self._ready.wait(15):
            raise RuntimeError("the gateway did not start within 15 s")
        if self._error is not None:
            raise self._error
        return self

    def signal_stop(self) -> None:
        """What SIGTERM does to ``mlx-gateway launch``: begin the shutdown (the
        server then drains its connections; ``__exit__`` waits for the end)."""
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)

    def __exit__(self, *exc: object) -> None:
        self.signal_stop()
        self._thread.join(30)
        # Hypercorn's server closed the listening socket (it shares our fd): only
        # forget the fd here, so a later socket reusing its number is not closed.
        self._sock.detach()

    @property
    def registry(self) -> Any:
        return gateway_of(self.app).registry

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        """Run ``coro`` on the gateway's loop (e.g. to read or poke a handle)."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def _serve_forever(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as exc:  # surfaced by __enter__ when it happens at start
            self._error = exc
            self._ready.set()
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        from hypercorn.asyncio import serve
        from hypercorn.config import Config

        self._stop = asyncio.Event()
        config = Config()
        config.bind = [f"fd://{self._sock.fileno()}"]
        config.accesslog = None
        config.graceful_timeout = graceful_timeout(self.config.server)
        config.keep_alive_timeout = 30.0

        async def started() -> None:
            # Hypercorn runs the lifespan before it accepts: wait for the registry.
            while gateway_started(self.app) is None:
                await asyncio.sleep(0.01)
            self._ready.set()

        waiter = asyncio.create_task(started())
        try:
            # The gateway's own trigger, as `mlx-gateway launch` uses it on SIGTERM.
            trigger = shutdown_trigger(self.app, self._stop)
            await serve(self.app, config, shutdown_trigger=trigger)  # type: ignore[arg-type]
        finally:
            waiter.cancel()
