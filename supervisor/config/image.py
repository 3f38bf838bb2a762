"""What an image-generation model entry tells its worker, and how its kind is named.

``model_type`` ``image-generation`` (also ``image``) serves ``/v1/images/generations``;
``image-edit`` serves ``/v1/images/edits``. Both run the ``image`` worker (mflux),
which learns which of the two pipelines to load from ``options["mode"]``.
No I/O and no MLX here: the gateway imports it.
"""

from __future__ import annotations

from typing import Any

from mlx_gateway.supervisor.config import ModelConfig

IMAGE_KIND = "image"
EDIT_TYPES = ("image-edit",)
"""The ``model_type`` values whose worker loads an edit pipeline."""


def is_edit_model(config: ModelConfig) -> bool:
    return config.model_type in EDIT_TYPES


def parse_size(text: str) -> tuple[int, int] | None:
    """``"1024x768"`` → ``(1024, 768)``; ``None`` when it is not ``WxH`` with positive
    integers."""
    width, sep, height = text.strip().lower().partition("x")
    if not sep or not width.isdigit() or not height.isdigit():
        return None
    size = int(width), int(height)
    return size if min(size) > 0 else None


def worker_options(config: ModelConfig) -> dict[str, Any]:
    """The ``WorkerSpec.options`` of an image model (see ``workers/image.py``)."""
    size = parse_size(config.size)
    assert size is not None  # the config's checks made sure
    options: dict[str, Any] = {
        "mode": "edit" if is_edit_model(config) else "generate",
        "width": size[0],
        "height": size[1],
        "max_pixels": config.max_output_pixels,
    }
    if config.config_name is not None:
        options["config_name"] = config.config_name
    if config.quantize is not None:
        options["quantize"] = config.quantize
    if config.lora_paths:
        options["lora_paths"] = list(config.lora_paths)
    if config.lora_scales:
        options["lora_scales"] = list(config.lora_scales)
    if config.model_config:
        options["model_config"] = dict(config.model_config)
    if config.steps is not None:
        options["steps"] = config.steps
    if config.guidance is not None:
        options["guidance"] = config.guidance
    return options
