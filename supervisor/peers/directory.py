"""What this gateway knows of its peers: which are up, which models each serves,
and how many requests it has in flight at each (for the least-loaded choice)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from mlx_gateway.supervisor.config.schema import PeerConfig

log = logging.getLogger("mlx_gateway.peers")

VIA_HEADER = "x-mlx-gateway-via"
"""Set on every request a gateway sends a peer (forwarded requests and health checks):
the peer then serves it itself and lists only its own models, so two gateways that
peer each other never bounce a request between them."""
PEER_HEADER = "x-mlx-gateway-peer"
"""Set on responses relayed from a peer: that peer's name."""


@dataclass
class Peer:
    """One peer: its settings, its last health check, and this gateway's load on it."""

    config: PeerConfig
    up: bool = False
    models: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Served id → the model object the peer listed (as it sent it)."""
    names: dict[str, str] = field(default_factory=dict)
    """Every name routing to a model there (ids and aliases) → its id."""
    inflight: int = 0
    """Requests this gateway is forwarding to it right now."""
    forwarded: int = 0
    """Requests this gateway has sent it (answered by it, whatever the status)."""
    failed: int = 0
    """Requests it could not take (unreachable, or 502/503/504 passed to another replica)."""
    error: str | None = None
    checked_at: float | None = None

    @property
    def name(self) -> str:
        return self.config.name

    def headers(self) -> dict[str, str]:
        headers = {VIA_HEADER: "1"}
        if self.config.api_key:
            headers["authorization"] = f"Bearer {self.config.api_key}"
        return headers

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "url": self.config.url,
            "state": "up" if self.up else "down",
            "models": sorted(self.models),
            "inflight": self.inflight,
            "error": self.error,
            "checked_at": self.checked_at,
        }


class PeerDirectory:
    """The peers of one gateway, health-checked every ``interval`` seconds."""

    def __init__(
        self,
        peers: list[PeerConfig],
        *,
        interval: float = 10.0,
        timeout: float = 5.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.peers = [Peer(config) for config in peers]
        self.interval = interval
        self.timeout = timeout
        # No read timeout: a generation may think for minutes before its first byte.
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(None, connect=timeout),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
            transport=transport,
        )
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Check every peer once (at most ``timeout`` seconds), then keep checking."""
        await self.check_all()
        self._task = asyncio.create_task(self._check_forever())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.client.aclose()

    async def _check_forever(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.check_all()

    async def check_all(self) -> None:
        await asyncio.gather(*(self.check(peer) for peer in self.peers))

    async def check(self, peer: Peer) -> None:
        """``GET /v1/models`` on ``peer``: up with its model list, or down with why."""
        url = f"{peer.config.url}/v1/models"
        try:
            response = await self.client.get(url, headers=peer.headers(), timeout=self.timeout)
            if response.status_code in (401, 403):
                raise _Refused(
                    f"it refused this gateway's key (HTTP {response.status_code}); set "
                    "server.peers[].api_key to one of its server.api_keys"
                )
            response.raise_for_status()
            listed = response.json()["data"]
            models = {str(m["id"]): m for m in listed if isinstance(m, dict) and "id" in m}
        except (httpx.HTTPError, _Refused, ValueError, KeyError, TypeError) as exc:
            self.mark_down(peer, _describe(exc))
            return
        finally:
            peer.checked_at = time.time()
        names = {}
        for model_id, model in models.items():
            names[model_id] = model_id
            for alias in model.get("aliases") or ():
                if isinstance(alias, str):
                    names.setdefault(alias, model_id)
        if not peer.up:
            log.info("peer %s (%s) is up: %s", peer.name, peer.config.url, ", ".join(models))
        peer.up, peer.error, peer.models, peer.names = True, None, models, names

    def mark_down(self, peer: Peer, why: str) -> None:
        if peer.up or peer.error != why:
            log.warning("peer %s (%s) is down: %s", peer.name, peer.config.url, why)
        peer.up, peer.error = False, why

    def serving(self, name: str) -> list[Peer]:
        """The peers that are up and serve ``name`` (a served name or an alias)."""
        return [peer for peer in self.peers if peer.up and name in peer.names]

    def last_known(self, name: str) -> list[Peer]:
        """The peers that are down but served ``name`` when last seen up."""
        return [peer for peer in self.peers if not peer.up and name in peer.names]

    def status(self) -> list[dict[str, Any]]:
        return [peer.status() for peer in self.peers]


class _Refused(Exception):
    pass


def _describe(exc: BaseException) -> str:
    if isinstance(exc, httpx.HTTPStatusError):
        return f"GET /v1/models answered HTTP {exc.response.status_code}"
    if isinstance(exc, httpx.TimeoutException):
        return "no answer in time (server.peer_timeout)"
    if isinstance(exc, httpx.HTTPError):
        return f"cannot reach it: {type(exc).__name__}: {exc}".rstrip(": ")
    if isinstance(exc, _Refused):
        return str(exc)
    return f"its /v1/models is not an OpenAI model list ({type(exc).__name__}: {exc})"
