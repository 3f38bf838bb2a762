"""The memory budget in bytes, with ``auto`` resolved.

On Apple silicon ``auto`` follows MLX's own advice: the GPU's recommended working
set (``mx.device_info()["max_recommended_working_set_size"]``), which is what
Metal can keep resident without paging. The gateway never imports MLX, so a
one-off probe asks it in a child interpreter (the workers' one) once per process;
elsewhere (Linux) or when the probe fails, ``auto`` is 0.75 of RAM.
"""

from __future__ import annotations

import functools
import logging
import platform
import subprocess
import sys

from mlx_gateway.supervisor.config import ServerConfig
from mlx_gateway.supervisor.config.sizes import budget_bytes

log = logging.getLogger("mlx_gateway.placement")

PROBE = (
    "import mlx.core as mx\n"
    "info = mx.device_info() if hasattr(mx, 'device_info') else mx.metal.device_info()\n"
    "print(int(info.get('max_recommended_working_set_size') or 0))\n"
)
PROBE_TIMEOUT = 60.0


def on_apple_silicon() -> bool:
    return sys.platform == "darwin" and platform.machine() == "arm64"


@functools.cache
def recommended_working_set(python: str = sys.executable) -> int | None:
    """MLX's recommended working set in bytes, asked of ``python`` (``None`` when
    MLX does not report one, as on Linux, or cannot be asked)."""
    try:
        done = subprocess.run(
            [python, "-c", PROBE],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("could not ask MLX for its recommended working set: %s", exc)
        return None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines or not lines[-1].isdigit():
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        log.warning("could not ask MLX for its recommended working set: %s", tail)
        return None
    return int(lines[-1]) or None


def resolve_budget(server: ServerConfig) -> int:
    """``server.memory_budget`` in bytes (``auto`` probes MLX on Apple silicon)."""
    budget = server.memory_budget
    recommended = None
    if isinstance(budget, str) and budget.strip().lower() == "auto" and on_apple_silicon():
        recommended = recommended_working_set()
    return budget_bytes(budget, recommended=recommended)
