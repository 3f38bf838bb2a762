"""An image request accepted: its checks (size, steps, guidance, inputs) and the
:class:`Job` it becomes, with its edit inputs stored as files for mflux.

A request that fails a check is refused before ``Started`` with a
:class:`~mlx_gateway.workers.runtime.contract.RequestError` naming the field, and
leaves no file behind.
"""

from __future__ import annotations

import math
import random
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from mlx_gateway.protocol.messages import GenerateImage
from mlx_gateway.workers.image.families import Mode, Preset
from mlx_gateway.workers.image.files import OUTPUT_FORMATS, fill_mask, open_upload, save_input
from mlx_gateway.workers.runtime.contract import RequestError

MAX_IMAGES = 10
MAX_STEPS = 500
MAX_PARTIAL_IMAGES = 3
SEED_RANGE = 2**32


class ImageOptions(msgspec.Struct, kw_only=True):
    """The model entry's image settings, as the gateway puts them in ``spec.options``
    (other kinds' options, if any, are ignored)."""

    mode: Mode = "generate"
    config_name: str | None = None
    quantize: int | None = None
    lora_paths: list[str] = []
    lora_scales: list[float] = []
    model_config: dict[str, Any] = {}
    steps: int | None = None
    guidance: float | None = None
    width: int = 1024
    height: int = 1024
    max_pixels: int = 2048 * 2048


@dataclass
class Job:
    """One accepted request."""

    request: GenerateImage
    width: int | None
    """``None`` for an edit whose size follows its input image (the pipeline decides)."""
    height: int | None
    steps: int
    guidance: float | None
    seed: int
    inputs: list[Path] = field(default_factory=list)
    mask: Path | None = None
    partial_at: frozenset[int] = frozenset()
    """Denoising steps (1-based) after which a preview is sent."""
    done: int = 0
    """Finished pictures."""

    @property
    def request_id(self) -> str:
        return self.request.request_id

    def seed_of(self, index: int) -> int:
        return (self.seed + index) % SEED_RANGE

    def discard_files(self) -> None:
        if self.inputs:
            shutil.rmtree(self.inputs[0].parent, ignore_errors=True)


def accept(
    request: GenerateImage,
    payloads: Sequence[bytes],
    *,
    preset: Preset,
    options: ImageOptions,
    default_steps: int,
    scratch: Callable[[], Path],
) -> Job:
    """Check ``request`` against the model (``preset``) and its entry's ``options``;
    the job, its edit inputs stored under a new folder of ``scratch()``."""
    family = preset.family
    if not request.prompt.strip():
        raise RequestError("The prompt is empty.", param="prompt")
    if not 1 <= request.n <= MAX_IMAGES:
        raise RequestError(f"n must be between 1 and {MAX_IMAGES}.", param="n")
    steps = default_steps if request.steps is None else request.steps
    if not 1 <= steps <= MAX_STEPS:
        raise RequestError(f"steps must be between 1 and {MAX_STEPS}.", param="steps")
    guidance = request.guidance
    if guidance is None:
        guidance = options.guidance
    if guidance is None:
        guidance = family.default_guidance
    if guidance is not None and not (math.isfinite(guidance) and guidance >= 0):
        raise RequestError("guidance must be a number of at least 0.", param="guidance")
    if request.negative_prompt and not family.negative_prompt:
        raise RequestError(
            f"This model ({preset.key}) does not take a negative_prompt.",
            param="negative_prompt",
        )
    if request.output_format not in OUTPUT_FORMATS:
        raise RequestError(
            f"output_format must be one of {', '.join(OUTPUT_FORMATS)}.",
            param="output_format",
        )
    compression = request.output_compression
    if compression is not None and not 0 <= compression <= 100:
        raise RequestError(
            "output_compression must be between 0 and 100.", param="output_compression"
        )
    if not 0 <= request.partial_images <= MAX_PARTIAL_IMAGES:
        raise RequestError(
            f"partial_images must be between 0 and {MAX_PARTIAL_IMAGES}.",
            param="partial_images",
        )
    job = Job(
        request=request,
        width=request.width,
        height=request.height,
        steps=steps,
        guidance=guidance,
        seed=random.randrange(SEED_RANGE) if request.seed is None else request.seed,
        partial_at=partial_steps(steps, request.partial_images),
    )
    inputs = _inputs(request, payloads, job, preset, options, scratch)
    try:
        if job.width is None or job.height is None:
            job.width, job.height = _default_size(inputs, preset, options)
        _check_size(job.width, job.height, preset, options)
    except RequestError:
        job.discard_files()
        raise
    return job


