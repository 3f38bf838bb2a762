"""From a model's token states to one vector per input, as the model was trained.

Embedding models published for sentence-transformers describe their pipeline in
``modules.json``: the transformer, then a ``Pooling`` module (its settings in
``1_Pooling/config.json``: CLS token, mean, max, last token…), then often a
``Normalize`` module. mlx-embeddings' own ``text_embeds`` is fixed per
architecture (every BERT is mean-pooled, for instance), which is wrong for
CLS-pooled models such as the BGE family. So:

* when the pipeline is exactly Transformer → Pooling (→ Normalize), we pool the
  last hidden state as its Pooling config says and L2-normalize when a Normalize
  module follows, as sentence-transformers does;
* otherwise (no ``modules.json``, or extra modules such as Dense layers, which the
  mlx-embeddings model applies itself) we take mlx-embeddings' ``text_embeds``,
  which it already pooled and normalized.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx

log = logging.getLogger(__name__)

MODEL_POOLING = "model"
"""Use the vector the mlx-embeddings model computes itself (``text_embeds``)."""

# sentence-transformers' Pooling flags, in the order it concatenates the results.
_MODES = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len",
    "pooling_mode_lasttoken": "lasttoken",
}
_SUPPORTED = frozenset(_MODES.values())
_ST = "sentence_transformers.models."


@dataclass(frozen=True)
class Pooling:
    """How one input's vector is made from its token states."""

    modes: tuple[str, ...] = (MODEL_POOLING,)
    """Pooling modes, concatenated in this order; ``("model",)`` = mlx-embeddings'."""
    normalize: bool = True

    @property
    def name(self) -> str:
        return "+".join(self.modes)


def read_pooling(model_dir: Path) -> Pooling:
    """The pooling the model's sentence-transformers files describe (see the module
    docstring); mlx-embeddings' own when they are absent or describe more than we do."""
    modules = _read_json(model_dir / "modules.json")
    if not isinstance(modules, list) or not modules:
        return Pooling()
    kinds = [str(m.get("type", "")).removeprefix(_ST) for m in modules if isinstance(m, dict)]
    if kinds[:2] != ["Transformer", "Pooling"] or any(k != "Normalize" for k in kinds[2:]):
        log.info("sentence-transformers pipeline %s: using the model's own pooling", kinds)
        return Pooling()
    folder = next(str(m.get("path", "")) for m in modules if str(m.get("type")).endswith("Pooling"))
    config = _read_json(model_dir / folder / "config.json")
    if not isinstance(config, dict):
        return Pooling()
    modes = _modes(config)
    if not modes:
        log.warning("pooling config %s is not supported: using the model's own pooling", config)
        return Pooling()
    return Pooling(modes=modes, normalize="Normalize" in kinds)


def _modes(config: dict[str, Any]) -> tuple[str, ...]:
    """The enabled modes of a Pooling config; empty if one of them is unsupported."""
    named = config.get("pooling_mode")  # newer sentence-transformers also write this
    if isinstance(named, str) and "pooling_mode_" + named not in config:
        return (named,) if named in _SUPPORTED else ()
    modes = tuple(mode for flag, mode in _MODES.items() if config.get(flag))
    unknown = [
        k for k, v in config.items() if k.startswith("pooling_mode_") and v and k not in _MODES
    ]
    return () if unknown else modes


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def pool(pooling: Pooling, output: Any, mask: mx.array, lengths: mx.array) -> mx.array:
    """One float32 vector per row of the batch.

    ``output`` is what the mlx-embeddings model returned for rows padded on the
    right; ``mask`` is the (batch, width) attention mask (1 for tokens, 0 for
    padding) and ``lengths`` the number of tokens of each row.
    """
    if pooling.modes == (MODEL_POOLING,):
        vectors = model_vectors(output)
    else:
        states = output.last_hidden_state.astype(mx.float32)
        parts = [_pool_one(mode, states, mask, lengths) for mode in pooling.modes]
        vectors = mx.concatenate(parts, axis=-1)
    vectors = vectors.astype(mx.float32)
    if pooling.normalize:
        norms = mx.linalg.norm(vectors, axis=-1, keepdims=True)
        vectors = vectors / mx.maximum(norms, 1e-12)
    return vectors


def model_vectors(output: Any) -> mx.array:
    """The pooled vectors an mlx-embeddings model computes itself."""
    for vectors in (output.text_embeds, getattr(output, "pooler_output", None)):
        if vectors is not None and vectors.ndim == 2:
            return vectors
    raise ValueError("the model returned no pooled text embeddings")


def can_pool_states(output: Any) -> bool:
    """Whether ``output`` has per-token states to pool (some models return pooled ones)."""
    states = getattr(output, "last_hidden_state", None)
    return states is not None and states.ndim == 3


def _pool_one(mode: str, states: mx.array, mask: mx.array, lengths: mx.array) -> mx.array:
    weights = mask.astype(mx.float32)[..., None]
    match mode:
        case "cls":
            return states[:, 0]
        case "lasttoken":
            return states[mx.arange(states.shape[0]), lengths - 1]
        case "max":
            return mx.where(weights > 0, states, -math.inf).max(axis=1)
        case "mean" | "mean_sqrt_len":
            total = (states * weights).sum(axis=1)
            count = mx.maximum(weights.sum(axis=1), 1e-9)
            return total / (count if mode == "mean" else mx.sqrt(count))
    raise ValueError(f"unknown pooling mode {mode!r}")
