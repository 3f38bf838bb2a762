"""Continue (the VS Code / JetBrains extension): ``~/.continue/config.yaml``.

Puts one model entry first in ``models`` (provider ``openai``, the gateway's
``/v1`` as ``apiBase``, its key, and when its context length is known
``defaultCompletionOptions`` ``contextLength`` and ``maxTokens``, a quarter of
it), named ``mlx-gateway: <model>``; an entry of that
name from an earlier ``connect`` is replaced, every other entry and key stays. A
new file gets the ``name``/``version``/``schema`` header Continue expects. YAML
comments of an existing file are not carried over (the backup keeps them).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from mlx_gateway.supervisor.connect.client import PROVIDER, Client, home
from mlx_gateway.supervisor.connect.files import ConnectError
from mlx_gateway.supervisor.connect.target import Target

PREFIX = f"{PROVIDER}: "


def path(env: Mapping[str, str]) -> Path:
    return home(env) / ".continue" / "config.yaml"


def _load(current: str | None, file: Path) -> dict[str, Any]:
    if current is None or not current.strip():
        return {"name": "Local config", "version": "1.0.0", "schema": "v1"}
    try:
        data = yaml.safe_load(current)
    except yaml.YAMLError as exc:
        raise ConnectError(
            f"{file} is not valid YAML ({exc}); fix it, then run connect again"
        ) from None
    if not isinstance(data, dict):
        raise ConnectError(f"{file} holds a YAML {type(data).__name__}, not a mapping")
    return data


def render(current: str | None, target: Target, file: Path) -> str:
    config = _load(current, file)
    models = config.get("models") or []
    if not isinstance(models, list):
        raise ConnectError(f"{file}: `models` is a {type(models).__name__}, not a list")
    entry: dict[str, Any] = {
        "name": PREFIX + target.model,
        "provider": "openai",
        "model": target.model,
        "apiBase": target.v1,
    }
    if target.key:
        entry["apiKey"] = target.key
    if target.window is not None:
        entry["defaultCompletionOptions"] = {
            "contextLength": target.window,
            "maxTokens": max(1024, target.window // 4),
        }
    entry["roles"] = ["chat", "edit", "apply"]
    kept = [
        m for m in models if not (isinstance(m, dict) and str(m.get("name", "")).startswith(PREFIX))
    ]
    config["models"] = [entry, *kept]
    return yaml.safe_dump(config, sort_keys=False, allow_unicode=True)


def usage(target: Target) -> str:
    return f"reload Continue: its first model is '{PREFIX}{target.model}'"


CLIENT = Client("continue", path, render, usage)
