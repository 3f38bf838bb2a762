"""What a GGUF file holds and what the converter makes of it, read without MLX or
NumPy: its metadata (scalars; arrays only by length, except short numeric ones) and
its tensors' names, shapes and types, parsed from the header alone (the weights
are not read). The gateway sizes a GGUF model with it before the model was ever
converted (:func:`converted_bytes`, :func:`text_config`); the worker's converter
takes its bits per type from here (``workers/lm/gguf/tensors.py``).

The header is GGUF version 2 or 3 (llama.cpp's since 2023): ``GGUF``, the version,
the tensor and key counts, the keys (each a string, a type and a value), then one
record per tensor (name, dimensions innermost first, type, offset).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

TYPES: dict[int, str] = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    6: "Q5_0",
    7: "Q5_1",
    8: "Q8_0",
    9: "Q8_1",
    10: "Q2_K",
    11: "Q3_K",
    12: "Q4_K",
    13: "Q5_K",
    14: "Q6_K",
    15: "Q8_K",
    16: "IQ2_XXS",
    17: "IQ2_XS",
    18: "IQ3_XXS",
    19: "IQ1_S",
    20: "IQ4_NL",
    21: "IQ3_S",
    22: "IQ2_S",
    23: "IQ4_XS",
    29: "IQ1_M",
    30: "BF16",
}
"""ggml's tensor type numbers, by the names the ``gguf`` package gives them."""

