"""Start and stop the Wyoming TCP server, and its mDNS announcement."""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import Any

from wyoming.server import AsyncTcpServer

from mlx_gateway.supervisor.api.wyoming.handler import WyomingHandler
from mlx_gateway.supervisor.config.schema import WyomingConfig
from mlx_gateway.supervisor.http.auth import is_loopback
from mlx_gateway.supervisor.recorder import Recorder

log = logging.getLogger("mlx_gateway.wyoming")


class WyomingServer:
    """The ``server.wyoming`` listener, serving the models of ``registry``."""

    def __init__(self, config: WyomingConfig, registry: Any, metrics: Recorder) -> None:
        self.config = config
        self._server = AsyncTcpServer(config.host, config.port)
        self._factory = partial(WyomingHandler, registry=registry, config=config, metrics=metrics)
        self._zeroconf: Any = None

    async def start(self) -> None:
        await self._server.start(self._factory)
        config = self.config
        log.info("serving the speech models over Wyoming on tcp://%s:%d", config.host, config.port)
        if not is_loopback(config.host):
            log.warning(
                "Wyoming listens on %s: it has no authentication, so anyone who can reach "
                "this machine can use the speech models through it (server.wyoming.host)",
                config.host,
            )
        if config.zeroconf:
            await self._announce()

    async def _announce(self) -> None:
        try:
            from wyoming.zeroconf import HomeAssistantZeroconf
        except ImportError:
            log.warning(
                "server.wyoming.zeroconf is on but the zeroconf package is missing: "
                "pip install zeroconf (Home Assistant can still add the server by hand)"
            )
            return
        host = None if self.config.host in ("0.0.0.0", "::") else self.config.host
        try:
            self._zeroconf = HomeAssistantZeroconf(port=self.config.port, host=host)
            await self._zeroconf.register_server()
            log.info("announced as _wyoming._tcp (mDNS) for Home Assistant")
        except OSError as exc:
            log.warning("the mDNS announcement failed: %s", exc)

    async def stop(self) -> None:
        await self._server.stop()
        if self._zeroconf is not None:
            # wyoming's HomeAssistantZeroconf has no close(): close the zeroconf it holds
            await asyncio.shield(self._zeroconf._aiozc.async_close())  # noqa: SLF001
