"""Which mflux pipeline serves an image model, and how it is built and called.

mflux has one class per model family, each with its own ``generate_image``
arguments. A model entry names an mflux preset (``config_name``: ``schnell``,
``flux2-klein-4b``, ``qwen-image-edit``, … or any alias mflux accepts; the gateway
has already translated mlx-openai-server's names, see
``supervisor/config/kinds/image.py``); when it
does not, mflux infers the preset from ``model_path`` (``…/flux2-klein-4b-4bit``).
The preset's registry key selects a :class:`Family` here, and the model entry's
``model_config`` mapping overrides fields of a copy of the preset's mflux
``ModelConfig`` (mapping fields such as ``transformer_overrides`` are merged key
by key), which is also how a test describes a tiny model.

Every failure is a :class:`~.hub.LoadError` whose message says what to change.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from mlx_gateway.workers.runtime.contract import LoadError

Mode = Literal["generate", "edit"]
EditInputs = Literal["image_path", "image_paths", "fill"]


@dataclass(frozen=True)
class Family:
    """One mflux model family and how its pipelines take their inputs."""

    name: str
    generator: str | None
    """``module:Class`` of the text-to-image pipeline, if the family has one."""
    editor: str | None
    """``module:Class`` of the edit pipeline, if the family has one."""
    latent_creator: str
    """``module:Class`` whose ``unpack_latents`` turns loop latents into VAE input
    (for partial images)."""
    edit_inputs: EditInputs = "image_paths"
    """``image_path``: one input image; ``image_paths``: a list; ``fill``: one image
    and a mask (inpainting)."""
    max_images: int = 1
    negative_prompt: bool = False
    default_guidance: float | None = None
    """mflux's own default for the family's command; ``None`` leaves the pipeline's."""
    multiple_of: int = 16
    """Width and height must be multiples of this (VAE factor 8, patch 2)."""

    def pipeline(self, mode: Mode) -> str | None:
        return self.generator if mode == "generate" else self.editor


_FLUX1 = "mflux.models.flux.variants"
_FLUX1_LATENTS = "mflux.models.flux.latent_creator.flux_latent_creator:FluxLatentCreator"
FLUX1 = Family(
    "flux1",
    generator=f"{_FLUX1}.txt2img.flux:Flux1",
    editor=None,
    latent_creator=_FLUX1_LATENTS,
    negative_prompt=True,
    default_guidance=3.5,
)
FLUX1_KONTEXT = Family(
    "flux1-kontext",
    generator=None,
    editor=f"{_FLUX1}.kontext.flux_kontext:Flux1Kontext",
    latent_creator=_FLUX1_LATENTS,
    edit_inputs="image_path",
    default_guidance=2.5,
)
FLUX1_FILL = Family(
    "flux1-fill",
    generator=None,
    editor=f"{_FLUX1}.fill.flux_fill:Flux1Fill",
    latent_creator=_FLUX1_LATENTS,
    edit_inputs="fill",
    default_guidance=30.0,
)
FLUX2 = Family(
    "flux2",
    generator="mflux.models.flux2.variants.txt2img.flux2_klein:Flux2Klein",
    editor="mflux.models.flux2.variants.edit.flux2_klein_edit:Flux2KleinEdit",
    latent_creator="mflux.models.flux2.latent_creator.flux2_latent_creator:Flux2LatentCreator",
    max_images=4,
    default_guidance=1.0,
)
Z_IMAGE = Family(
    "z-image",
    generator="mflux.models.z_image.variants.z_image:ZImage",
    editor=None,
    latent_creator="mflux.models.z_image.latent_creator.z_image_latent_creator:ZImageLatentCreator",
    negative_prompt=True,
)
_QWEN_LATENTS = "mflux.models.qwen.latent_creator.qwen_latent_creator:QwenLatentCreator"
QWEN = Family(
    "qwen-image",
    generator="mflux.models.qwen.variants.txt2img.qwen_image:QwenImage",
    editor=None,
    latent_creator=_QWEN_LATENTS,
    negative_prompt=True,
    default_guidance=3.5,
)
QWEN_EDIT = Family(
    "qwen-image-edit",
    generator=None,
    editor="mflux.models.qwen.variants.edit.qwen_image_edit:QwenImageEdit",
    latent_creator=_QWEN_LATENTS,
    max_images=3,
    negative_prompt=True,
    default_guidance=2.5,
)
FIBO = Family(
    "fibo",
    generator="mflux.models.fibo.variants.txt2img.fibo:FIBO",
    editor=None,
    latent_creator="mflux.models.fibo.latent_creator.fibo_latent_creator:FiboLatentCreator",
    negative_prompt=True,
    default_guidance=4.0,
)

