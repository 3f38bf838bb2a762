"""A GGUF model converted once into an mlx-lm model folder in the gateway's cache.

The folder (``<gateway cache>/gguf/<sha256>``: ``config.json``, safetensors, the
tokenizer files, and ``gguf.json`` saying what it came from) is built in a
temporary folder beside it and renamed into place once mlx-lm loads it, so a
conversion that fails or is killed leaves nothing a later start would take for
done; every later start finds it and converts nothing. The bytes converted so far
are reported as a download's are (``/v1/models`` shows the fraction).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from gguf import GGUFReader

from mlx_gateway.workers.lm.gguf.arch import Arch, GgufError, arch_of, model_config
from mlx_gateway.workers.lm.gguf.source import GgufSource
from mlx_gateway.workers.lm.gguf.tensors import GROUP_SIZE, numpy_of, read_tensors, to_mlx
from mlx_gateway.workers.lm.gguf.tokenizer import field, write_tokenizer
from mlx_gateway.workers.runtime.download import DOWNLOAD

log = logging.getLogger(__name__)

SHARD_BYTES = 2 * 1024**3
BF16_MODELS = ("gemma", "gemma2", "gemma3_text")
"""Gemma's activations overflow float16; its floating-point weights stay bfloat16."""
LONGROPE = {"rope_factors_long.weight": "long_factor", "rope_factors_short.weight": "short_factor"}
"""Phi-3's LongRoPE factors (Phi-3.5-mini, Phi-4-mini), which llama.cpp stores as
tensors: mlx-lm's ``longrope`` rope scaling (which always rotates by the long factors,
as it does for the same model from the Hugging Face hub)."""


def _meta(reader: GGUFReader, architecture: str) -> Callable[[str, Any], Any]:
    def meta(key: str, default: Any) -> Any:
        return field(reader, key.replace("{arch}", architecture), default)

    return meta


