"""Loading a config: from a YAML file, from ``--model-path``, with CLI overrides."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from mlx_gateway.protocol.kinds import DEFAULT_MODEL_TYPE
from mlx_gateway.supervisor.config.checks import _check
from mlx_gateway.supervisor.config.context import _Ctx
from mlx_gateway.supervisor.config.convert import _convert
from mlx_gateway.supervisor.config.hub_cache import with_hub_cache
from mlx_gateway.supervisor.config.keys import _SERVER_KEYS, _SERVER_RENAMES, unknown_key
from mlx_gateway.supervisor.config.libraries import with_libraries
from mlx_gateway.supervisor.config.normalize import _normalize, _normalize_server
from mlx_gateway.supervisor.config.pulled import with_pulled
from mlx_gateway.supervisor.config.schema import (
    ConfigError,
    GatewayConfig,
    ServerConfig,
)
from mlx_gateway.supervisor.config.yaml_positions import _parse_yaml

# --------------------------------------------------------------------------- public


def _build(ctx: _Ctx, raw: Any) -> GatewayConfig:
    config = _convert(ctx, _normalize(ctx, raw), GatewayConfig)
    _check(ctx, config)
    return with_libraries(with_pulled(with_hub_cache(config)))


def load_config(path: str | Path) -> GatewayConfig:
    """Read and validate a YAML config file.

    Accepts our own keys and those of cubist38/mlx-openai-server multi-model files.
    Relative paths in the file (``model_path``, ``chat_template_file``, ``python``,
    ``runtime_dir``) resolve against the file's folder and are stored absolute.

    Raises:
        ConfigError: the file is missing, unreadable, not YAML, or not a valid config.
    """
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {file!r} not found", file=file) from None
    except IsADirectoryError:
        raise ConfigError(f"config file {file!r} is a directory", file=file) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {file!r}: {exc}", file=file) from None
    data, positions = _parse_yaml(text, file)
    return _build(_Ctx(file, Path(path).absolute().parent, positions), data)


def config_from_model_path(
    model_path: str | Path,
    model_type: str = DEFAULT_MODEL_TYPE,
    served_model_name: str | None = None,
    *,
    model_options: Mapping[str, Any] | None = None,
    **server_overrides: Any,
) -> GatewayConfig:
    """A one-model config, as for ``mlx-gateway launch --model-path X``.

    ``server_overrides`` set :class:`ServerConfig` fields (``None`` values are skipped,
    so CLI options left out keep their defaults); ``model_options`` sets further
    :class:`ModelConfig` fields. A relative ``model_path`` resolves against the
    current directory. Validation is the same as for a file.

    Raises:
        ConfigError: a value is invalid (the message names the setting).
    """
    model: dict[str, Any] = {"model_path": str(model_path), "model_type": model_type}
    if served_model_name is not None:
        model["served_model_name"] = served_model_name
    model.update(model_options or {})
    server = {key: value for key, value in server_overrides.items() if value is not None}
    return _build(_Ctx(None, Path.cwd(), {}), {"server": server, "models": [model]})


def override_server(config: GatewayConfig, **overrides: Any) -> GatewayConfig:
    """``config`` with some server settings replaced, validated like the file's.

    For command-line options such as ``--port`` given with ``--config``; ``None``
    values are skipped. Returns a new :class:`GatewayConfig` sharing the models.

    Raises:
        ConfigError: an unknown setting or an invalid value (the message names it).
    """
    ctx = _Ctx(None, Path.cwd(), {})
    given = {key: value for key, value in overrides.items() if value is not None}
    for key in given:
        if key not in _SERVER_KEYS and key not in _SERVER_RENAMES:
            raise unknown_key(ctx, ("server",), key, _SERVER_KEYS)
    changed = _normalize_server(ctx, [(("server", key), value) for key, value in given.items()])
    fields = {**msgspec.structs.asdict(config.server), **changed}
    server = _convert(ctx, fields, ServerConfig, at=("server",))
    return msgspec.structs.replace(config, server=server)
