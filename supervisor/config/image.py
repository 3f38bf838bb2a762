"""What an image-generation model entry tells its worker, and how its kind is named.

``model_type`` ``image-generation`` (also ``image``) serves ``/v1/images/generations``;
``image-edit`` serves ``/v1/images/edits``. Both run the ``image`` worker (mflux),
which learns which of the two pipelines to load from ``options["mode"]``.
No I/O and no MLX here: the gateway imports it.
"""

from __future__ import annotations

from typing import Any

from mlx_gateway.supervisor.config.schema import ModelConfig

IMAGE_KIND = "image"
EDIT_TYPES = ("image-edit",)
"""The ``model_type`` values whose worker loads an edit pipeline."""


PEER_PRESETS: dict[str, tuple[str, str | None]] = {
    "flux-schnell": ("schnell", None),
    "flux-dev": ("dev", None),
    "flux-krea-dev": ("krea-dev", None),
    "flux-kontext-dev": ("dev-kontext", "image-edit"),
    "qwen-image": ("qwen-image", None),
    "qwen-image-edit": ("qwen-image-edit", "image-edit"),
    "fibo": ("fibo", None),
    "z-image-turbo": ("z-image-turbo", None),
    "flux2-klein-4b": ("flux2-klein-4b", None),
    "flux2-klein-9b": ("flux2-klein-9b", None),
    "flux2-klein-edit-4b": ("flux2-klein-4b", "image-edit"),
    "flux2-klein-edit-9b": ("flux2-klein-9b", "image-edit"),
}
"""mlx-openai-server's ``--config-name`` values → (the mflux registry key of the same
weights, the ``model_type`` the name implies or ``None``). mflux resolves some of these
names itself, wrongly for a drop-in (``flux-kontext-dev`` → ``dev``, which cannot edit;
``flux2-klein-edit-9b`` → the 4B preset), so they are translated before the worker
sees them. Names not listed go to mflux as they are (its registry keys and aliases)."""


def mflux_preset(config_name: str) -> str:
    """The name the image worker resolves with mflux: ``config_name`` itself, or the
    mflux registry key of an mlx-openai-server preset name."""
    return PEER_PRESETS.get(config_name, (config_name, None))[0]


def preset_model_type(config_name: str) -> str | None:
    """The ``model_type`` an mlx-openai-server preset name implies (its edit presets:
    ``image-edit``), ``None`` for any other name."""
    return PEER_PRESETS.get(config_name, (config_name, None))[1]


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
        options["config_name"] = mflux_preset(config.config_name)
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
