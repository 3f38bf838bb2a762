"""A vision model's worker settings (how images are sized, whether prompts are cached).

How the gateway reads image URLs is :func:`..engine.vision_input.image_policy`."""

from __future__ import annotations

from typing import Any

from mlx_gateway.supervisor.config import ModelConfig

VISION_KIND = "vlm"


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
