"""Decoding request images for the vlm worker (PIL only, no model): formats,
EXIF orientation, first frames, transparency, sizing, and the errors."""

from __future__ import annotations

import io
import struct
import zlib

import pytest
from PIL import Image
from pillow_heif import register_heif_opener

from mlx_gateway.workers.runtime.contract import RequestError
from mlx_gateway.workers.vlm.images import (
    LOW_DETAIL_SIZE,
    MAX_DECODED_PIXELS,
    ImageLimits,
    decode_image,
)

register_heif_opener()  # only to encode HEIC here: decode_image registers it itself
WHERE = "messages[0].content[1].image_url"
RED = (255, 0, 0)


def encode(image: Image.Image, fmt: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def solid(size: tuple[int, int], color: tuple[int, ...] = RED, mode: str = "RGB") -> Image.Image:
    return Image.new(mode, size, color)


LOSSLESS = [
    ("PNG", {}),
    ("BMP", {}),
    ("TIFF", {}),
    ("GIF", {}),
    ("WEBP", {"lossless": True}),
]


@pytest.mark.parametrize(("fmt", "options"), LOSSLESS, ids=[f for f, _ in LOSSLESS])
def test_lossless_formats_decode_to_the_same_pixels(fmt: str, options: dict) -> None:
    picture = solid((40, 30))
    picture.putpixel((3, 4), (0, 0, 255))
    decoded = decode_image(encode(picture, fmt, **options), where=WHERE)
    assert decoded.mode == "RGB"
    assert decoded.size == (40, 30)
    assert decoded.tobytes() == picture.tobytes()


def test_jpeg() -> None:
    decoded = decode_image(encode(solid((40, 30)), "JPEG", quality=95), where=WHERE)
    assert decoded.size == (40, 30)
    r, g, b = decoded.getpixel((20, 15))
    assert r > 240 and g < 15 and b < 15


LOSSY_MODERN = ["HEIF", "AVIF"]


@pytest.mark.parametrize("fmt", LOSSY_MODERN)
def test_heic_and_avif_decode(fmt: str) -> None:
    data = encode(solid((40, 30)), fmt, quality=90)
    assert data[4:12] in (b"ftypheic", b"ftypavif")  # the real container, not a PNG
    decoded = decode_image(data, where=WHERE)
    assert decoded.mode == "RGB"
    assert decoded.size == (40, 30)
    r, g, b = decoded.getpixel((20, 15))
    assert r > 240 and g < 15 and b < 15


@pytest.mark.parametrize("fmt", LOSSY_MODERN)
def test_heic_and_avif_orientation_and_transparency(fmt: str) -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90° clockwise to view
    rotated = decode_image(encode(solid((40, 30)), fmt, exif=exif.tobytes()), where=WHERE)
    assert rotated.size == (30, 40)
    clear = decode_image(encode(solid((40, 30), (0, 0, 0, 0), "RGBA"), fmt), where=WHERE)
    assert all(channel > 240 for channel in clear.getpixel((5, 5)))


@pytest.mark.parametrize("fmt", LOSSY_MODERN)
def test_truncated_heic_and_avif_are_400(fmt: str) -> None:
    data = encode(solid((40, 30)), fmt)
    with pytest.raises(RequestError) as caught:
        decode_image(data[:120], where=WHERE)
    assert caught.value.status == 400
    assert WHERE in str(caught.value)


def test_exif_orientation_is_applied() -> None:
    # Stored 60 wide and 20 high, with the camera's note "rotate 90° to view".
    stored = solid((60, 20))
    stored.paste((0, 0, 255), (0, 0, 10, 20))  # a blue band on the stored left edge
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90 CW
    decoded = decode_image(encode(stored, "JPEG", quality=95, exif=exif), where=WHERE)
    assert decoded.size == (20, 60)
    r, _, b = decoded.getpixel((10, 3))  # the band is now on top
    assert b > 200 and r < 60


def test_animated_gif_is_its_first_frame() -> None:
    frames = [solid((16, 16), RED), solid((16, 16), (0, 255, 0))]
    data = encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100)
    assert Image.open(io.BytesIO(data)).n_frames == 2
    decoded = decode_image(data, where=WHERE)
    assert decoded.getpixel((8, 8)) == RED


def test_transparency_becomes_white() -> None:
    picture = solid((10, 10), (0, 0, 0, 0), mode="RGBA")
    picture.putpixel((1, 1), (255, 0, 0, 255))
    decoded = decode_image(encode(picture, "PNG"), where=WHERE)
    assert decoded.getpixel((5, 5)) == (255, 255, 255)
    assert decoded.getpixel((1, 1)) == RED


def test_max_pixels_scales_down_keeping_the_aspect_ratio() -> None:
    data = encode(solid((400, 200)), "PNG")
    decoded = decode_image(data, where=WHERE, limits=ImageLimits(max_pixels=20_000))
    assert decoded.size == (200, 100)
    small = decode_image(
        encode(solid((40, 20)), "PNG"), where=WHERE, limits=ImageLimits(max_pixels=20_000)
    )
    assert small.size == (40, 20)  # never scaled up


def test_resize_shape_is_exact() -> None:
    limits = ImageLimits(resize_shape=(64, 32), max_pixels=100)
    decoded = decode_image(encode(solid((30, 90)), "PNG"), where=WHERE, limits=limits)
    assert decoded.size == (64, 32)


def test_low_detail_fits_the_low_detail_square() -> None:
    data = encode(solid((2048, 1024)), "PNG")
    assert decode_image(data, where=WHERE, detail="high").size == (2048, 1024)
    low = decode_image(data, where=WHERE, detail="low")
    assert low.size == (LOW_DETAIL_SIZE, LOW_DETAIL_SIZE // 2)


@pytest.mark.parametrize(
    "data",
    [b"", b"not an image at all", b"%PDF-1.4\n" + b"0" * 100],
    ids=["empty", "text", "pdf"],
)
def test_not_an_image_is_a_400_naming_the_part(data: bytes) -> None:
    with pytest.raises(RequestError) as caught:
        decode_image(data, where=WHERE)
    assert caught.value.status == 400
    assert caught.value.param == WHERE
    assert WHERE in caught.value.message


def test_truncated_image_is_a_400() -> None:
    data = encode(solid((300, 300)), "JPEG")
    with pytest.raises(RequestError) as caught:
        decode_image(data[: len(data) // 3], where=WHERE)
    assert caught.value.status == 400
    assert "cannot be decoded" in caught.value.message


def png_claiming(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width`` x ``height`` (its data is a 1x1 image):
    what a decompression bomb looks like before it is decoded."""
    data = encode(solid((1, 1)), "PNG")
    ihdr = struct.pack(">II", width, height) + data[24:29]
    chunk = b"IHDR" + ihdr
    patched = chunk + struct.pack(">I", zlib.crc32(chunk))
    return data[:12] + patched + data[12 + len(patched) :]


def test_too_many_pixels_is_refused_before_decoding() -> None:
    side = int(MAX_DECODED_PIXELS**0.5) + 10
    with pytest.raises(RequestError) as caught:
        decode_image(png_claiming(side, side), where=WHERE)
    assert caught.value.status == 413
    assert caught.value.code == "image_too_large"
