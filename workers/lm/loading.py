"""Loading an mlx-lm model: the whole model or this rank's shard, its context length,
the chat template file, and the worker options read at load."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, cast

import mlx.core as mx
from mlx_lm.tokenizer_utils import TokenizerWrapper

from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.workers.lm.adapters import Adapters
from mlx_gateway.workers.lm.disk_cache import DiskCache, model_key
from mlx_gateway.workers.lm.prompt_cache import PromptCache
from mlx_gateway.workers.runtime.contract import LoadError

log = logging.getLogger(__name__)

_UNBOUNDED = 10**7  # tokenizers without a limit report model_max_length ≈ 1e30


def kv_option_names(spec: WorkerSpec) -> list[str]:
    """The options that change what a KV cache holds (part of the disk tier's key)."""
    names = ("kv_bits", "kv_group_size", "quantized_kv_start", "max_kv_size")
    return [name for name in names if name in spec.options]


def option_int(spec: WorkerSpec, key: str, default: int) -> int:
    value = spec.options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise LoadError(f"option {key} must be a whole number ≥ 0, got {value!r}")
    return value


def read_template(path: str) -> str:
    try:
        return Path(path).expanduser().read_text()
    except OSError as exc:
        raise LoadError(f"chat_template_file '{path}' cannot be read: {exc.strerror}") from None


def context_length_of(config: dict[str, Any], tokenizer: TokenizerWrapper) -> int | None:
    for source in (config, config.get("text_config") or {}):
        value = source.get("max_position_embeddings")
        if isinstance(value, int) and value > 0:
            return value
    value = getattr(tokenizer, "model_max_length", None)
    if isinstance(value, int) and 0 < value < _UNBOUNDED:
        return value
    return None


def load_sharded(
    path: str, parallel: str, tokenizer_config: dict[str, Any], spec: WorkerSpec
) -> tuple[Any, Any, dict[str, Any]]:
    """This rank's shard of the model (mlx-lm's ``sharded_load``), over the group
    ``mlx.launch`` set up: every layer split across the ranks (``tensor``) or
    consecutive layers per rank (``pipeline``). Every rank draws the same random
    numbers, so sampled tokens agree across the group."""
    from mlx_lm.utils import sharded_load

    group = mx.distributed.init()
    mx.random.seed(0)
    try:
        loaded = sharded_load(
            path,
            pipeline_group=group if parallel == "pipeline" else None,
            tensor_group=group if parallel == "tensor" else None,
            return_config=True,
            tokenizer_config={"trust_remote_code": spec.trust_remote_code, **tokenizer_config},
            trust_remote_code=spec.trust_remote_code,
        )
    except ValueError as exc:  # the model cannot be split that way
        raise LoadError(f"cannot shard {path} ({parallel} parallel): {exc}") from None
    return cast(tuple[Any, Any, dict[str, Any]], loaded)


PROMPT_CACHE_BYTES = 512 * 1024**2
PROMPT_CACHE_ENTRIES = 32
"""Prompt cache caps when the spec's options leave them out."""


def prompt_cache_for(
    spec: WorkerSpec, model_dir: Path, adapters: Adapters, parallel: object
) -> PromptCache:
    """The prompt cache the spec's options ask for (``model_dir``: the model's
    folder; ``parallel``: the ``distributed`` option), with its disk tier."""
    cache_bytes = option_int(spec, "prompt_cache_bytes", PROMPT_CACHE_BYTES)
    if parallel == "pipeline" and cache_bytes:
        # Each rank holds other layers, so the same cache takes other bytes on
        # each, and a byte bound would evict different entries on different
        # ranks (then their prefills differ and the group falls out of step).
        log.info("prompt cache off: pipeline ranks cannot agree on its bytes")
        cache_bytes = 0
    cache = PromptCache(cache_bytes, option_int(spec, "prompt_cache_entries", PROMPT_CACHE_ENTRIES))
    if folder := spec.options.get("prompt_cache_dir"):
        kv = ",".join(f"{k}={spec.options.get(k)}" for k in sorted(kv_option_names(spec)))

        def disk_tier(adapter: str) -> DiskCache:
            """The disk tier of the base model ("") or of an adapter set: a folder
            whose key names the adapters' files, so a changed adapter misses."""
            return DiskCache(
                Path(str(folder)).expanduser(),
                model_key(spec.model_path, model_dir, adapter=adapter, kv=kv),
                option_int(spec, "prompt_cache_disk_bytes", 0),
                option_int(spec, "prompt_cache_dir_bytes", 0) or None,
            )

        cache.disk = disk_tier("")
        cache.space_disk = lambda space: disk_tier(adapters.identity(space))
    return cache
