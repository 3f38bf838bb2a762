"""``context_length: auto``: the context a model gets at the start of its worker.

The largest multiple of :data:`STEP` tokens, at most the model's own context
(``max_position_embeddings``), whose KV cache (one sequence; sliding-window layers
held to their window, ``max_kv_size`` bounding it; each element as ``kv_bits``
quantizes it, else of the model's compute dtype: the floating-point dtype of its
weight files, as the safetensors headers say, so a float32 model counts 4 bytes
where a bf16 or quantized one counts 2) fits in what the memory budget can give
the model's requests beside its weights, runtime and activations
(:meth:`.placement.Placement.kv_budget`). When not even :data:`STEP` tokens fit,
that is logged and :data:`STEP` is used.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from mlx_gateway.supervisor.config import ModelConfig
from mlx_gateway.supervisor.pool.memory import (
    compute_dtype_bytes,
    format_size,
    kv_bytes_per_token,
    model_dir,
    sliding_layers,
    text_config,
)

log = logging.getLogger("mlx_gateway.worker")

STEP = 1024


@dataclass(frozen=True)
class AutoContext:
    tokens: int
    own: int
    """The model's own context (``max_position_embeddings``)."""
    kv_bytes: int
    """KV cache bytes of one sequence of ``tokens``."""
    kv_budget: int
    fits: bool


def kv_need(config: ModelConfig, meta: dict[str, Any], tokens: int, element: int = 2) -> int:
    """KV cache bytes of one sequence of ``tokens`` tokens (``element``: bytes of the
    model's dtype, when ``kv_bits`` does not quantize the cache)."""
    if config.max_kv_size is not None:
        tokens = min(tokens, config.max_kv_size)
    sliding, window = sliding_layers(meta)
    layers = meta.get("num_hidden_layers")
    full = (layers if isinstance(layers, int) else 0) - sliding
    scale = 1.0 if config.kv_bits is not None else element / 2  # kv_bytes_per_token: fp16
    return int(
        scale
        * (
            kv_bytes_per_token(meta, config, full) * tokens
            + kv_bytes_per_token(meta, config, sliding) * min(tokens, window)
        )
    )


def decide(config: ModelConfig, kv_budget: int | None) -> AutoContext | None:
    """The context for ``config`` under ``kv_budget`` (``None``: its files are not
    on this machine yet, or the budget is unknown: the model's own context applies)."""
    directory = model_dir(config.model_path)
    if directory is None or kv_budget is None:
        return None
    meta = text_config(directory)
    own = meta.get("max_position_embeddings")
    if not isinstance(own, int) or isinstance(own, bool) or own <= 0:
        return None
    element = compute_dtype_bytes(directory)
    top = own // STEP * STEP if own >= STEP else own
    for tokens in range(top, 0, -STEP):
        need = kv_need(config, meta, tokens, element)
        if need <= kv_budget:
            return AutoContext(tokens, own, need, kv_budget, True)
    smallest = min(STEP, own)
    return AutoContext(smallest, own, kv_need(config, meta, smallest, element), kv_budget, False)


def context_at_start(config: ModelConfig, name: str, kv_budget: int | None) -> int | None:
    """What the worker's spec gets for ``context_length: auto``, logged."""
    chosen = decide(config, kv_budget)
    if chosen is None:
        log.warning(
            "[%s] context_length auto: the model's files or the memory budget are not known "
            "yet; the model's own context applies for this start",
            name,
        )
        return None
    if chosen.fits:
        log.info(
            "[%s] context_length auto: %d tokens (of the model's %d): KV cache %s of the %s "
            "the memory budget leaves beside the model",
            name,
            chosen.tokens,
            chosen.own,
            format_size(chosen.kv_bytes),
            format_size(chosen.kv_budget),
        )
    else:
        log.warning(
            "[%s] context_length auto: not even %d tokens of KV cache (%s) fit in the %s the "
            "memory budget leaves beside the model; using %d. Raise server.memory_budget",
            name,
            chosen.tokens,
            format_size(chosen.kv_bytes),
            format_size(chosen.kv_budget),
            chosen.tokens,
        )
    return chosen.tokens
