"""Memory accounting for the budget: sizes, the budget, and each model's need.

Pure functions plus a look at the disk (weight files); no MLX. A model's need is
first *estimated* (weights on disk times a factor for its kind, plus an allowance for
the KV cache of ``max_concurrency`` full contexts), then replaced by what its worker
*measured* once it reported (see :func:`measured_need`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mlx_gateway.protocol.messages import Memory
from mlx_gateway.supervisor.config import ModelConfig
from mlx_gateway.supervisor.config.sizes import parse_size

KIND_FACTOR = {"lm": 1.15, "vlm": 1.25, "embeddings": 1.5, "whisper": 1.5, "image": 1.4}
"""Resident memory per byte of weights on disk, before any request (runtime, buffers)."""
KV_BYTES_PER_ELEMENT = 2  # fp16/bf16 KV cache
WEIGHT_SUFFIXES = (".safetensors", ".npz", ".bin", ".gguf")


def format_size(n: int) -> str:
    for unit, scale in (("GB", 1000**3), ("MB", 1000**2), ("kB", 1000)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def hub_cache_dir() -> Path:
    if cache := os.environ.get("HF_HUB_CACHE"):
        return Path(cache)
    home = os.environ.get("HF_HOME") or os.path.join(Path.home(), ".cache", "huggingface")
    return Path(home) / "hub"


def model_dir(model_path: str) -> Path | None:
    """The local directory holding the model's files, if there is one already."""
    local = Path(model_path).expanduser()
    if local.is_dir():
        return local
    repo = hub_cache_dir() / f"models--{model_path.replace('/', '--')}" / "snapshots"
    if repo.is_dir():
        snapshots = sorted(repo.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
        return snapshots[0] if snapshots else None
    return None


def weights_on_disk(directory: Path) -> int:
    total = 0
    for path in directory.rglob("*"):
        if path.suffix in WEIGHT_SUFFIXES and path.is_file():
            total += path.stat().st_size  # follows the hub cache's symlinks
    return total


def kv_allowance(directory: Path, config: ModelConfig) -> int:
    """Bytes of KV cache for ``max_concurrency`` sequences of the full context."""
    try:
        meta = json.loads((directory / "config.json").read_text())
    except (OSError, ValueError):
        return 0
    meta = meta.get("text_config", meta)
    layers = meta.get("num_hidden_layers") or 0
    heads = meta.get("num_attention_heads") or 0
    kv_heads = meta.get("num_key_value_heads") or heads
    hidden = meta.get("hidden_size") or 0
    head_dim = meta.get("head_dim") or (hidden // heads if heads else 0)
    context = config.context_length or meta.get("max_position_embeddings") or 0
    per_token = 2 * layers * kv_heads * head_dim * KV_BYTES_PER_ELEMENT
    return int(per_token * context * config.max_concurrency)


def estimate_need(config: ModelConfig) -> int | None:
    """The model's memory need before it ever ran, or ``None`` when unknown (not
    downloaded yet and no ``memory_estimate`` in its entry)."""
    if config.memory_estimate is not None:
        return parse_size(config.memory_estimate)
    directory = model_dir(config.model_path)
    if directory is None:
        return None
    weights = weights_on_disk(directory)
    factor = KIND_FACTOR.get(config.worker_kind, 1.3)
    kv = kv_allowance(directory, config) if config.worker_kind in ("lm", "vlm") else 0
    return int((weights * factor + kv) * local_ranks(config) / total_ranks(config))


def total_ranks(config: ModelConfig) -> int:
    """The processes a model runs as: 1, or its ``distributed`` group's size."""
    spread = config.distributed
    return 1 if spread is None else len(spread.hosts) * spread.ranks_per_host


def local_ranks(config: ModelConfig) -> int:
    """Those of them on this machine (the first host, rank 0's): each holds an
    equal share of the weights and KV cache, which counts against this budget; the
    other hosts' shares do not."""
    spread = config.distributed
    if spread is None:
        return 1
    return sum(host == spread.hosts[0] for host in spread.hosts) * spread.ranks_per_host


def measured_need(memory: Memory) -> int:
    """What a running worker uses: its RSS, or MLX's own figures where larger
    (on Apple silicon MLX buffers are not all counted in RSS)."""
    return max(memory.rss, memory.mlx_active + memory.mlx_cache)
