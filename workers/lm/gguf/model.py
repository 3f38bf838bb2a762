"""Which MLX folder a GGUF ``model_path`` loads from: found (:mod:`.source`), and
converted on its first load (:mod:`.convert`, imported only then: it brings the
``gguf`` package and NumPy, which a worker of a Hugging Face model never needs)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlx_gateway.store.gguf_files import conversions_dir
from mlx_gateway.workers.lm.gguf.source import digest_of, find_source
from mlx_gateway.workers.runtime.download import DOWNLOAD


def gguf_model(model_path: str, on_convert: Callable[[str], None]) -> Path | None:
    """The MLX folder of the GGUF ``model_path`` names (converted now on the first
    load, ``on_convert(label)`` called first), or ``None`` when it names no GGUF."""

    def pulled(line: dict[str, Any]) -> None:
        if "total" in line:
            DOWNLOAD.record(int(line.get("completed") or 0), int(line["total"]))

    source = find_source(model_path, pulled)
    if source is None:
        return None
    out = conversions_dir() / digest_of(source)
    if (out / "config.json").is_file():
        return out
    from mlx_gateway.workers.lm.gguf.convert import convert

    on_convert(source.label)
    convert(source, out)
    return out
