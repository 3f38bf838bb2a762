"""The memory a GGUF model will take before its worker ever converted it.

Once converted, a GGUF model is an MLX folder in the gateway's cache, and
:func:`.memory.model_dir` finds it there (its real weights and ``config.json``).
Before that, its size comes from the GGUF's header: each tensor's element count
at the bits the converter will give it (``store/gguf_header.py``: a
Q4_K_M file becomes 4-bit and 6-bit MLX weights in groups of 32, F32 becomes
float16), and the sizes the KV cache estimate needs from its metadata. Only the
header is read, once per file (by path, size and modification time).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlx_gateway.store.gguf_files import converted_folder, gguf_on_disk
from mlx_gateway.store.gguf_header import (
    GgufHeader,
    GgufHeaderError,
    converted_bytes,
    read_header,
    text_config,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GgufSize:
    """What an unconverted GGUF model will weigh in MLX."""

    weights: int
    """Bytes of the converted weights."""
    meta: dict[str, Any]
    """``config.json``-style sizes (layers, heads, widths, context)."""
    file_bytes: int
    architecture: str


@functools.lru_cache(maxsize=64)
def _header(path: str, size: int, mtime_ns: int) -> GgufHeader:
    return read_header(Path(path))


def header_of(path: Path) -> GgufHeader:
    """The header of ``path``, read once for each version of the file."""
    stat = path.stat()
    return _header(str(path), stat.st_size, stat.st_mtime_ns)


def gguf_size(model_path: str) -> GgufSize | None:
    """The size of the GGUF ``model_path`` names once converted; ``None`` when it
    names no GGUF on this machine, when it is converted already (its folder says),
    or when its header cannot be read (logged)."""
    files = gguf_on_disk(model_path)
    if not files or converted_folder(files) is not None:
        return None
    try:
        headers = [header_of(f) for f in files]
        file_bytes = sum(f.stat().st_size for f in files)
    except (GgufHeaderError, OSError) as exc:
        log.warning("cannot size GGUF model %s: %s", model_path, exc)
        return None
    tensors = [t for header in headers for t in header.tensors]
    first = headers[0]
    return GgufSize(converted_bytes(tensors), text_config(first), file_bytes, first.architecture)
