"""What a service runs: the absolute command, config and environment, found once
for both service managers.

The command is the ``mlx-gateway`` script installed beside this interpreter (a
``uv tool install``, a venv, the clone's ``.venv``): its absolute path, symlinks
kept (a venv's ``python`` is a link whose target is not the venv). The config is
made absolute. The environment carries what the gateway and its workers read and
a login service would not have: the Hugging Face cache and offline settings, our
cache folder, and ``PATH``. ``HF_TOKEN`` is not written into a unit file (it is a
secret): ``huggingface-cli login`` stores one the workers find.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mlx_gateway.supervisor.config import GatewayConfig, load_config

NAME = "mlx-gateway"
PASSED_ON = (
    "HF_HOME",
    "HF_HUB_CACHE",
    "HF_HUB_OFFLINE",
    "HF_ENDPOINT",
    "MLX_GATEWAY_CACHE_DIR",
    "PATH",
)
STOP_MARGIN = 15
"""Seconds a service manager waits beyond ``shutdown_grace`` before it kills: the
worker stop escalation (1 s + SIGTERM + 3 s) and the HTTP drain fit in it."""


class ServiceError(Exception):
    """Why the service command could not do it, worded for the user."""


@dataclass
class Plan:
    command: list[str]
    config: Path
    env: dict[str, str] = field(default_factory=dict)
    stop_timeout: int = 20
    url: str = "http://127.0.0.1:8000"

    @property
    def workdir(self) -> Path:
        return self.config.parent


def gateway_command() -> list[str]:
    script = Path(sys.executable).with_name(NAME)
    if script.is_file() and os.access(script, os.X_OK):
        return [str(Path(os.path.abspath(script)))]
    return [os.path.abspath(sys.executable), "-m", "mlx_gateway.supervisor.cli"]


def make_plan(config_path: str, env: Mapping[str, str]) -> tuple[Plan, GatewayConfig]:
    from mlx_gateway.supervisor.status import default_url

    path = Path(os.path.abspath(os.path.expanduser(config_path)))
    config = load_config(path)  # a broken config fails here, not at the next login
    passed = {key: env[key] for key in PASSED_ON if env.get(key)}
    plan = Plan(
        command=[*gateway_command(), "launch", "--config", str(path)],
        config=path,
        env=passed,
        stop_timeout=int(config.server.shutdown_grace) + STOP_MARGIN,
        url=default_url(config),
    )
    return plan, config
