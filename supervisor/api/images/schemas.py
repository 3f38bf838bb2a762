"""Request and response bodies of ``/v1/images/generations`` and ``/v1/images/edits``.

The OpenAI fields, plus extensions for diffusion models: ``seed`` (picture ``i``
uses ``seed + i``), ``steps``, ``guidance`` and ``negative_prompt``. Fields the
models have no use for (``quality``, ``style``, ``moderation``, ``user``, …) are
accepted and ignored, as are unknown ones; the types of known fields are checked,
so a bad value is a 400 naming it.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta, Struct

from mlx_gateway.supervisor.config.kinds.image import parse_size
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.http.body import validation_error

MAX_N = 10
SEED_LIMIT = 2**32

OutputFormat = Literal["png", "jpeg", "webp"]
MEDIA_TYPES = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp"}


class ImageFields(Struct, kw_only=True):
    """What both endpoints take."""

    prompt: str
    model: str
    n: Annotated[int, Meta(ge=1, le=MAX_N)] = 1
    size: str | None = None
    """``WxH`` or ``auto`` (the model's default size; for an edit, its input's)."""
    response_format: Literal["b64_json", "url"] | None = None
    output_format: OutputFormat = "png"
    output_compression: Annotated[int, Meta(ge=0, le=100)] | None = None
    stream: bool = False
    partial_images: Annotated[int, Meta(ge=0, le=3)] = 0
    background: Literal["transparent", "opaque", "auto"] | None = None
    quality: str | None = None
    user: str | None = None
    # extensions
    seed: Annotated[int, Meta(ge=0, lt=SEED_LIMIT)] | None = None
    steps: Annotated[int, Meta(ge=1, le=500)] | None = None
    guidance: Annotated[float, Meta(ge=0)] | None = None
    negative_prompt: str | None = None


class ImageGenerationRequest(ImageFields, kw_only=True):
    """``POST /v1/images/generations`` (JSON)."""

    style: str | None = None
    moderation: str | None = None


class ImageEditForm(ImageFields, kw_only=True):
    """The text fields of ``POST /v1/images/edits`` (multipart; the files apart)."""

    input_fidelity: str | None = None


def parse_edit_form(fields: dict[str, list[str]]) -> ImageEditForm:
    """The form's text fields (each value a string) as :class:`ImageEditForm`; a
    field given twice keeps its first value. Raises :class:`BadRequest` naming it."""
    data = {name: values[0] for name, values in fields.items()}
    try:
        return msgspec.convert(data, ImageEditForm, strict=False)
    except msgspec.ValidationError as exc:
        raise validation_error(str(exc)) from None


def check_fields(req: ImageFields, multiple: int, max_pixels: int) -> tuple[int, int] | None:
    """Checks beyond the types; returns the requested ``(width, height)``, ``None``
    for the model's default. Raises :class:`BadRequest` naming the field."""
    if not req.prompt.strip():
        raise BadRequest("The prompt is empty.", param="prompt")
    if req.background == "transparent":
        raise BadRequest(
            "Transparent backgrounds are not supported by these models; use 'opaque' or 'auto'.",
            param="background",
        )
    if req.stream and req.response_format == "url":
        raise BadRequest(
            "A stream sends the images themselves; response_format 'url' needs stream false.",
            param="response_format",
        )
    if req.size is None or req.size == "auto":
        return None
    size = parse_size(req.size)
    if size is None:
        raise BadRequest(
            f"Invalid value for 'size': {req.size!r}; expected 'WIDTHxHEIGHT' (such as "
            "'1024x1024') or 'auto'.",
            param="size",
        )
    width, height = size
    if width % multiple or height % multiple:
        low = lambda side: max(multiple, side // multiple * multiple)  # noqa: E731
        raise BadRequest(
            f"Invalid value for 'size': {req.size!r}; width and height must be multiples "
            f"of {multiple} (e.g. '{low(width)}x{low(height)}').",
            param="size",
        )
    if width * height > max_pixels:
        raise BadRequest(
            f"Invalid value for 'size': {req.size!r} is larger than this model allows "
            f"({max_pixels:,} pixels).",
            param="size",
        )
    return size


# ---------------------------------------------------------------- responses


class ImageData(Struct, omit_defaults=True):
    """One picture: ``b64_json`` or ``url``, and its ``seed`` (an extension)."""

    b64_json: str | None = None
    url: str | None = None
    seed: int | None = None


class ImagesResponse(Struct):
    created: int
    data: list[ImageData]
    output_format: str
    size: str
    background: str = "opaque"


class InputTokensDetails(Struct):
    image_tokens: int = 0
    text_tokens: int = 0


class ImageUsage(Struct):
    """Token counts of OpenAI's GPT image models; diffusion models have none."""

    input_tokens: int = 0
    input_tokens_details: InputTokensDetails = msgspec.field(default_factory=InputTokensDetails)
    output_tokens: int = 0
    total_tokens: int = 0


class PartialImageEvent(Struct):
    type: str
    b64_json: str
    partial_image_index: int
    created_at: int
    size: str
    output_format: str
    background: str = "opaque"
    quality: str = "auto"


class CompletedImageEvent(Struct):
    type: str
    b64_json: str
    created_at: int
    size: str
    output_format: str
    background: str = "opaque"
    quality: str = "auto"
    usage: ImageUsage = msgspec.field(default_factory=ImageUsage)


def event_types(edit: bool) -> tuple[str, str]:
    """The (partial, completed) event ``type`` of a stream."""
    prefix = "image_edit" if edit else "image_generation"
    return f"{prefix}.partial_image", f"{prefix}.completed"
