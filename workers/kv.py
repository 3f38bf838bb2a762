"""KV cache settings of a language-model worker: quantization and a size bound.

``kv_bits`` (with ``kv_group_size`` and ``quantized_kv_start``) quantizes a
request's KV cache as mlx-lm's ``generate_step`` does: once the sequence holds
``quantized_kv_start`` tokens its per-layer ``KVCache`` becomes a
``QuantizedKVCache`` (8 bits: about half the bytes of fp16, 4 bits: about a
quarter). mlx-lm's ``BatchGenerator`` has no quantized batch cache, so only a
request decoded on its own (:mod:`.solo`) is quantized; a request that joins a
batch, and a cache kept for later turns, go back to fp16 (:func:`dequantized`).

``max_kv_size`` bounds every sequence's cache to a rotating window of that many
tokens (mlx-lm's ``RotatingKVCache``, in the batch as in ``generate_step``);
such caches cannot be cut at any prefix, so those models always decode in the
batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mlx.core as mx
from mlx_lm.generate import maybe_quantize_kv_cache
from mlx_lm.models.cache import KVCache, QuantizedKVCache

from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.workers.hub import LoadError
from mlx_gateway.workers.prompt_cache import LayerCaches


@dataclass(frozen=True)
class KvSettings:
    bits: int | None = None
    group_size: int = 64
    quantized_start: int = 0
    max_size: int | None = None

    @classmethod
    def from_spec(cls, spec: WorkerSpec) -> KvSettings:
        options = spec.options
        bits = options.get("kv_bits")
        if bits is not None and bits not in (4, 8):
            raise LoadError(f"option kv_bits must be 4 or 8, got {bits!r}")
        return cls(
            bits=bits,
            group_size=int(options.get("kv_group_size", 64)),
            quantized_start=int(options.get("quantized_kv_start", 0)),
            max_size=options.get("max_kv_size"),
        )

    def check_model(self, config: dict[str, Any]) -> None:
        """Refuse a group size that does not divide the model's head size."""
        if self.bits is None:
            return
        text = config.get("text_config") or {}
        if not isinstance(text, dict):  # mlx-vlm keeps it as a dataclass
            text = dict(vars(text))
        meta = {**config, **text}
        heads = meta.get("num_attention_heads") or 0
        head_dim = meta.get("head_dim") or (meta.get("hidden_size", 0) // heads if heads else 0)
        if head_dim and head_dim % self.group_size:
            fitting = [str(g) for g in (32, 64, 128) if head_dim % g == 0]
            fix = (
                f"set kv_group_size to {' or '.join(fitting)}"
                if fitting
                else "kv_bits cannot quantize this model's KV cache; remove kv_bits"
            )
            raise LoadError(
                f"kv_group_size {self.group_size} does not divide this model's head size "
                f"{head_dim}; {fix}"
            )

    def quantize(self, cache: LayerCaches) -> None:
        """Quantize ``cache``'s layers in place once they hold enough tokens."""
        if self.bits is not None:
            maybe_quantize_kv_cache(cache, self.quantized_start, self.group_size, self.bits)


def dequantized(cache: LayerCaches) -> LayerCaches:
    """``cache`` with each quantized layer turned back into an fp16 ``KVCache``
    (for the batch and the prompt cache, which take plain caches), in the
    dtype of its scales (the model's)."""
    out = []
    for layer in cache:
        if not isinstance(layer, QuantizedKVCache):
            out.append(layer)
            continue
        plain = KVCache()
        tokens = layer.offset
        plain.keys, plain.values = (
            mx.dequantize(*part, group_size=layer.group_size, bits=layer.bits)[..., :tokens, :]
            for part in (layer.keys, layer.values)
        )
        plain.offset = tokens
        out.append(plain)
    return out


def cache_bytes(cache: LayerCaches | None) -> int:
    """Bytes a model cache holds (0 for none)."""
    if not cache:
        return 0
    return sum(int(getattr(layer, "nbytes", 0)) for layer in cache)
