"""What every client module of ``connect`` provides, and JSON merging they share."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlx_gateway.supervisor.connect.files import ConnectError
from mlx_gateway.supervisor.connect.needs import Needs
from mlx_gateway.supervisor.connect.target import Target

PROVIDER = "mlx-gateway"
"""The name of the provider (profile, model entry) ``connect`` writes in each client."""


@dataclass(frozen=True)
class Client:
    name: str
    path: Callable[[Mapping[str, str]], Path]
    """Its config file, from the environment (``HOME``, ``XDG_CONFIG_HOME``, its own)."""
    render: Callable[[str | None, Target, Path], str]
    """The file's new text from its current one (``None``: absent)."""
    usage: Callable[[Target], str]
    """How to use it now, printed after the write."""
    needs: Needs | None = None
    """What it needs of a model (coding clients): ``connect`` chooses by it."""


def home(env: Mapping[str, str]) -> Path:
    return Path(env.get("HOME") or Path.home())


def config_home(env: Mapping[str, str]) -> Path:
    return Path(env.get("XDG_CONFIG_HOME") or home(env) / ".config")


def load_json_object(current: str | None, path: Path) -> dict[str, Any]:
    """The file's JSON object (empty when absent or blank); a clear error otherwise."""
    if current is None or not current.strip():
        return {}
    try:
        data = json.loads(current)
    except ValueError as exc:
        raise ConnectError(
            f"{path} is not valid JSON ({exc}); fix it or move it away, then run connect again"
        ) from None
    if not isinstance(data, dict):
        raise ConnectError(f"{path} holds a JSON {type(data).__name__}, not an object")
    return data


def object_at(data: dict[str, Any], key: str, path: Path) -> dict[str, Any]:
    """``data[key]``, made an empty object when absent; an error when it is not one."""
    value = data.setdefault(key, {})
    if not isinstance(value, dict):
        raise ConnectError(f'{path}: "{key}" is a {type(value).__name__}, not an object')
    return value


def dump_json(data: Mapping[str, Any]) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
