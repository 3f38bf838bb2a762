"""Memory accounting for the budget: sizes, and each model's *need*.

Pure functions plus a look at the disk (weight files, ``config.json``); no MLX.
Before a model ever ran its need is *estimated* as the sum of

* its weights: the weight files' bytes (MLX holds them as loaded, quantized or not);
* a runtime overhead per kind: the interpreter, MLX, the tokenizer or processor,
  and working buffers that do not scale with the weights (the memory profiles of
  the kind table, :mod:`mlx_gateway.protocol.kinds`);
* for language and vision models, a KV *working set*: the KV cache of
  :data:`KV_WORKING_TOKENS` tokens shared by the concurrent requests (bounded by
  ``max_concurrency`` times the context, or ``max_kv_size``), at the cache's element
  size (``kv_bits`` quantizes it); and the activations of one prefill chunk;
* for encoders with a vision tower (image-embedding models), one vision pass over
  a full batch of images (:mod:`.vision_need`).

The worst case (every slot holding a full context) is not reserved: a request's own
KV cache is admitted by its worker against what the budget can give the model
(``kv_budget_bytes``, see ``workers/kv.py``). Once a
worker reported its memory, the largest figure it reported replaces the estimate
(:func:`measured_need`), and it is remembered across restarts (:mod:`.needs`).
See docs/design.md ("The memory need") for the arithmetic on real models.
"""

from __future__ import annotations

import json
import os
import struct
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlx_gateway.protocol.kinds import KINDS, memory_profile
from mlx_gateway.protocol.messages import Memory
from mlx_gateway.store.gguf_files import converted_folder, gguf_on_disk
from mlx_gateway.supervisor.config import ModelConfig
from mlx_gateway.supervisor.config.sizes import parse_size
from mlx_gateway.supervisor.pool.gguf_size import gguf_size
from mlx_gateway.supervisor.pool.vision_need import image_pass_bytes

MB = 1000**2
GB = 1000**3


KV_WORKING_TOKENS = 4096
"""Tokens of KV cache a language model's need reserves, shared by its concurrent
requests (one 4k conversation, or several short ones). Longer work is admitted
per request against what the budget has free."""
KV_BYTES_PER_ELEMENT = 2  # fp16/bf16 KV cache
FLOAT_BYTES = {"F16": 2, "BF16": 2, "F32": 4, "F64": 8}


def compute_dtype_bytes(directory: Path) -> int:
    """Bytes of the model's floating-point dtype (the most common one among the
    tensors of its first safetensors file: a quantized model's scales count, its
    packed integers do not); 2 when it cannot be read."""
    for path in sorted(directory.glob("*.safetensors")):
        try:
            with path.open("rb") as f:
                (size,) = struct.unpack("<Q", f.read(8))
                header = json.loads(f.read(min(size, 100_000_000)))
        except (OSError, ValueError, struct.error):
            continue
        dtypes = Counter(
            t["dtype"]
            for t in header.values()
            if isinstance(t, dict) and t.get("dtype") in FLOAT_BYTES
        )
        if dtypes:
            return FLOAT_BYTES[dtypes.most_common(1)[0][0]]
    return 2


def kv_dtype_scale(directory: Path, config: ModelConfig) -> float:
    """What the fp16 KV figures are multiplied by for this model: its compute dtype's
    bytes over 2 (a float32 model's cache is twice an fp16 one's), 1 when ``kv_bits``
    quantizes the cache."""
    return 1.0 if config.kv_bits is not None else compute_dtype_bytes(directory) / 2


ACTIVATION_FACTOR = 4
"""Live copies of the widest activation (2 bytes each) per prefill token."""
WEIGHT_SUFFIXES = (".safetensors", ".npz", ".bin", ".gguf")
KV_KINDS = tuple(name for name, kind in KINDS.items() if kind.memory.kv)
"""Kinds whose requests grow a KV cache (the kind table's memory profiles)."""


@dataclass(frozen=True)
class Need:
    """A model's memory need and where the figure comes from."""

    bytes: int
    source: str
    """``measured`` (its worker reported it, maybe in an earlier run),
    ``configured`` (the entry's ``memory_estimate``), ``estimated`` (the model's
    files), or ``unknown`` (not downloaded yet: counts as 0)."""
    parts: dict[str, int] = field(default_factory=dict)
    """For an estimate: weights, runtime, kv, activations."""

    def public(self) -> dict[str, Any]:
        out: dict[str, Any] = {"bytes": self.bytes, "source": self.source}
        if self.parts:
            out["parts"] = dict(self.parts)
        return out


