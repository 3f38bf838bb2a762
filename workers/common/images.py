"""Decode the image files a request carries into RGB pictures for a vision model
(a vlm's chat images, an image-embedding model's inputs).

The gateway sends each image as the raw bytes of its file (binary frames); here
they become ``PIL.Image`` objects the model's processor accepts:

* only PNG, JPEG (multi-picture MPO files from cameras too), WebP, GIF, BMP,
  TIFF, HEIC/HEIF (iPhone photos, through pillow-heif) and AVIF (Pillow's own
  plugin) are opened; any other content is a 400;
* the EXIF orientation is applied, so a photo taken upright is seen upright;
* an animation (GIF, WebP) counts as its first frame;
* transparency is flattened onto white (the processor wants three channels, and
  a transparent pixel's hidden colour is often black);
* the size is bounded before anything is decoded (decompression bombs), then
  adjusted: ``resize_shape`` resizes to exactly that width x height; otherwise
  ``max_pixels`` and ``detail: "low"`` scale the image down (never up),
  keeping its aspect ratio.

No MLX here: pure PIL, testable on its own.
"""

from __future__ import annotations

import functools
import io
import math
from dataclasses import dataclass

from PIL import Image, ImageOps, UnidentifiedImageError

from mlx_gateway.workers.runtime.contract import RequestError

FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP", "TIFF", "HEIF", "AVIF")
"""PIL format names this module opens (``Image.open(formats=…)``)."""
FORMAT_NAMES = "a PNG, JPEG, WebP, GIF, BMP, TIFF, HEIC/HEIF or AVIF file"
MAX_DECODED_PIXELS = 64_000_000
"""Larger images are refused before decoding: a few KiB of PNG can claim 50kx50k."""
LOW_DETAIL_SIZE = 512
"""``detail: "low"``: the image is scaled to fit a square of this side, as OpenAI does."""
DETAILS = ("auto", "low", "high")


@dataclass(frozen=True)
class ImageLimits:
    """A model's image settings (from ``WorkerSpec.options``)."""

    resize_shape: tuple[int, int] | None = None
    """Resize every image to exactly (width, height)."""
    max_pixels: int | None = None
    """Scale larger images down to at most this many pixels."""


def decode_image(
    data: bytes, *, where: str, detail: str = "auto", limits: ImageLimits = ImageLimits()
) -> Image.Image:
    """One image file → an RGB ``Image``, sized for the model.

    ``where`` names the request field the image came from (``messages[0].content[1]``)
    for error messages. Raises :class:`RequestError`: 400 for a file that is not an
    image of a supported format, 413 for one with too many pixels."""
    if not data:
        raise RequestError(f"The image in {where} is empty.", param=where, code="invalid_image")
    _register_plugins()
    try:
        image: Image.Image = Image.open(io.BytesIO(data), formats=FORMATS)
    except UnidentifiedImageError:
        raise RequestError(
            f"The image in {where} cannot be decoded: it is not {FORMAT_NAMES}.",
            param=where,
            code="invalid_image",
        ) from None
    except Image.DecompressionBombError:  # PIL's own bound, far above ours
        raise _too_many_pixels(where, "far more pixels") from None
    except _CORRUPT as exc:
        raise _undecodable(where, exc) from None
    width, height = image.size
    if width * height > MAX_DECODED_PIXELS:
        raise _too_many_pixels(where, f"{width}x{height} pixels")
    try:
        image.seek(0)  # the first frame of an animation
        image = ImageOps.exif_transpose(image)
        image = _rgb(image)
    except _CORRUPT as exc:
        raise _undecodable(where, exc) from None
    return _fit(image, detail, limits)


@functools.cache
def _register_plugins() -> None:
    """Teach Pillow HEIC/HEIF (pillow-heif), once. AVIF is Pillow's own plugin (in its
    wheels since 11.3); pillow-heif's ``HEIF`` opener reads only HEIF brands here."""
    try:
        from pillow_heif import register_heif_opener
    except ImportError:  # an install without the vlm extra's pillow-heif: no HEIC
        return
    register_heif_opener()


_CORRUPT = (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError)
"""What PIL raises for truncated or corrupt data (plugins differ)."""


def _undecodable(where: str, exc: Exception) -> RequestError:
    return RequestError(
        f"The image in {where} cannot be decoded: {exc}.", param=where, code="invalid_image"
    )


def _too_many_pixels(where: str, size: str) -> RequestError:
    return RequestError(
        f"The image in {where} has {size}, more than the {MAX_DECODED_PIXELS:,} pixels "
        "this server decodes.",
        status=413,
        param=where,
        code="image_too_large",
    )


def _rgb(image: Image.Image) -> Image.Image:
    """Three channels; transparent areas become white."""
    if image.mode == "RGB":
        image.load()
        return image
    has_alpha = image.mode in ("RGBA", "LA", "PA") or (
        image.mode == "P" and "transparency" in image.info
    )
    if not has_alpha:
        return image.convert("RGB")
    rgba = image.convert("RGBA")
    canvas = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    canvas.alpha_composite(rgba)
    return canvas.convert("RGB")


def _fit(image: Image.Image, detail: str, limits: ImageLimits) -> Image.Image:
    if limits.resize_shape is not None:
        if image.size != limits.resize_shape:
            image = image.resize(limits.resize_shape, Image.Resampling.BICUBIC)
        return image
    width, height = image.size
    scale = 1.0
    if limits.max_pixels is not None and width * height > limits.max_pixels:
        scale = math.sqrt(limits.max_pixels / (width * height))
    if detail == "low":
        scale = min(scale, LOW_DETAIL_SIZE / max(width, height))
    if scale >= 1.0:
        return image
    # Floors keep the result within max_pixels; at least 1 pixel per side.
    size = (max(1, math.floor(width * scale)), max(1, math.floor(height * scale)))
    return image.resize(size, Image.Resampling.BICUBIC)
