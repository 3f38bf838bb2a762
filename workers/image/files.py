"""Image files in and out of the image worker: pure PIL, no MLX.

* Uploads for edits (PNG, JPEG, WebP) are checked (format, size before decoding,
  at least one ``multiple`` per side), turned upright by their EXIF orientation and
  written as PNG files, because mflux's edit pipelines take file paths.
* An OpenAI mask marks the area to edit with transparency (alpha 0); mflux's fill
  pipeline wants white where it paints. A mask without an alpha channel is read as
  mflux reads it: white = edit.
* Results are encoded as PNG, JPEG or WebP.

Every problem with an upload is a :class:`~.base.RequestError` (400) naming the field.
"""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image, ImageOps, UnidentifiedImageError

from mlx_gateway.workers.runtime.contract import RequestError

INPUT_FORMATS = ("PNG", "JPEG", "WEBP")
OUTPUT_FORMATS = {"png": "PNG", "jpeg": "JPEG", "webp": "WEBP"}
MAX_INPUT_PIXELS = 50_000_000
"""Uploads claiming more pixels are refused before decoding (decompression bombs)."""


def open_upload(data: bytes, field: str, multiple: int) -> Image.Image:
    """Decode an uploaded image, upright; raises a 400 naming ``field``."""
    try:
        image = Image.open(io.BytesIO(data), formats=INPUT_FORMATS)
    except UnidentifiedImageError:
        raise RequestError(
            f"The '{field}' upload is not a PNG, JPEG or WebP image.", param=field
        ) from None
    width, height = image.size
    if width * height > MAX_INPUT_PIXELS:
        raise RequestError(
            f"The '{field}' image is too large ({width}x{height}); at most "
            f"{MAX_INPUT_PIXELS:,} pixels are accepted.",
            param=field,
        )
    if min(width, height) < multiple:
        raise RequestError(
            f"The '{field}' image is too small ({width}x{height}); each side needs at "
            f"least {multiple} pixels.",
            param=field,
        )
    try:
        image.load()
        return ImageOps.exif_transpose(image)
    except (OSError, ValueError, SyntaxError) as exc:  # truncated or corrupt data
        raise RequestError(f"The '{field}' image cannot be decoded: {exc}", param=field) from None


def save_input(image: Image.Image, path: Path) -> Path:
    """Write an upload for the pipeline (PNG keeps alpha; mflux composites it on white)."""
    image.save(path, format="PNG")
    return path


def fill_mask(mask: Image.Image, size: tuple[int, int]) -> Image.Image:
    """An OpenAI mask as mflux's fill mask: white where the model paints."""
    if mask.size != size:
        raise RequestError(
            f"The mask is {mask.size[0]}x{mask.size[1]} but the image is "
            f"{size[0]}x{size[1]}; they must be the same size.",
            param="mask",
        )
    if mask.mode in ("RGBA", "LA", "PA") or "transparency" in mask.info:
        alpha = mask.convert("RGBA").getchannel("A")
        return alpha.point(lambda a: 255 if a == 0 else 0)
    return mask.convert("L")


def encode(image: Image.Image, output_format: str, compression: int | None) -> bytes:
    """The picture as a file of ``output_format`` (``png``, ``jpeg``, ``webp``).

    ``compression`` (0 to 100, OpenAI's ``output_compression``) is the quality of
    JPEG and WebP; PNG is lossless and ignores it."""
    buffer = io.BytesIO()
    kind = OUTPUT_FORMATS[output_format]
    if kind == "PNG":
        image.save(buffer, format=kind)
    else:
        quality = 90 if compression is None else compression
        rgb = image.convert("RGB") if kind == "JPEG" else image
        rgb.save(buffer, format=kind, quality=quality)
    return buffer.getvalue()