def _inputs(
    request: GenerateImage,
    payloads: Sequence[bytes],
    job: Job,
    preset: Preset,
    options: ImageOptions,
    scratch: Callable[[], Path],
) -> list[Any]:
    """Decode and store the edit inputs; returns the decoded images."""
    family = preset.family
    expected = request.images + (1 if request.mask else 0)
    if len(payloads) != expected:
        raise RequestError(
            f"the request announced {expected} file(s) but carried {len(payloads)}",
            status=500,
            type="server_error",
        )
    if options.mode == "generate":
        if request.images or request.mask:
            raise RequestError(
                "This model generates images from text; it does not take input images "
                "(use a model of model_type image-edit with /v1/images/edits).",
                param="image",
            )
        return []
    if request.images < 1:
        raise RequestError("An edit needs at least one input image.", param="image")
    if request.images > family.max_images:
        raise RequestError(
            f"This model takes at most {family.max_images} input image(s); got {request.images}.",
            param="image",
        )
    if request.mask and family.edit_inputs != "fill":
        raise RequestError(
            f"This model ({preset.key}) edits the whole image and takes no mask.",
            param="mask",
        )
    if family.edit_inputs == "fill" and not request.mask:
        raise RequestError(
            f"This model ({preset.key}) paints inside a mask: send a 'mask'.",
            param="mask",
        )
    multiple = family.multiple_of
    images = [open_upload(data, "image", multiple) for data in payloads[: request.images]]
    mask = None
    if request.mask:
        mask = fill_mask(open_upload(payloads[-1], "mask", multiple), images[0].size)
    # Files only once every input is known good: a rejected request leaves none.
    folder = Path(tempfile.mkdtemp(dir=scratch()))
    job.inputs = [save_input(img, folder / f"input-{i}.png") for i, img in enumerate(images)]
    if mask is not None:
        job.mask = save_input(mask, folder / "mask.png")
    return images


def _default_size(inputs: list[Any], preset: Preset, options: ImageOptions) -> tuple[int, int]:
    """The configured size; for an edit, its first input's size within the limits."""
    if not inputs:
        return options.width, options.height
    width, height = inputs[0].size
    scale = min(1.0, math.sqrt(options.max_pixels / (width * height)))
    multiple = preset.family.multiple_of
    snap = lambda side: max(multiple, int(side * scale) // multiple * multiple)  # noqa: E731
    return snap(width), snap(height)


def _check_size(width: int, height: int, preset: Preset, options: ImageOptions) -> None:
    multiple = preset.family.multiple_of
    given = f"{width}x{height}"
    if width < multiple or height < multiple or width % multiple or height % multiple:
        low = lambda side: max(multiple, side // multiple * multiple)  # noqa: E731
        raise RequestError(
            f"size {given} is not valid for this model: width and height must be "
            f"positive multiples of {multiple} (e.g. {low(width)}x{low(height)}).",
            param="size",
        )
    if width * height > options.max_pixels:
        raise RequestError(
            f"size {given} is too large for this model: at most "
            f"{options.max_pixels:,} pixels (max_output_pixels).",
            param="size",
        )


def partial_steps(steps: int, partial_images: int) -> frozenset[int]:
    """Steps after which previews go out: spread evenly, never the last step."""
    if partial_images <= 0 or steps < 2:
        return frozenset()
    count = min(partial_images, steps - 1)
    return frozenset(max(1, round(steps * (k + 1) / (count + 1))) for k in range(count))