FAMILIES: dict[str, Family] = {
    "schnell": FLUX1,
    "dev": FLUX1,
    "krea-dev": FLUX1,
    "dev-kontext": FLUX1_KONTEXT,
    "dev-fill": FLUX1_FILL,
    "flux2-klein-4b": FLUX2,
    "flux2-klein-9b": FLUX2,
    "flux2-klein-9b-kv": FLUX2,
    "flux2-klein-base-4b": FLUX2,
    "flux2-klein-base-9b": FLUX2,
    "z-image-turbo": Z_IMAGE,
    "z-image": Z_IMAGE,
    "qwen-image": QWEN,
    "qwen-image-edit": QWEN_EDIT,
    "qwen-image-edit-2511": QWEN_EDIT,
    "fibo": FIBO,
}
"""mflux registry key → family: the presets this gateway knows how to call."""

ALIASES = {"kontext": "dev-kontext", "fill": "dev-fill"}
"""Short names people use that mflux itself does not resolve."""


@dataclass(frozen=True)
class Preset:
    """A resolved preset: its mflux registry key, family, and the model config
    (a copy of mflux's, with the entry's overrides applied)."""

    key: str
    family: Family
    model_config: Any


def resolve_preset(
    config_name: str | None, model_path: str, overrides: Mapping[str, Any]
) -> Preset:
    """The preset named by ``config_name`` (or inferred from ``model_path``)."""
    from mflux.models.common.config.model_config import AVAILABLE_MODELS
    from mflux.models.common.resolution.config_resolution import ConfigResolution

    name = ALIASES.get(config_name, config_name) if config_name else model_path
    try:
        key = ConfigResolution.resolve_key(model_name=name)
    except Exception:
        key = None
    if key is None or key not in FAMILIES:
        known = ", ".join(FAMILIES)
        if config_name:
            problem = f"config_name '{config_name}' is not an mflux preset this gateway serves"
        else:
            problem = (
                f"the mflux preset of '{model_path}' cannot be told from its name; set config_name"
            )
        raise LoadError(f"{problem} (known: {known})")
    return Preset(key, FAMILIES[key], _with_overrides(AVAILABLE_MODELS[key], overrides))


def _with_overrides(base: Any, overrides: Mapping[str, Any]) -> Any:
    # mflux's presets are shared module-level objects: change a copy only.
    config = copy.copy(base)
    fields = sorted(vars(base))
    for name, value in overrides.items():
        if name not in fields:
            raise LoadError(
                f"model_config: '{name}' is not a field of mflux's ModelConfig "
                f"(fields: {', '.join(fields)})"
            )
        current = getattr(config, name)
        if isinstance(current, dict) and isinstance(value, Mapping):
            value = {**current, **value}
        setattr(config, name, value)
    return config


def import_object(ref: str) -> Any:
    """``module:Name`` → the object."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def pipeline_class(preset: Preset, mode: Mode) -> Any:
    """The mflux class that serves ``mode`` for ``preset``."""
    ref = preset.family.pipeline(mode)
    if ref is None:
        other = "image-generation" if mode == "edit" else "image-edit"
        verb = "edit images" if mode == "edit" else "generate images from text alone"
        raise LoadError(f"mflux preset '{preset.key}' cannot {verb}; use model_type {other} for it")
    return import_object(ref)