def convert(source: GgufSource, out: Path) -> None:
    """Write the mlx-lm folder of ``source`` at ``out``."""
    reader = GGUFReader(source.files[0])
    architecture = str(field(reader, "general.architecture", ""))
    arch = arch_of(architecture)
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name[:16]}-"))
    try:
        meta = _meta(reader, architecture)
        context = int(meta("{arch}.context_length", 4096))
        vocab = write_tokenizer(reader, architecture, work, context)
        readers = [reader, *(GGUFReader(f) for f in source.files[1:])]
        names = {t.name for r in readers for t in r.tensors}
        config = model_config(architecture, meta, vocab, names)
        types = _write_weights(source, readers, arch, config, work)
        (work / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
        (work / "gguf.json").write_text(
            json.dumps(
                {
                    "source": [str(f) for f in source.files],
                    "architecture": architecture,
                    "tensor_types": types,
                },
                indent=1,
            ),
            encoding="utf-8",
        )
        _check_loads(work, architecture)
        try:
            os.replace(work, out)
        except OSError:  # another worker converted the same file meanwhile
            if not (out / "config.json").is_file():
                raise
            shutil.rmtree(work, ignore_errors=True)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    log.info("converted %s (%s) into %s", source.label, architecture, out)


def _check_loads(folder: Path, architecture: str) -> None:
    from mlx_lm.utils import load_model

    try:
        load_model(folder, lazy=True)
    except (ValueError, KeyError, TypeError) as exc:
        raise GgufError(
            f"the GGUF ({architecture}) converted, but mlx-lm cannot load the result: {exc}"
        ) from None


def _unpermute(array: mx.array, heads: int) -> mx.array:
    """Undo llama.cpp's interleaving of each head's q/k rows (axis 0)."""
    rows = array.shape[0]
    shape = (heads, rows // heads // 2, 2, *array.shape[1:])
    return array.reshape(shape).swapaxes(1, 2).reshape(array.shape)


def _llama3_rope(freqs: np.ndarray[Any, Any], config: dict[str, Any]) -> dict[str, Any]:
    """Llama 3.1's rope scaling, which llama.cpp stores as per-frequency factors
    (``rope_freqs``) instead of its parameters: the parameters every Llama 3.x uses,
    checked against the factors."""
    factor = float(freqs.max())
    scaling: dict[str, Any] = {
        "rope_type": "llama3",
        "factor": factor,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    dims = freqs.shape[0] * 2
    wavelen = 2 * np.pi * config["rope_theta"] ** (np.arange(0, dims, 2) / dims)
    low, high = 8192 / 1.0, 8192 / 4.0
    smooth = (8192 / wavelen - 1.0) / (4.0 - 1.0)
    expected = np.where(
        wavelen < high,
        1.0,
        np.where(wavelen > low, factor, 1 / ((1 - smooth) / factor + smooth)),
    )
    if not np.allclose(expected, freqs, rtol=1e-3):
        raise GgufError(
            "the GGUF's rope_freqs are not Llama 3's rope scaling; mlx-lm has no way to take "
            "arbitrary rope factors"
        )
    return scaling


def _write_weights(
    source: GgufSource,
    readers: list[GGUFReader],
    arch: Arch,
    config: dict[str, Any],
    folder: Path,
) -> dict[str, int]:
    """Convert every tensor into safetensors shards in ``folder``; set
    ``config["quantization"]``; return how many tensors of each GGUF type there were."""
    dtype = mx.bfloat16 if arch.model_type in BF16_MODELS else mx.float16
    heads = {
        "self_attn.q_proj": config["num_attention_heads"],
        "self_attn.k_proj": config["num_key_value_heads"],
    }
    total = sum(int(t.n_bytes) for r in readers for t in r.tensors)
    done = 0
    shard: dict[str, mx.array] = {}
    shard_bytes = shards = 0
    bits: dict[str, dict[str, int]] = {}
    types: Counter[str] = Counter()
    unmapped: list[str] = []
    longrope: dict[str, list[float]] = {}
    for path, reader in zip(source.files, readers, strict=True):
        for tensor in read_tensors(path, reader):
            done += tensor.file_bytes
            DOWNLOAD.record(done, total)
            types[tensor.kind.name] += 1
            if tensor.name == "rope_freqs.weight":
                config["rope_scaling"] = _llama3_rope(numpy_of(tensor.weight), config)
                continue
            if tensor.name in LONGROPE and arch.model_type == "phi3":
                longrope[LONGROPE[tensor.name]] = numpy_of(tensor.weight).tolist()
                continue
            target = arch.target(tensor.name)
            if target is None:
                unmapped.append(tensor.name)
                continue
            module, _, kind = target.rpartition(".")
            quantize = kind == "weight" and tensor.weight.ndim >= 2
            arrays = to_mlx(tensor, dtype, quantize)
            local = module.partition("layers.")[2].partition(".")[2]  # self_attn.q_proj
            if arch.permuted_qk and local in heads:
                arrays = {k: _unpermute(v, heads[local]) for k, v in arrays.items()}
            if arch.norm_offset and "norm" in module and kind == "weight":
                arrays = {"weight": arrays["weight"] - arch.norm_offset}
            if "scales" in arrays:
                packed = arrays["weight"].shape[-1] * 32
                inner = arrays["scales"].shape[-1] * GROUP_SIZE
                bits[module] = {"group_size": GROUP_SIZE, "bits": packed // inner}
            for suffix, array in arrays.items():
                name = target if suffix == "weight" else f"{module}.{suffix}"
                shard[name] = array
                shard_bytes += array.nbytes
            if shard_bytes >= SHARD_BYTES:
                shards += 1
                _save(folder, shards, shard)
                shard, shard_bytes = {}, 0
    if longrope:
        if len(longrope) != len(LONGROPE):
            raise GgufError(f"the GGUF has {', '.join(longrope)} but not both LongRoPE factors")
        config["rope_scaling"] = {"type": "longrope", **longrope}
    if unmapped:
        raise GgufError(
            f"the GGUF's tensors {', '.join(unmapped[:5])} have no place in mlx-lm's "
            f"{arch.model_type} model; this variant of the architecture cannot be converted"
        )
    if shard:
        _save(folder, shards + 1, shard)
    if bits:
        common = Counter(b["bits"] for b in bits.values()).most_common(1)[0][0]
        config["quantization"] = {"group_size": GROUP_SIZE, "bits": common, **bits}
    return dict(types)


def _save(folder: Path, index: int, arrays: dict[str, mx.array]) -> None:
    mx.eval(arrays)
    mx.save_safetensors(
        str(folder / f"model-{index:05d}.safetensors"), arrays, metadata={"format": "mlx"}
    )
