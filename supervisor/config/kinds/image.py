"""Image models (mflux): their settings, their checks, and what their worker is told.

``model_type`` ``image-generation`` (also ``image``) serves ``/v1/images/generations``;
``image-edit`` serves ``/v1/images/edits``. Both run the ``image`` worker (mflux),
which learns which of the two pipelines to load from ``options["mode"]``.
No I/O and no MLX here: the gateway imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

import msgspec

from mlx_gateway.supervisor.config.entry import ModelConfig, Positive, PositiveMiB

if TYPE_CHECKING:
    from mlx_gateway.supervisor.config.context import _Ctx
    from mlx_gateway.supervisor.config.yaml_positions import _KeyPath

IMAGE_SIZE_MULTIPLE = 16
"""Width and height are multiples of this (mflux: VAE factor 8, patch 2)."""


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


def parse_size(text: str) -> tuple[int, int] | None:
    """``"1024x768"`` → ``(1024, 768)``; ``None`` when it is not ``WxH`` with positive
    integers."""
    width, sep, height = text.strip().lower().partition("x")
    if not sep or not width.isdigit() or not height.isdigit():
        return None
    size = int(width), int(height)
    return size if min(size) > 0 else None


class ImageConfig(ModelConfig, kw_only=True, tag="image-generation"):
    """An image-generation model: ``/v1/images/generations``."""

    config_name: str | None = None
    """The mflux preset (``flux2-klein-4b``, ``schnell``, ``dev-kontext``,
    ``qwen-image-edit``, …); left out, mflux infers it from ``model_path``."""
    quantize: Literal[3, 4, 5, 6, 8] | None = None
    """Quantize the weights to this many bits at load."""
    lora_paths: list[str] = []
    """LoRA adapters (local ``.safetensors`` files or Hugging Face repos)."""
    lora_scales: list[float] = []
    """One scale per LoRA path (default 1.0 each)."""
    model_config: dict[str, Any] = {}
    """Overrides of mflux's ModelConfig fields for the preset (mapping fields such as
    ``transformer_overrides`` are merged key by key)."""
    steps: Annotated[int, msgspec.Meta(ge=1, le=500)] | None = None
    """Default denoising steps (else mflux's for the preset)."""
    guidance: Annotated[float, msgspec.Meta(ge=0)] | None = None
    """Default guidance scale (else mflux's for the preset)."""
    size: str = "1024x1024"
    """The ``WxH`` size of a generation that does not ask for one."""
    max_output_pixels: Positive = 2048 * 2048
    """The largest ``width * height`` a request may ask for → else 400."""
    max_image_mb: PositiveMiB = 20.0
    """Image-edit models: largest uploaded ``image`` or ``mask``, in MiB → else 413."""

    edits: ClassVar[bool] = False
    """Whether the worker loads an edit pipeline (``/v1/images/edits``)."""

    def check(self, ctx: _Ctx, here: _KeyPath) -> None:
        """A preset name that fits the model_type, one scale per LoRA, local LoRA
        files, a valid ``size``."""
        import os

        from mlx_gateway.supervisor.config.context import _show
        from mlx_gateway.supervisor.config.paths import _absolute, _looks_local

        super().check(ctx, here)
        implied = preset_model_type(self.config_name) if self.config_name else None
        if implied is not None and self.model_type != implied:
            raise ctx.error(
                (*here, "config_name"),
                f"{self.config_name!r} is an edit preset (it serves /v1/images/edits); set "
                f"model_type: {implied}, or name a generation preset",
            )
        if self.lora_scales and len(self.lora_scales) != len(self.lora_paths):
            raise ctx.error(
                (*here, "lora_scales"),
                f"{len(self.lora_scales)} scale(s) for {len(self.lora_paths)} LoRA path(s); "
                "give one scale per entry of lora_paths, or none (1.0 each)",
            )
        for j, path in enumerate(self.lora_paths):
            if _looks_local(ctx.base_dir, path):
                resolved = _absolute(ctx.base_dir, path)
                if not os.path.exists(resolved):
                    raise ctx.error(
                        (*here, "lora_paths", j),
                        f"LoRA file {resolved!r} does not exist; fix the path (relative paths "
                        "start from the config file's folder) or give a Hugging Face repo id",
                    )
                self.lora_paths[j] = resolved
        width, _, height = self.size.partition("x")
        if not (width.isdigit() and height.isdigit() and int(width) > 0 and int(height) > 0):
            raise ctx.error(
                (*here, "size"),
                f"expected 'WIDTHxHEIGHT' such as '1024x1024', got {_show(self.size)}",
            )
        w, h = int(width), int(height)
        if w % IMAGE_SIZE_MULTIPLE or h % IMAGE_SIZE_MULTIPLE:
            raise ctx.error(
                (*here, "size"),
                f"{self.size!r}: width and height must be multiples of {IMAGE_SIZE_MULTIPLE}",
            )
        if w * h > self.max_output_pixels:
            raise ctx.error(
                (*here, "size"),
                f"{self.size!r} is more than max_output_pixels ({self.max_output_pixels})",
            )

    def worker_options(self) -> dict[str, Any]:
        """The ``WorkerSpec.options`` of an image model (see ``workers/image``)."""
        size = parse_size(self.size)
        assert size is not None  # the config's checks made sure
        options: dict[str, Any] = {
            "mode": "edit" if self.edits else "generate",
            "width": size[0],
            "height": size[1],
            "max_pixels": self.max_output_pixels,
        }
        if self.config_name is not None:
            options["config_name"] = mflux_preset(self.config_name)
        if self.quantize is not None:
            options["quantize"] = self.quantize
        if self.lora_paths:
            options["lora_paths"] = list(self.lora_paths)
        if self.lora_scales:
            options["lora_scales"] = list(self.lora_scales)
        if self.model_config:
            options["model_config"] = dict(self.model_config)
        if self.steps is not None:
            options["steps"] = self.steps
        if self.guidance is not None:
            options["guidance"] = self.guidance
        return options


class ImageEditConfig(ImageConfig, tag="image-edit"):
    """An image-edit model: ``/v1/images/edits``."""

    edits: ClassVar[bool] = True


class ImageAliasConfig(ImageConfig, tag="image"):
    """``model_type: image``: another name of ``image-generation``."""


ENTRIES = (ImageConfig, ImageEditConfig, ImageAliasConfig)
"""The Structs of this kind's ``model_type`` values (the kind table's order)."""


def is_edit_model(config: ModelConfig) -> bool:
    return isinstance(config, ImageConfig) and config.edits
