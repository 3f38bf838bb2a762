"""Open WebUI: it has no config file of its own to merge into (its settings live in
its database, seeded from environment variables at its first start), so
``connect open-webui`` writes those variables to
``$XDG_CONFIG_HOME/mlx-gateway/open-webui.env``, for ``docker run --env-file``
or to source before ``open-webui serve``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from mlx_gateway.supervisor.connect.client import Client, config_home
from mlx_gateway.supervisor.connect.target import Target


def path(env: Mapping[str, str]) -> Path:
    return config_home(env) / "mlx-gateway" / "open-webui.env"


def render(current: str | None, target: Target, file: Path) -> str:
    del current, file  # written whole: the file is ours
    lines = [
        "# Open WebUI → mlx-gateway (written by `mlx-gateway connect open-webui`)",
        f"OPENAI_API_BASE_URL={target.v1}",
        f"OPENAI_API_KEY={target.key or 'mlx-gateway'}",
        f"DEFAULT_MODELS={target.model}",
        "ENABLE_OLLAMA_API=false",
    ]
    return "\n".join(lines) + "\n"


def usage(target: Target) -> str:
    return (
        "start Open WebUI with these variables, e.g. `set -a; . <file>; set +a; open-webui "
        "serve`, or `docker run --env-file <file> …` (from a container the gateway is "
        "host.docker.internal, not 127.0.0.1: edit OPENAI_API_BASE_URL). Open WebUI reads "
        "them at its first start; later, change the connection in its Admin settings"
    )


CLIENT = Client("open-webui", path, render, usage)
