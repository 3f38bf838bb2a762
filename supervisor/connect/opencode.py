"""opencode: its global ``opencode.json`` (``$XDG_CONFIG_HOME/opencode/``, else
``~/.config/opencode/``).

Adds a ``provider`` ``mlx-gateway`` built on ``@ai-sdk/openai-compatible`` (the
gateway's ``/v1``, its key, every chat model it serves) and makes
``mlx-gateway/<model>`` the default ``model``; each model whose context length is
known gets its ``limit`` (``context``, and ``output``: a quarter of it). Every
other key stays.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from mlx_gateway.supervisor.connect.client import (
    PROVIDER,
    Client,
    config_home,
    dump_json,
    load_json_object,
    object_at,
)
from mlx_gateway.supervisor.connect.target import Target

OUTPUT_SHARE = 4
"""The output limit written is the context length over this."""

SCHEMA = "https://opencode.ai/config.json"


def path(env: Mapping[str, str]) -> Path:
    return config_home(env) / "opencode" / "opencode.json"


def render(current: str | None, target: Target, file: Path) -> str:
    config = load_json_object(current, file)
    config.setdefault("$schema", SCHEMA)
    options: dict[str, str] = {"baseURL": target.v1}
    if target.key:
        options["apiKey"] = target.key
    object_at(config, "provider", file)[PROVIDER] = {
        "npm": "@ai-sdk/openai-compatible",
        "name": "mlx-gateway (local MLX models)",
        "options": options,
        "models": {name: _model(name, target.windows.get(name)) for name in target.models},
    }
    config["model"] = f"{PROVIDER}/{target.model}"
    return dump_json(config)


def _model(name: str, window: int | None) -> dict[str, object]:
    entry: dict[str, object] = {"name": name}
    if window is not None:
        entry["limit"] = {"context": window, "output": max(1024, window // OUTPUT_SHARE)}
    return entry


def usage(target: Target) -> str:
    return f"run `opencode`: its default model is {PROVIDER}/{target.model}"


CLIENT = Client("opencode", path, render, usage)
