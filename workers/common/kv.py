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

import contextlib
from collections import Counter
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
from mlx_lm.generate import maybe_quantize_kv_cache
from mlx_lm.models.cache import KVCache, QuantizedKVCache

from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.workers.runtime.contract import LoadError, RequestError

LayerCaches = list[Any]
"""One model's cache: an object per layer (mlx-lm's ``make_prompt_cache`` shape)."""


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
        meta = {**config, **_text_config(config)}  # mlx-vlm keeps it as a dataclass
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
        if layer.keys is not None and layer.values is not None:
            parts: list[mx.array] = []
            for packed, scales, biases in (layer.keys, layer.values):
                full = mx.dequantize(
                    packed, scales, biases, group_size=layer.group_size, bits=layer.bits
                )
                parts.append(full[..., :tokens, :])
            plain.keys, plain.values = parts
        plain.offset = tokens
        out.append(plain)
    return out


def cache_bytes(cache: LayerCaches | None) -> int:
    """Bytes a model cache holds (0 for none)."""
    if not cache:
        return 0
    return sum(int(getattr(layer, "nbytes", 0)) for layer in cache)


def batch_cache_bytes(generator: Any) -> int:
    """Bytes of KV cache in an mlx-lm ``BatchGenerator``'s own batches (array sizes
    only, no evaluation: read from the worker's main thread)."""
    total = 0
    for part in ("_generation_batch", "_prompt_batch"):
        batch = getattr(generator, part, None)
        with contextlib.suppress(NotImplementedError, AttributeError, TypeError):
            total += cache_bytes(getattr(batch, "prompt_cache", None))
    return total


def compute_dtype_bytes(model: Any) -> int:
    """Bytes of a loaded model's floating-point dtype, the one its KV cache takes (the
    most common among its parameters: a quantized model's scales count, its packed
    integers do not); 2 when it has none."""
    from mlx.utils import tree_flatten

    arrays = [item[1] for item in tree_flatten(model.parameters())]
    sizes = Counter(
        int(value.dtype.size)
        for value in arrays
        if isinstance(value, mx.array) and mx.issubdtype(value.dtype, mx.floating)
    )
    return sizes.most_common(1)[0][0] if sizes else 2


@dataclass(frozen=True)
class KvAdmission:
    """Per-request admission by KV cache bytes.

    ``budget`` is what the gateway's memory budget can ever give this model's
    requests (the budget minus the model's weights, runtime and activations;
    spec option ``kv_budget_bytes``; ``None``: no limit known). A request whose
    prompt plus ``max_tokens`` needs more is refused (400 ``memory_admission``);
    one that fits waits in the worker's queue while the running requests'
    reservations leave too little; without ``max_tokens``, the completion is
    capped at what fits (finish ``length``)."""

    full_per_token: int = 0
    """KV bytes of one token in the layers that attend to everything (keys and
    values, each element of the model's compute dtype)."""
    sliding_per_token: int = 0
    """…in the layers with a sliding window (they hold at most ``window``)."""
    window: int = 0
    max_size: int | None = None
    budget: int | None = None
    free: int | None = None
    """What the budget leaves this model's requests now (``Limits``), when told."""

    @classmethod
    def for_model(
        cls, config: dict[str, Any], spec: WorkerSpec, element_bytes: int = 2
    ) -> KvAdmission:
        """``element_bytes``: bytes of one cached element, the model's compute dtype
        (:func:`compute_dtype_bytes`: 4 for a float32 model, 2 for fp16 or bf16)."""
        meta = {**config, **_text_config(config)}
        layers = _int(meta.get("num_hidden_layers"))
        heads = _int(meta.get("num_attention_heads"))
        kv_heads = _int(meta.get("num_key_value_heads")) or heads
        head_dim = _int(meta.get("head_dim")) or (
            _int(meta.get("hidden_size")) // heads if heads else 0
        )
        window = _int(meta.get("sliding_window"))
        pattern = _int(meta.get("sliding_window_pattern"))
        kinds = meta.get("layer_types")
        if isinstance(kinds, list):
            sliding = sum(1 for kind in kinds if kind == "sliding_attention")
        elif window and pattern > 1:
            sliding = layers - layers // pattern
        else:
            sliding = 0
        per_layer = 2 * kv_heads * head_dim * element_bytes  # keys and values
        budget = spec.options.get("kv_budget_bytes")
        return cls(
            full_per_token=per_layer * (layers - sliding),
            sliding_per_token=per_layer * sliding,
            window=window if sliding else 0,
            max_size=spec.options.get("max_kv_size"),
            budget=budget if isinstance(budget, int) and budget > 0 else None,
        )

    def bytes_for(self, tokens: int) -> int:
        """KV bytes of one sequence of ``tokens`` tokens."""
        held = min(tokens, self.max_size) if self.max_size else tokens
        windowed = min(held, self.window) if self.window else held
        return self.full_per_token * held + self.sliding_per_token * windowed

    def admit(self, prompt_tokens: int, max_tokens: int, explicit: bool) -> int:
        """The completion budget this request may use; raises the 400 when even the
        whole budget could not hold it."""
        if self.budget is None or not self.full_per_token + self.sliding_per_token:
            return max_tokens
        need = self.bytes_for(prompt_tokens + max_tokens)
        if need <= self.budget:
            return max_tokens
        if not explicit and self.bytes_for(prompt_tokens + 1) <= self.budget:
            fitting = prompt_tokens + 1
            while self.bytes_for(fitting * 2) <= self.budget:
                fitting *= 2
            step = fitting // 2 or 1
            while step:  # the longest sequence that fits
                if self.bytes_for(fitting + step) <= self.budget:
                    fitting += step
                step //= 2
            return max(1, min(max_tokens, fitting - prompt_tokens))
        what = f"{prompt_tokens} prompt tokens" + (
            f" + {max_tokens} max_tokens" if explicit else " and at least one more"
        )
        need = self.bytes_for(prompt_tokens + (max_tokens if explicit else 1))
        raise RequestError(
            f"this request needs about {_size(need)} of KV cache ({what}, "
            f"{_size(self.full_per_token + self.sliding_per_token)} per token), more than "
            f"the {_size(self.budget)} the memory budget can ever give this model beside "
            "its weights; shorten the prompt, lower max_tokens, or raise "
            "server.memory_budget",
            param="max_tokens" if explicit else "messages",
            code="memory_admission",
        )

    def fits_beside(self, reserved: int, request: int) -> bool:
        """Whether ``request`` bytes of KV fit beside ``reserved`` bytes of others,
        within the budget and what it leaves now."""
        limits = [x for x in (self.budget, self.free) if x is not None]
        return not limits or reserved + request <= min(limits)


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    text = config.get("text_config") or {}
    return text if isinstance(text, dict) else dict(vars(text))


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _size(n: int) -> str:
    for unit, scale in (("GB", 1000**3), ("MB", 1000**2), ("kB", 1000)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
