"""Convert a CTranslate2 Whisper model (faster-whisper's format) to mlx-whisper's.

``mlx-gateway convert-whisper SRC DST`` runs :func:`convert`. SRC is a directory
holding CTranslate2's ``model.bin`` (and usually its ``config.json``); DST receives
``config.json`` (the model's dimensions) and ``weights.safetensors``, which
``mlx_whisper.load_model`` reads directly.

Only numpy is used: the conversion runs in the gateway's environment without
importing MLX, and takes a fraction of a second for Whisper tiny.

CTranslate2's ``model.bin`` (binary version 6), all integers little-endian::

    u32 version | str spec name | u32 spec revision | u32 variable count
    per variable:  str name | u8 rank | u32 * rank shape | u8 dtype | u32 byte count | bytes
    u32 alias count | per alias: str alias | str target

where ``str`` is a u16 byte count followed by NUL-terminated UTF-8.
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

__all__ = ["Conversion", "ConversionError", "convert", "read_ct2", "write_safetensors"]

SUPPORTED_VERSION = 6

_CT2_DTYPES: dict[int, Callable[[bytes], np.ndarray]] = {
    0: lambda raw: np.frombuffer(raw, dtype="<f4"),
    1: lambda raw: np.frombuffer(raw, dtype="i1"),
    2: lambda raw: np.frombuffer(raw, dtype="<i2"),
    3: lambda raw: np.frombuffer(raw, dtype="<i4"),
    4: lambda raw: np.frombuffer(raw, dtype="<f2"),
    # bfloat16 is the upper half of a float32: widen it bit for bit.
    5: lambda raw: (np.frombuffer(raw, dtype="<u2").astype("<u4") << 16).view("<f4"),
}

_SAFETENSORS_DTYPES = {
    np.dtype("float16"): "F16",
    np.dtype("float32"): "F32",
    np.dtype("int32"): "I32",
}


class ConversionError(Exception):
    """The source is not a CTranslate2 Whisper model this converter can read."""


@dataclass(frozen=True)
class Conversion:
    """What :func:`convert` wrote."""

    config: dict[str, int | str]
    tensors: int
    seconds: float
    weights: Path


# ---------------------------------------------------------------- reading


class _Reader:
    def __init__(self, stream: BinaryIO, path: Path) -> None:
        self._stream = stream
        self._path = path

    def take(self, size: int) -> bytes:
        raw = self._stream.read(size)
        if len(raw) != size:
            raise ConversionError(f"{self._path} is truncated")
        return raw

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return int(struct.unpack("<H", self.take(2))[0])

    def u32(self) -> int:
        return int(struct.unpack("<I", self.take(4))[0])

    def text(self) -> str:
        return self.take(self.u16()).rstrip(b"\0").decode()


def read_ct2(path: str | Path) -> tuple[str, dict[str, np.ndarray]]:
    """The spec name (``WhisperSpec``) and every variable of a CTranslate2 ``model.bin``,
    aliases resolved. Arrays are read-only views of the file's bytes."""
    path = Path(path)
    with path.open("rb") as stream:
        reader = _Reader(stream, path)
        version = reader.u32()
        if version != SUPPORTED_VERSION:
            raise ConversionError(
                f"{path}: CTranslate2 binary version {version} is not supported "
                f"(this converter reads version {SUPPORTED_VERSION})"
            )
        spec = reader.text()
        reader.u32()  # spec revision: the layout below does not depend on it
        variables: dict[str, np.ndarray] = {}
        for _ in range(reader.u32()):
            name = reader.text()
            shape = tuple(reader.u32() for _ in range(reader.u8()))
            dtype = reader.u8()
            raw = reader.take(reader.u32())
            if dtype not in _CT2_DTYPES:
                raise ConversionError(f"{path}: '{name}' has unknown dtype code {dtype}")
            variables[name] = _CT2_DTYPES[dtype](raw).reshape(shape)
        for _ in range(reader.u32()):
            alias, target = reader.text(), reader.text()
            variables[alias] = variables[target]
    return spec, variables


# ---------------------------------------------------------------- mapping


def _layer_count(variables: dict[str, np.ndarray], side: str) -> int:
    count = 0
    while f"{side}/layer_{count}/ffn/linear_0/weight" in variables:
        count += 1
    return count


