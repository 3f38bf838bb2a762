"""A vision model's settings, split between the gateway (how image URLs are read)
and its worker (how images are sized, whether prompts are cached)."""

from __future__ import annotations

from typing import Any

from mlx_gateway.supervisor.config import ModelConfig, ServerConfig
from mlx_gateway.supervisor.engine.image_fetch import MIB, ImagePolicy

VISION_KIND = "vlm"


def image_policy(model: ModelConfig, server: ServerConfig) -> ImagePolicy:
    """How the gateway reads ``model``'s image URLs."""
    allow_private = model.allow_private_image_urls
    if allow_private is None:
        allow_private = server.allow_private_image_urls
    return ImagePolicy(
        max_bytes=int(model.max_image_mb * MIB),
        timeout=model.image_fetch_timeout,
        allow_private=allow_private,
    )


def worker_options(model: ModelConfig) -> dict[str, Any]:
    """``WorkerSpec.options`` of a vision model's worker (see :mod:`..workers.vlm`)."""
    options: dict[str, Any] = {
        "prefix_cache": model.prefix_cache,
        "stream_interval": model.stream_interval,
    }
    if model.resize_shape is not None:
        shape = model.resize_shape
        options["resize_shape"] = [shape[0], shape[-1]]  # one number: a square
    if model.max_pixels is not None:
        options["max_pixels"] = model.max_pixels
    if model.kv_bits is not None:
        options["kv_bits"] = model.kv_bits
        options["kv_group_size"] = model.kv_group_size
        options["quantized_kv_start"] = model.quantized_kv_start
    return options
