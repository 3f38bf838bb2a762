"""What a vision model's entry and files say: image limits, its chat template file,
its config as a dict, its context length."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlx_gateway.workers.runtime.contract import LoadError
from mlx_gateway.workers.vlm.images import ImageLimits


def image_limits(options: dict[str, Any]) -> ImageLimits:
    shape = options.get("resize_shape")
    max_pixels = options.get("max_pixels")
    return ImageLimits(
        resize_shape=(int(shape[0]), int(shape[1])) if shape else None,
        max_pixels=int(max_pixels) if max_pixels else None,
    )


def set_chat_template(processor: Any, path: str) -> None:
    try:
        template = Path(path).expanduser().read_text()
    except OSError as exc:
        raise LoadError(f"chat_template_file '{path}' cannot be read: {exc.strerror}") from None
    processor.chat_template = template
    tokenizer = getattr(processor, "tokenizer", None)
    if tokenizer is not None:
        tokenizer.chat_template = template


def config_dict(config: Any) -> dict[str, Any]:
    if isinstance(config, dict):
        return config
    return {k: v for k, v in vars(config).items() if not k.startswith("_")}


def context_length_of(config: dict[str, Any]) -> int | None:
    text_config = config.get("text_config")
    if text_config is not None and not isinstance(text_config, dict):
        text_config = config_dict(text_config)
    for source in (text_config or {}, config):
        value = source.get("max_position_embeddings")
        if isinstance(value, int) and value > 0:
            return value
    return None