class _Mapper:
    """Collects mlx-whisper tensors from CTranslate2 variables, by scope."""

    def __init__(self, variables: dict[str, np.ndarray]) -> None:
        self.src = variables
        self.out: dict[str, np.ndarray] = {}

    def get(self, name: str) -> np.ndarray:
        try:
            return self.src[name]
        except KeyError:
            raise ConversionError(f"the model has no variable '{name}'") from None

    def linear(self, dst: str, src: str) -> None:
        self.out[f"{dst}.weight"] = self.get(f"{src}/weight")
        self.out[f"{dst}.bias"] = self.get(f"{src}/bias")

    def norm(self, dst: str, src: str) -> None:
        self.out[f"{dst}.weight"] = self.get(f"{src}/gamma")
        self.out[f"{dst}.bias"] = self.get(f"{src}/beta")

    def split(self, dst: str, src: str, parts: tuple[str, ...]) -> None:
        """CTranslate2 stacks q/k/v (or k/v) projections into one matrix; Whisper's
        key projection has no bias, so its (zero) slice of the bias is dropped."""
        weights = np.split(self.get(f"{src}/weight"), len(parts))
        biases = np.split(self.get(f"{src}/bias"), len(parts))
        for part, weight, bias in zip(parts, weights, biases, strict=True):
            self.out[f"{dst}.{part}.weight"] = weight
            if part != "key":
                self.out[f"{dst}.{part}.bias"] = bias

    def block(self, side: str, index: int) -> None:
        src, dst = f"{side}/layer_{index}", f"{side}.blocks.{index}"
        self.split(f"{dst}.attn", f"{src}/self_attention/linear_0", ("query", "key", "value"))
        self.linear(f"{dst}.attn.out", f"{src}/self_attention/linear_1")
        self.norm(f"{dst}.attn_ln", f"{src}/self_attention/layer_norm")
        if side == "decoder":
            self.linear(f"{dst}.cross_attn.query", f"{src}/attention/linear_0")
            self.split(f"{dst}.cross_attn", f"{src}/attention/linear_1", ("key", "value"))
            self.linear(f"{dst}.cross_attn.out", f"{src}/attention/linear_2")
            self.norm(f"{dst}.cross_attn_ln", f"{src}/attention/layer_norm")
        self.linear(f"{dst}.mlp1", f"{src}/ffn/linear_0")
        self.linear(f"{dst}.mlp2", f"{src}/ffn/linear_1")
        self.norm(f"{dst}.mlp_ln", f"{src}/ffn/layer_norm")


def whisper_tensors(
    variables: dict[str, np.ndarray],
) -> tuple[dict[str, np.ndarray], dict[str, int | str]]:
    """mlx-whisper's tensors and ``config.json`` for a CTranslate2 Whisper model."""
    mapper = _Mapper(variables)
    for conv in ("conv1", "conv2"):
        # Conv1d weights: CTranslate2 (out, in, kernel) → MLX (out, kernel, in).
        weight = mapper.get(f"encoder/{conv}/weight")
        mapper.out[f"encoder.{conv}.weight"] = weight.transpose(0, 2, 1)
        mapper.out[f"encoder.{conv}.bias"] = mapper.get(f"encoder/{conv}/bias")
    audio_layers = _layer_count(variables, "encoder")
    text_layers = _layer_count(variables, "decoder")
    if not audio_layers or not text_layers:
        raise ConversionError("no encoder or decoder layers found: not a Whisper model")
    for index in range(audio_layers):
        mapper.block("encoder", index)
    for index in range(text_layers):
        mapper.block("decoder", index)
    mapper.norm("encoder.ln_post", "encoder/layer_norm")
    mapper.norm("decoder.ln", "decoder/layer_norm")
    embedding = mapper.get("decoder/embeddings/weight")
    mapper.out["decoder.token_embedding.weight"] = embedding
    positions = mapper.get("decoder/position_encodings/encodings")
    mapper.out["decoder.positional_embedding"] = positions
    # The encoder's sinusoidal positions are recomputed by mlx-whisper; only their
    # shape (audio context, width) is needed here.
    audio_positions = mapper.get("encoder/position_encodings/encodings")
    config: dict[str, int | str] = {
        "model_type": "whisper",
        "n_mels": int(mapper.out["encoder.conv1.weight"].shape[2]),
        "n_audio_ctx": int(audio_positions.shape[0]),
        "n_audio_state": int(audio_positions.shape[1]),
        "n_audio_head": int(mapper.get("encoder/num_heads").reshape(-1)[0]),
        "n_audio_layer": audio_layers,
        "n_vocab": int(embedding.shape[0]),
        "n_text_ctx": int(positions.shape[0]),
        "n_text_state": int(embedding.shape[1]),
        "n_text_head": int(mapper.get("decoder/num_heads").reshape(-1)[0]),
        "n_text_layer": text_layers,
    }
    return mapper.out, config


