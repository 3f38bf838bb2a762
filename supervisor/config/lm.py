"""What a language-model entry tells its worker beyond the common WorkerSpec fields.

No I/O and no MLX here: the gateway imports it.
"""

from __future__ import annotations

from typing import Any

from mlx_gateway.supervisor.config import ModelConfig, ServerConfig
from mlx_gateway.supervisor.config.sizes import parse_size

LM_KIND = "lm"
DEFAULT_ADAPTER = "default"
"""The id ``adapter_path`` mounts its adapter under (mlx_lm.server's one adapter)."""
ADAPTER_NONE = "none"
"""The ``adapter`` value that asks for the base model."""


def adapter_id_problem(adapter_id: str) -> str | None:
    """Why ``adapter_id`` cannot name an adapter, or ``None`` when it can."""
    if not adapter_id or any(c.isspace() for c in adapter_id):
        return "an adapter id must be a non-empty word without spaces"
    if "+" in adapter_id:
        return "'+' stacks adapters in a request, so an adapter id cannot contain it"
    if adapter_id == ADAPTER_NONE:
        return "'none' asks for the base model, so it cannot be an adapter id"
    return None


def adapter_folder_problem(path: str) -> str | None:
    """Why the folder ``path`` is not an mlx-lm adapter, or ``None`` (reads no file)."""
    import os

    for name in ("adapter_config.json", "adapters.safetensors"):
        if not os.path.isfile(os.path.join(path, name)):
            return (
                f"{path!r} has no {name}: an adapter is the folder mlx_lm.lora writes "
                "(adapter_config.json and adapters.safetensors)"
            )
    return None


def worker_options(config: ModelConfig) -> dict[str, Any]:
    """The ``WorkerSpec.options`` of a language model (see ``workers/lm.py``)."""
    return {
        "prompt_cache_bytes": parse_size(config.prompt_cache_bytes),
        "prompt_cache_entries": config.prompt_cache_entries,
        "stream_interval": config.stream_interval,
        **kv_options(config),
        **draft_options(config),
    }


def draft_options(config: ModelConfig) -> dict[str, Any]:
    """The draft model of speculative decoding (``workers/speculative.py``), if any."""
    if config.draft_model_path is None:
        return {}
    return {
        "draft_model_path": config.draft_model_path,
        "num_draft_tokens": config.num_draft_tokens,
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


def disk_tier_options(config: ModelConfig, server: ServerConfig) -> dict[str, Any]:
    """The prompt cache's disk tier (``workers/disk_cache.py``): the directory, this
    model's byte cap and the whole directory's; nothing when no directory is set."""
    folder = config.prompt_cache_dir or server.prompt_cache_dir
    if not folder:
        return {}
    total = parse_size(server.prompt_cache_disk_bytes)
    own = config.prompt_cache_disk_bytes
    return {
        "prompt_cache_dir": folder,
        "prompt_cache_disk_bytes": total if own is None else min(parse_size(own), total),
        "prompt_cache_dir_bytes": total,
    }