def format_size(n: int) -> str:
    for unit, scale in (("GB", GB), ("MB", MB), ("kB", 1000)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def hub_cache_dir() -> Path:
    if cache := os.environ.get("HF_HUB_CACHE"):
        return Path(cache)
    home = os.environ.get("HF_HOME") or os.path.join(Path.home(), ".cache", "huggingface")
    return Path(home) / "hub"


def model_dir(model_path: str) -> Path | None:
    """The local directory holding the model's files, if there is one already (for a
    GGUF model, its converted MLX folder once it was converted)."""
    gguf = gguf_on_disk(model_path)
    if gguf is not None:
        return converted_folder(gguf)
    local = Path(model_path).expanduser()
    if local.is_dir():
        return local
    repo = hub_cache_dir() / f"models--{model_path.replace('/', '--')}" / "snapshots"
    if repo.is_dir():
        snapshots = sorted(repo.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
        return snapshots[0] if snapshots else None
    return None


def weights_on_disk(directory: Path) -> int:
    """Bytes of weight files under ``directory`` (the size the file claims: a sparse
    file counts fully, as it would once read)."""
    total = 0
    for path in directory.rglob("*"):
        if path.suffix in WEIGHT_SUFFIXES and path.is_file():
            total += path.stat().st_size  # follows the hub cache's symlinks
    return total


def text_config(directory: Path) -> dict[str, Any]:
    """The language part of the model's ``config.json`` (``{}`` when there is none)."""
    try:
        meta = json.loads((directory / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(meta, dict):
        return {}
    inner = meta.get("text_config") or meta.get("llm_config")
    return {**meta, **inner} if isinstance(inner, dict) else meta


def kv_element_bytes(bits: int | None, group_size: int) -> float:
    """Bytes per cached key/value element: 2 (fp16), or ``bits``/8 plus one fp16
    scale and one fp16 bias per ``group_size`` elements when quantized."""
    if bits is None:
        return float(KV_BYTES_PER_ELEMENT)
    return bits / 8 + 4 / group_size


def kv_bytes_per_token(
    meta: dict[str, Any], config: ModelConfig, layers: int | None = None
) -> float:
    """KV cache bytes one token takes in ``layers`` layers (default: all of them),
    keys and values."""
    if layers is None:
        layers = _int(meta.get("num_hidden_layers"))
    heads = _int(meta.get("num_attention_heads"))
    kv_heads = _int(meta.get("num_key_value_heads")) or heads
    hidden = _int(meta.get("hidden_size"))
    head_dim = _int(meta.get("head_dim")) or (hidden // heads if heads else 0)
    element = kv_element_bytes(config.kv_bits, config.kv_group_size)
    return 2 * layers * kv_heads * head_dim * element


def sliding_layers(meta: dict[str, Any]) -> tuple[int, int]:
    """``(layers, window)``: how many layers attend only to the last ``window``
    tokens (Gemma 3, gpt-oss…); their KV cache never grows past it."""
    window = _int(meta.get("sliding_window"))
    layers = _int(meta.get("num_hidden_layers"))
    if not window or not layers:
        return 0, 0
    kinds = meta.get("layer_types")
    if isinstance(kinds, list):
        return sum(1 for kind in kinds if kind == "sliding_attention"), window
    pattern = _int(meta.get("sliding_window_pattern"))
    if pattern > 1:  # every pattern-th layer attends globally
        return layers - layers // pattern, window
    return 0, 0


def context_of(meta: dict[str, Any], config: ModelConfig) -> int:
    own = _int(meta.get("max_position_embeddings"))
    return config.fixed_context_length or own or KV_WORKING_TOKENS


def kv_working_tokens(meta: dict[str, Any], config: ModelConfig) -> int:
    """Tokens of KV cache in the working set: :data:`KV_WORKING_TOKENS`, at most
    ``max_concurrency`` sequences of the context (or of ``max_kv_size``)."""
    per_sequence = context_of(meta, config)
    if config.max_kv_size is not None:
        per_sequence = min(per_sequence, config.max_kv_size)
    return min(KV_WORKING_TOKENS, per_sequence * config.max_concurrency)


def kv_working_set(meta: dict[str, Any], config: ModelConfig) -> int:
    tokens = kv_working_tokens(meta, config)
    sliding, window = sliding_layers(meta)
    full = _int(meta.get("num_hidden_layers")) - sliding
    windowed = min(tokens, window * config.max_concurrency)
    return int(
        kv_bytes_per_token(meta, config, full) * tokens
        + kv_bytes_per_token(meta, config, sliding) * windowed
    )


def prefill_activations(meta: dict[str, Any], config: ModelConfig) -> int:
    """Working memory of one prefill chunk: a few live copies of its widest
    activation (the MLP's intermediate, or the hidden state)."""
    widest = max(
        _int(meta.get("intermediate_size")),
        _int(meta.get("moe_intermediate_size")) * _int(meta.get("num_experts_per_tok")),
        _int(meta.get("hidden_size")),
    )
    return config.prefill_step_size * widest * 2 * ACTIVATION_FACTOR


def estimate(config: ModelConfig) -> Need:
    """The model's need before it ever ran: the entry's ``memory_estimate``, else
    the sum described in the module docstring, else ``unknown`` (0)."""
    if config.memory_estimate is not None:
        return Need(parse_size(config.memory_estimate), "configured")
    kind = config.worker_kind
    files = _model_files(config, kind in KV_KINDS)
    if files is None:
        return Need(0, "unknown")
    weights, meta, kv_scale = files
    profile = memory_profile(kind)
    parts = {
        "weights": int(weights * profile.weight_factor),
        "runtime": profile.runtime,
        "kv": 0,
        "activations": profile.activations,
    }
    if kind in KV_KINDS:
        parts["kv"] = int(kv_working_set(meta, config) * kv_scale)
        parts["activations"] += prefill_activations(meta, config)
    elif images := _encoder_images(config):
        parts["images"] = images
    if config.draft_model_path is not None:
        parts["draft"] = draft_need(config, profile.weight_factor)
    if config.distributed is not None:
        parts = _this_machines_share(parts, config)
    return Need(sum(parts.values()), "estimated", parts)


def _encoder_images(config: ModelConfig) -> int:
    """An encoder's vision pass (image-embedding models, :mod:`.vision_need`)."""
    directory = model_dir(config.model_path)
    if directory is None:
        return 0
    try:
        meta = json.loads((directory / "config.json").read_text())
    except (OSError, ValueError):
        return 0
    batch = getattr(config, "max_batch_tokens", None)
    return image_pass_bytes(meta, batch) if isinstance(meta, dict) else 0


def _model_files(config: ModelConfig, kv: bool) -> tuple[int, dict[str, Any], float] | None:
    """``(weight bytes, config.json sizes, KV dtype scale)`` of the model's files: its
    folder's, or an unconverted GGUF's as the converter will write it (float16 KV);
    ``None`` when nothing is on this machine yet."""
    directory = model_dir(config.model_path)
    if directory is not None:
        meta = text_config(directory) if kv else {}
        scale = kv_dtype_scale(directory, config) if kv else 1.0
        return weights_on_disk(directory), meta, scale
    gguf = gguf_size(config.model_path)  # only language models can be GGUF (config/paths.py)
    if gguf is None:
        return None
    return gguf.weights, gguf.meta, 1.0


def draft_need(config: ModelConfig, weight_factor: float) -> int:
    """A draft model's weights and the KV cache of the one sequence it drafts for
    (0 while its files are not on this machine: the measured need corrects it)."""
    directory = model_dir(config.draft_model_path or "")
    if directory is None:
        return 0
    meta = text_config(directory)
    tokens = min(KV_WORKING_TOKENS, context_of(meta, config))
    return int(
        weights_on_disk(directory) * weight_factor + kv_bytes_per_token(meta, config) * tokens
    )


def _this_machines_share(parts: dict[str, int], config: ModelConfig) -> dict[str, int]:
    """A sharded model: each rank holds an equal share of the weights, KV cache and
    activations, and its own runtime; only the ranks on this machine count here."""
    here, total = local_ranks(config), total_ranks(config)
    shared = {key: value * here // total for key, value in parts.items() if key != "runtime"}
    return {**shared, "runtime": parts["runtime"] * here}


def total_ranks(config: ModelConfig) -> int:
    """The processes a model runs as: 1, or its ``distributed`` group's size."""
    spread = config.distributed
    return 1 if spread is None else len(spread.hosts) * spread.ranks_per_host


def local_ranks(config: ModelConfig) -> int:
    """Those of them on this machine (the first host's, rank 0's among them)."""
    spread = config.distributed
    if spread is None:
        return 1
    return sum(host == spread.hosts[0] for host in spread.hosts) * spread.ranks_per_host


def measured_need(memory: Memory) -> int:
    """What a running worker uses: its RSS, or MLX's own figures where larger
    (on Apple silicon MLX buffers are not all counted in RSS)."""
    return max(memory.rss, memory.mlx_active + memory.mlx_cache)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