GROUP_SIZE = 32
"""MLX's group size for every quantized tensor the converter writes: Q4_0/Q4_1/Q8_0's
block, and the sub-block of Q4_K/Q5_K (Q6_K's is 16)."""
FLOAT_TYPES = ("F32", "F16", "BF16")
"""Types that stay floating point (float16, or bfloat16 for Gemma)."""
KEPT_BITS = {"Q4_0": 4, "Q4_1": 4, "Q8_0": 8}
"""Types ``mx.load`` returns as MLX quantized arrays: kept bit for bit."""
REQUANT_BITS = {
    **dict.fromkeys(("Q2_K", "Q3_K", "IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S"), 4),
    **dict.fromkeys(("IQ3_XXS", "IQ3_S", "Q4_K", "IQ4_NL", "IQ4_XS"), 4),
    **dict.fromkeys(("Q5_0", "Q5_1", "Q5_K", "Q6_K"), 6),
    **dict.fromkeys(("Q8_1", "Q8_K"), 8),
}
"""Block types dequantized and quantized again, and to how many bits: never fewer
than the type holds (MLX's affine 2- and 3-bit lose more than llama.cpp's
super-blocks, so those become 4-bit; MLX's 5-bit is no smaller than 6-bit at this
group size once scales count)."""

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q"}
_SCALARS |= {11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
SHORT_ARRAY = 256
"""Numeric arrays up to this length are kept (per-layer head counts); longer ones,
and arrays of strings (the vocabulary), are skipped and kept as their length."""


class GgufHeaderError(ValueError):
    """The file is no GGUF this reader knows (the message names the file and why)."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dims: tuple[int, ...]
    """Innermost first, as GGUF stores them: ``dims[0]`` is a row's length."""
    type_name: str

    @property
    def elements(self) -> int:
        return math.prod(self.dims)

    @property
    def bits(self) -> int | None:
        """The MLX bits the converter gives this tensor (``None``: floating point)."""
        return KEPT_BITS.get(self.type_name) or REQUANT_BITS.get(self.type_name)


@dataclass(frozen=True)
class GgufHeader:
    metadata: dict[str, Any]
    tensors: list[TensorInfo]

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    def meta(self, key: str, default: Any = None) -> Any:
        """A metadata value, ``{arch}`` in ``key`` replaced by the architecture."""
        return self.metadata.get(key.replace("{arch}", self.architecture), default)


def _unpack(f: BinaryIO, fmt: str) -> Any:
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise EOFError
    return struct.unpack(fmt, data)[0]


def _string(f: BinaryIO) -> str:
    length = _unpack(f, "<Q")
    return f.read(length).decode("utf-8", errors="replace")


def _value(f: BinaryIO, kind: int) -> Any:
    if kind in _SCALARS:
        return _unpack(f, _SCALARS[kind])
    if kind == _STRING:
        return _string(f)
    if kind != _ARRAY:
        raise ValueError(f"unknown metadata value type {kind}")
    item, count = _unpack(f, "<I"), _unpack(f, "<Q")
    if item in _SCALARS and count <= SHORT_ARRAY:
        return [_unpack(f, _SCALARS[item]) for _ in range(count)]
    if item in _SCALARS:
        f.seek(struct.calcsize(_SCALARS[item]) * count, 1)
    elif item == _STRING:
        for _ in range(count):
            f.seek(_unpack(f, "<Q"), 1)
    else:
        for _ in range(count):
            _value(f, item)
    return count


def read_header(path: Path) -> GgufHeader:
    """The metadata and tensor records of the GGUF file ``path``."""
    try:
        with path.open("rb") as f:
            if f.read(4) != b"GGUF":
                raise GgufHeaderError(f"'{path}' is not a GGUF file (no GGUF magic)")
            version = _unpack(f, "<I")
            if version not in (2, 3):
                raise GgufHeaderError(
                    f"'{path}' is GGUF version {version}; only versions 2 and 3 are read "
                    "(convert it again with a current llama.cpp)"
                )
            tensor_count, key_count = _unpack(f, "<Q"), _unpack(f, "<Q")
            metadata: dict[str, Any] = {}
            for _ in range(key_count):
                key = _string(f)
                metadata[key] = _value(f, _unpack(f, "<I"))
            tensors = []
            for _ in range(tensor_count):
                name = _string(f)
                dims = tuple(_unpack(f, "<Q") for _ in range(_unpack(f, "<I")))
                kind = _unpack(f, "<I")
                _unpack(f, "<Q")  # the offset of its data
                tensors.append(TensorInfo(name, dims, TYPES.get(kind, f"type {kind}")))
    except (OSError, EOFError, ValueError, struct.error) as exc:
        if isinstance(exc, GgufHeaderError):
            raise
        raise GgufHeaderError(f"cannot read the GGUF header of '{path}': {exc}") from None
    return GgufHeader(metadata, tensors)


def converted_bytes(tensors: list[TensorInfo]) -> int:
    """Bytes of the MLX weights the converter writes for these tensors: a quantized
    matrix at its :attr:`TensorInfo.bits` with a float16 scale and bias per
    :data:`GROUP_SIZE` weights, everything else two bytes a value."""
    total = 0
    for tensor in tensors:
        bits, n = tensor.bits, tensor.elements
        if bits and len(tensor.dims) >= 2 and tensor.dims[0] % GROUP_SIZE == 0:
            total += n * bits // 8 + n // GROUP_SIZE * 4
        else:
            total += n * 2
    return total


def text_config(header: GgufHeader) -> dict[str, Any]:
    """The ``config.json`` sizes the memory estimate reads (layers, heads, widths,
    context), from the metadata's ``{arch}.*`` keys."""
    meta = header.meta
    heads = meta("{arch}.attention.head_count", 0)
    kv_heads = meta("{arch}.attention.head_count_kv", heads)
    if isinstance(kv_heads, list):  # per layer: the largest is what the cache holds
        kv_heads = max(kv_heads, default=0)
    if isinstance(heads, list):
        heads = max(heads, default=0)
    out = {
        "num_hidden_layers": meta("{arch}.block_count", 0),
        "hidden_size": meta("{arch}.embedding_length", 0),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": meta("{arch}.attention.key_length", 0),
        "intermediate_size": meta("{arch}.feed_forward_length", 0),
        "max_position_embeddings": meta("{arch}.context_length", 0),
        "moe_intermediate_size": meta("{arch}.expert_feed_forward_length", 0),
        "num_experts_per_tok": meta("{arch}.expert_used_count", 0),
    }
    if window := meta("{arch}.attention.sliding_window", 0):
        out["sliding_window"] = window
        if header.architecture == "gemma3":
            out["sliding_window_pattern"] = meta("{arch}.attention.sliding_window_pattern", 6)
        elif header.architecture == "gemma2":
            out["sliding_window_pattern"] = 2
    return {key: value for key, value in out.items() if isinstance(value, int) and value}
