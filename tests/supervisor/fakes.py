"""Helpers to run the real supervisor against the fake worker."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from mlx_gateway.protocol.spec import WorkerSpec, encode_spec
from mlx_gateway.supervisor.config import GatewayConfig, ModelConfig, ServerConfig

FAKE_WORKER = Path(__file__).with_name("fake_worker.py")


def fake_command(spec: WorkerSpec, endpoint: str) -> list[str]:
    """Start the fake worker exactly as the real one is started."""
    return [
        sys.executable,
        str(FAKE_WORKER),
        "--endpoint",
        endpoint,
        "--spec",
        encode_spec(spec),
        "--parent-pid",
        str(os.getpid()),
    ]


def fake_config(*models: dict[str, Any], **server: Any) -> GatewayConfig:
    """A config of fake models: each dict gives at least ``model_path='fake/<mode>'``."""
    server.setdefault("shutdown_grace", 1.0)
    return GatewayConfig(
        server=ServerConfig(**server),
        models=[ModelConfig(**{"served_model_name": m["model_path"], **m}) for m in models],
    )
