"""The gateway's services in one typed object, and the one way to reach it.

The app's lifespan (:func:`...app.create_app`) builds one :class:`Gateway` once its
registry and peers are started and :func:`install` puts it on the app: the only
thing the app's ``state`` holds. A route reaches it with :func:`gateway_of`
(``gateway_of(request).registry``), a surface that runs outside a request (the
Realtime session, the MCP server's tools) is handed the fields it needs, and the
floors below (``engine/``, ``pool/``, ``http/``, ``peers/``) never see it: each
function there takes the fields it uses (a ``ServerConfig``, the registry, the MCP
servers).

The services:

``config``
    the config the gateway started with (a reload replaces only the registry's:
    ``registry.config``);
``registry``
    the served models (:class:`~.pool.registry.Registry`): every worker;
``recorder``
    what each request did, for ``/metrics``; its ``usage`` is the usage database
    when ``server.usage`` is on (:class:`~.usage.store.UsageStore`);
``peers``
    the peer gateways (:class:`~.peers.directory.PeerDirectory`, empty without
    ``server.peers``);
``mcp``
    the config's MCP servers (:class:`~.tools.McpServers`), which the tool loop runs;
``log_hub``
    the recent log lines and their live streams (the web UI's log);
``responses``, ``images``
    the stored responses of the Responses API and the images served by URL;
``openapi``
    the ``/openapi.json`` document, built again when the models or keys change;
``prompt_history``, ``message_digests``
    what the cache diagnostics compare a prompt with;
``models_lock``
    one change of the served models at a time (Ollama's pull, create, copy, delete).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.requests import HTTPConnection

from mlx_gateway.supervisor.config import GatewayConfig
from mlx_gateway.supervisor.engine.message_digests import MessageDigests
from mlx_gateway.supervisor.engine.prompt_parts import PromptHistory
from mlx_gateway.supervisor.http.image_store import ImageStore
from mlx_gateway.supervisor.http.log_hub import LogHub
from mlx_gateway.supervisor.http.multipart import MIB
from mlx_gateway.supervisor.http.openapi import DocumentCache
from mlx_gateway.supervisor.http.response_store import ResponseStore
from mlx_gateway.supervisor.peers.directory import PeerDirectory
from mlx_gateway.supervisor.pool.registry import Registry
from mlx_gateway.supervisor.recorder import Recorder
from mlx_gateway.supervisor.tools import McpServers


@dataclass(eq=False)
class Gateway:
    """The services of one running gateway (see the module's docstring)."""

    config: GatewayConfig
    registry: Registry
    recorder: Recorder
    peers: PeerDirectory
    mcp: McpServers
    log_hub: LogHub
    responses: ResponseStore = field(init=False)
    images: ImageStore = field(init=False)
    openapi: DocumentCache = field(default_factory=DocumentCache)
    prompt_history: PromptHistory = field(default_factory=PromptHistory)
    message_digests: MessageDigests = field(default_factory=MessageDigests)
    models_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def __post_init__(self) -> None:
        server = self.config.server
        self.responses = ResponseStore(
            server.response_store_ttl, int(server.response_store_mb * 1024**2)
        )
        self.images = ImageStore(int(server.image_store_mb * MIB), server.image_url_ttl)


def install(app: Starlette, gateway: Gateway) -> None:
    """Make ``gateway`` the services of ``app`` (its lifespan does, once)."""
    app.state.gateway = gateway


def started(app: Starlette) -> Gateway | None:
    """``app``'s gateway, or ``None`` before its lifespan built it."""
    try:
        found = app.state.gateway
    except AttributeError:  # Starlette's State has no such attribute yet
        return None
    if not isinstance(found, Gateway):
        raise TypeError(f"the app's state holds {type(found).__name__}, not a Gateway")
    return found


def gateway_of(where: HTTPConnection | Starlette) -> Gateway:
    """The services of the app serving ``where`` (a request, a WebSocket, or the
    app itself)."""
    app = where if isinstance(where, Starlette) else where.app
    found = started(app)
    if found is None:
        raise RuntimeError("the gateway's lifespan has not started: it has no services yet")
    return found
