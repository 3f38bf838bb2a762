"""The configuration schema: the whole file as one msgspec Struct, the server's
settings (:mod:`.server`), one entry per model, decoded as its kind's Struct
(:mod:`.kinds`: the settings every entry has in :mod:`.entry`, each kind's own in
``config/kinds/<kind>.py``), and the routes (:mod:`.routes`)."""

from __future__ import annotations

from typing import Annotated

import msgspec

from mlx_gateway.protocol.kinds import MODEL_TYPES
from mlx_gateway.supervisor.config.distributed import DistributedConfig
from mlx_gateway.supervisor.config.entry import ModelConfig
from mlx_gateway.supervisor.config.errors import ConfigError
from mlx_gateway.supervisor.config.kinds import ModelEntry
from mlx_gateway.supervisor.config.kinds.image import IMAGE_SIZE_MULTIPLE
from mlx_gateway.supervisor.config.realtime import RealtimeConfig
from mlx_gateway.supervisor.config.routes import RouteConfig
from mlx_gateway.supervisor.config.server import (
    LOG_LEVELS,
    PeerConfig,
    ServerConfig,
    WyomingConfig,
)
from mlx_gateway.supervisor.config.tools import McpServerConfig, ToolsConfig

__all__ = [
    "IMAGE_SIZE_MULTIPLE",
    "LOG_LEVELS",
    "MODEL_TYPES",
    "ConfigError",
    "DistributedConfig",
    "GatewayConfig",
    "McpServerConfig",
    "ModelConfig",
    "PeerConfig",
    "RealtimeConfig",
    "RouteConfig",
    "ServerConfig",
    "ToolsConfig",
    "WyomingConfig",
]


class GatewayConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The whole configuration: server settings and at least one model."""

    server: ServerConfig = msgspec.field(default_factory=ServerConfig)
    models: Annotated[list[ModelEntry], msgspec.Meta(min_length=1)]
    """The served models, each decoded as its ``model_type``'s Struct (:mod:`.kinds`)."""
    routes: list[RouteConfig] = msgspec.field(default_factory=list)
    """Served names standing for a list of models with a strategy (:mod:`.routes`)."""
    realtime: RealtimeConfig = msgspec.field(default_factory=RealtimeConfig)
    """The speech models of ``/v1/realtime`` sessions (:mod:`.realtime`)."""
    tools: ToolsConfig = msgspec.field(default_factory=ToolsConfig)
    """The tools the gateway runs itself: MCP servers, web search and fetch (:mod:`.tools`)."""
