"""What a language-model entry tells its worker beyond the common WorkerSpec fields.

No I/O and no MLX here: the gateway imports it.
"""

from __future__ import annotations

from typing import Any

from mlx_gateway.supervisor.config import ModelConfig
from mlx_gateway.supervisor.config.sizes import parse_size

LM_KIND = "lm"


def worker_options(config: ModelConfig) -> dict[str, Any]:
    """The ``WorkerSpec.options`` of a language model (see ``workers/lm.py``)."""
    return {
        "prompt_cache_bytes": parse_size(config.prompt_cache_bytes),
        "prompt_cache_entries": config.prompt_cache_entries,
        "stream_interval": config.stream_interval,
        **kv_options(config),
    }


def kv_options(config: ModelConfig) -> dict[str, Any]:
    """The KV cache settings (``workers/kv.py``); unset ones are left out."""
    options: dict[str, Any] = {}
    if config.kv_bits is not None:
        options["kv_bits"] = config.kv_bits
        options["kv_group_size"] = config.kv_group_size
        options["quantized_kv_start"] = config.quantized_kv_start
    if config.max_kv_size is not None:
        options["max_kv_size"] = config.max_kv_size
    return options
