"""The gateway's own cache folder, shared by the gateway and its workers:
``$MLX_GATEWAY_CACHE_DIR``, else ``$XDG_CACHE_HOME/mlx-gateway``
(``~/.cache/mlx-gateway``). It holds ``pulled.json``, the models pulled by their
Ollama names (``ollama/``, laid out as Ollama's own store) and the MLX folders
converted from GGUF files (``gguf/``)."""

from __future__ import annotations

import os
from pathlib import Path


def gateway_cache_dir() -> Path:
    if configured := os.environ.get("MLX_GATEWAY_CACHE_DIR"):
        return Path(configured).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(cache) / "mlx-gateway"
