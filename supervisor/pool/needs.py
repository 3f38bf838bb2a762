"""Measured needs remembered across gateway restarts: a small JSON file.

A model's measured need (the most memory its worker reported) is worth more than
any estimate, so it is kept in ``$MLX_GATEWAY_CACHE_DIR/needs.json`` (default
``$XDG_CACHE_HOME/mlx-gateway``, i.e. ``~/.cache/mlx-gateway``). An entry is keyed
by the model's path and the settings that change its memory (kind, context, slots,
KV cache settings), so changing one of them starts from the estimate again.
Only heartbeats of a worker that runs requests, or ran more of them since, are
learned from (:func:`learns_from`): a refused request teaches nothing.
A file that cannot be read or written only costs the memory of the figures: the
gateway logs it and goes on.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from mlx_gateway.protocol.messages import Heartbeat
from mlx_gateway.supervisor.config import ModelConfig

if TYPE_CHECKING:
    from mlx_gateway.supervisor.pool.owner_events import WorkerProcess

log = logging.getLogger("mlx_gateway.placement")

FILE_NAME = "needs.json"
GROWTH_TO_WRITE = 1.05
"""A measured need is written again once it grew by this factor."""


def learns_from(beat: Heartbeat, proc: WorkerProcess | None) -> bool:
    """Whether the memory of ``beat`` may raise the model's measured need: only
    while requests run or after more of them ran to their ``Done``. A request
    refused before it ran (a prompt over the context, tokenized to find out) may
    leave the process larger, but says nothing of what the model needs."""
    if proc is None:
        return False
    ran = beat.finished > proc.finished_seen
    proc.finished_seen = max(proc.finished_seen, beat.finished)
    return ran or beat.inflight > 0


def default_path() -> Path:
    if configured := os.environ.get("MLX_GATEWAY_CACHE_DIR"):
        return Path(configured).expanduser() / FILE_NAME
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(cache) / "mlx-gateway" / FILE_NAME


def key_of(config: ModelConfig) -> str:
    """The settings that decide how much memory the model's worker uses."""
    return "|".join(
        str(part)
        for part in (
            config.model_path,
            config.worker_kind,
            config.context_length,
            config.max_concurrency,
            config.prompt_cache_bytes,
            config.kv_bits,
            config.kv_group_size,
            config.max_kv_size,
        )
    )


class NeedBook:
    """Measured needs by :func:`key_of`, read once and written when they grow."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path if path is not None else default_path()
        self._written: dict[str, int] = self._read()
        self._needs = dict(self._written)

    def remembered(self, config: ModelConfig) -> int:
        """The need measured for this model and settings (0: never measured)."""
        return self._needs.get(key_of(config), 0)

    def record(self, config: ModelConfig, measured: int) -> int:
        """Note a measurement; return the model's measured need (the largest seen)."""
        key = key_of(config)
        need = max(self._needs.get(key, 0), measured)
        self._needs[key] = need
        if need > self._written.get(key, 0) * GROWTH_TO_WRITE:
            self._write(key, need)
        return need

    def _read(self) -> dict[str, int]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("ignoring the remembered memory needs in %s: %s", self.path, exc)
            return {}
        if not isinstance(data, dict):
            return {}
        return {k: v for k, v in data.items() if isinstance(v, int) and v > 0}

    def _write(self, key: str, need: int) -> None:
        self._written[key] = need
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            on_disk = self._read()
            on_disk[key] = max(on_disk.get(key, 0), need)  # another gateway may share it
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".needs-")
            with os.fdopen(fd, "w") as out:
                json.dump(on_disk, out, indent=1, sort_keys=True)
            os.replace(tmp, self.path)
        except OSError as exc:
            log.warning("cannot remember memory needs in %s: %s", self.path, exc)
            with contextlib.suppress(OSError, UnboundLocalError):
                os.unlink(tmp)
