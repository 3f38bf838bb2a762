"""A GGUF's tensors as MLX arrays, and what each becomes in the MLX model.

``mx.load`` reads a GGUF itself and returns Q4_0, Q4_1 and Q8_0 tensors already in
MLX's affine layout (``weight``/``scales``/``biases``, groups of 32): a file of only
those types and F16/F32 is read that way and its quantized tensors are kept bit for
bit. Any other file is read tensor by tensor with the ``gguf`` package and
dequantized by its NumPy code (``mx.load`` cannot read Q5_0, Q5_1 or the IQ types,
and its float16 of the K-quants disagrees with llama.cpp's on MLX 0.32.4, which the
tests show); the K-quants and the other block types are then quantized again to
MLX's bits (:data:`REQUANT_BITS`, groups of :data:`GROUP_SIZE`), so a Q4_K_M model
stays about 4.5 bits a weight in memory, not float16, and that file's
Q4_0/Q4_1/Q8_0 tensors are quantized again at their own bits.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize

from mlx_gateway.store import gguf_header as header
from mlx_gateway.store.gguf_header import GROUP_SIZE
from mlx_gateway.workers.lm.gguf.arch import GgufError

log = logging.getLogger(__name__)

T = GGMLQuantizationType
KEPT_BITS = {T.__members__[name]: bits for name, bits in header.KEPT_BITS.items()}
"""Types ``mx.load`` returns as MLX quantized arrays: kept bit for bit."""
REQUANT_BITS = {T.__members__[name]: bits for name, bits in header.REQUANT_BITS.items()}
"""Block types dequantized and quantized again, and to how many bits
(:data:`...store.gguf_header.REQUANT_BITS` says why those)."""

SYMMETRIC_OFFSET = {T.Q4_0: 8, T.Q8_0: 128}
"""Q4_0 and Q8_0 hold ``d * (q - offset)``: MLX's bias is ``-offset * d``."""
FLOAT_TYPES = tuple(T.__members__[name] for name in header.FLOAT_TYPES)
MX_LOAD_TYPES = (T.F32, T.F16, *KEPT_BITS)
"""A file of only these types is read by ``mx.load``."""


@dataclass
class Tensor:
    """One GGUF tensor, read: ``weight`` (and ``scales``/``biases`` when it is kept
    quantized), its GGUF type, and the bytes it takes in the file."""

    name: str
    kind: GGMLQuantizationType
    weight: mx.array
    scales: mx.array | None = None
    biases: mx.array | None = None
    file_bytes: int = 0

    @property
    def bits(self) -> int | None:
        """The MLX bits this tensor ends up at (``None``: stays floating point)."""
        if self.kind in FLOAT_TYPES:
            return None
        return KEPT_BITS.get(self.kind) or REQUANT_BITS.get(self.kind)


def _unknown_types(reader: GGUFReader) -> list[str]:
    known = {*FLOAT_TYPES, *KEPT_BITS, *REQUANT_BITS}
    return sorted({t.tensor_type.name for t in reader.tensors if t.tensor_type not in known})


def read_tensors(path: Path, reader: GGUFReader) -> Iterator[Tensor]:
    """Every tensor of the GGUF file ``path`` (``reader``: the same file, parsed)."""
    unknown = _unknown_types(reader)
    if unknown:
        raise GgufError(
            f"GGUF '{path.name}' holds tensors of type {', '.join(unknown)}, which cannot be "
            "converted to MLX; use a file quantized with the Q4_K, Q5_K, Q6_K, Q8_0 or "
            "Q4_0 types (or an MLX copy of the model)"
        )
    if all(t.tensor_type in MX_LOAD_TYPES for t in reader.tensors):
        # format: an Ollama blob has no .gguf extension
        arrays: dict[str, mx.array] = mx.load(str(path), format="gguf")  # type: ignore[assignment]
        for info in reader.tensors:
            stem = info.name.removesuffix(".weight")
            yield Tensor(
                info.name,
                info.tensor_type,
                arrays.pop(info.name),
                arrays.pop(f"{stem}.scales", None),
                arrays.pop(f"{stem}.biases", None),
                int(info.n_bytes),
            )
        return
    for info in reader.tensors:
        values = dequantize(info.data, info.tensor_type)
        yield Tensor(info.name, info.tensor_type, mx.array(values), file_bytes=int(info.n_bytes))


def to_mlx(tensor: Tensor, dtype: mx.Dtype, quantize: bool) -> dict[str, mx.array]:
    """``{"weight": …}`` (and ``scales``, ``biases``) for the MLX model: quantized at
    :attr:`Tensor.bits` when ``quantize`` (a matrix of a linear or embedding layer)
    and the source was, floating point in ``dtype`` otherwise."""
    bits = tensor.bits
    if tensor.scales is not None and tensor.biases is not None:
        if quantize:
            scales = tensor.scales.astype(dtype)
            offset = SYMMETRIC_OFFSET.get(tensor.kind)
            # A symmetric type's bias is -offset * scale: derived from the rounded scale,
            # it stays exact in bfloat16 too (rounded alone, it would not).
            biases = scales * -offset if offset is not None else tensor.biases.astype(dtype)
            return {"weight": tensor.weight, "scales": scales, "biases": biases}
        weight = mx.dequantize(
            tensor.weight, tensor.scales, tensor.biases, group_size=GROUP_SIZE, bits=bits or 4
        )
        return {"weight": weight.astype(dtype)}
    weight = tensor.weight.astype(dtype)
    if quantize and bits is not None and weight.shape[-1] % GROUP_SIZE == 0:
        packed, scales, biases = mx.quantize(weight, group_size=GROUP_SIZE, bits=bits)
        return {"weight": packed, "scales": scales, "biases": biases}
    return {"weight": weight}


def numpy_of(array: mx.array) -> np.ndarray[Any, Any]:
    """``array`` as float32 NumPy (for the few tensors read as values: rope factors)."""
    return np.asarray(array.astype(mx.float32))