# ---------------------------------------------------------------- writing


def write_safetensors(path: str | Path, tensors: dict[str, np.ndarray]) -> None:
    """Write ``tensors`` in the safetensors layout: a u64 header size, a JSON header
    of names → dtype, shape and byte range, then the raw little-endian data."""
    header: dict[str, object] = {"__metadata__": {"format": "mlx"}}
    offset = 0
    arrays: list[np.ndarray] = []
    for name, array in tensors.items():
        array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
        if array.dtype not in _SAFETENSORS_DTYPES:
            raise ConversionError(f"cannot store '{name}' of dtype {array.dtype}")
        header[name] = {
            "dtype": _SAFETENSORS_DTYPES[array.dtype],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + array.nbytes],
        }
        offset += array.nbytes
        arrays.append(array)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the data starts 8-byte aligned
    with Path(path).open("wb") as out:
        out.write(struct.pack("<Q", len(encoded)))
        out.write(encoded)
        for array in arrays:
            out.write(array.tobytes())


def _alignment_heads(source: Path) -> np.ndarray | None:
    """The (layer, head) pairs that follow the audio best, from CTranslate2's
    ``config.json``; mlx-whisper uses them for word timestamps."""
    config = source / "config.json"
    if not config.is_file():
        return None
    try:
        heads = json.loads(config.read_text()).get("alignment_heads")
    except (OSError, ValueError) as exc:
        raise ConversionError(f"{config} cannot be read: {exc}") from None
    if not heads:
        return None
    array = np.asarray(heads, dtype=np.int32)
    if array.ndim != 2 or array.shape[1] != 2:
        raise ConversionError(f"{config}: alignment_heads must be [layer, head] pairs")
    return array


def convert(source: str | Path, destination: str | Path, *, dtype: str = "float16") -> Conversion:
    """Convert the CTranslate2 Whisper model in ``source`` into ``destination``
    (created if needed; its ``config.json`` and ``weights.safetensors`` are replaced).

    ``dtype`` (``float16`` or ``float32``) is the dtype of the stored weights; the
    worker casts them to its compute dtype when it loads them.

    Raises:
        ConversionError: the source is missing, not Whisper, or in a format not read here.
    """
    started = time.perf_counter()
    src = Path(source).expanduser()
    model_bin = src if src.is_file() else src / "model.bin"
    if not model_bin.is_file():
        raise ConversionError(f"{model_bin} not found: SRC must be a CTranslate2 model directory")
    if dtype not in ("float16", "float32"):
        raise ConversionError(f"dtype must be float16 or float32, not {dtype!r}")
    spec, variables = read_ct2(model_bin)
    if spec != "WhisperSpec":
        raise ConversionError(f"{model_bin} holds a {spec or 'unnamed'} model, not Whisper")
    if any(name.endswith("weight_scale") for name in variables):
        # Small integers also store the model's settings; scales mark quantized weights.
        raise ConversionError(
            f"{model_bin} has quantized weights; convert a float16 or float32 "
            "CTranslate2 model instead"
        )
    tensors, config = whisper_tensors(variables)
    target = np.dtype(dtype)
    stored = {name: array.astype(target) for name, array in tensors.items()}
    heads = _alignment_heads(model_bin.parent)
    if heads is not None:
        # A module attribute of mlx-whisper's model, so load_model's update() sets it.
        stored["alignment_heads"] = heads
    out = Path(destination).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    weights = out / "weights.safetensors"
    write_safetensors(weights, stored)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return Conversion(config, len(stored), time.perf_counter() - started, weights)
