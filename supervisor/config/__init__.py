"""Gateway configuration: a YAML file turned into validated msgspec Structs.

:func:`load_config` reads the file, :func:`config_from_model_path` builds the same
structures for ``mlx-gateway launch --model-path X``. Both run one pipeline:

1. parse the YAML (safe constructors only) and remember the line of every key and
   value (``yaml.compose`` node marks);
2. normalize the raw mapping into our schema: accept the keys of
   cubist38/mlx-openai-server configs (renaming the ones we act on, warning about the
   ones we ignore), reject unknown keys with a close-match suggestion;
3. convert with msgspec (types and ranges; each model entry as the Struct of its
   ``model_type``, so a key of another kind is refused, see :mod:`.kinds`) and
   translate its error path (``$.models[1].temperature``) back to the key the user
   wrote and its line;
4. check what types cannot express: local paths, unique names, and each kind's own
   checks (``ModelConfig.check``).

Every problem raises :class:`ConfigError`, whose message names the file, the line,
the key path, the model entry, and what to change.

Invariant: this module never imports MLX or a backend (it runs in the gateway).
"""

from __future__ import annotations

from mlx_gateway.supervisor.config.load import config_from_model_path, load_config, override_server
from mlx_gateway.supervisor.config.schema import (
    LOG_LEVELS,
    MODEL_TYPES,
    ConfigError,
    GatewayConfig,
    McpServerConfig,
    ModelConfig,
    ServerConfig,
    ToolsConfig,
)

__all__ = [
    "LOG_LEVELS",
    "MODEL_TYPES",
    "ConfigError",
    "GatewayConfig",
    "McpServerConfig",
    "ModelConfig",
    "ServerConfig",
    "ToolsConfig",
    "config_from_model_path",
    "load_config",
    "override_server",
]
