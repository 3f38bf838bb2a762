"""Uploads and results of the image worker: pure PIL, no model."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from mlx_gateway.workers.image.files import encode, fill_mask, open_upload
from mlx_gateway.workers.runtime.contract import RequestError


def file_of(picture: Image.Image, fmt: str = "PNG", **save: object) -> bytes:
    buffer = io.BytesIO()
    picture.save(buffer, format=fmt, **save)
    return buffer.getvalue()


def test_uploads_open_upright() -> None:
    wide = Image.new("RGB", (40, 20), (255, 0, 0))
    exif = Image.Exif()
    exif[0x0112] = 6  # EXIF orientation: rotate 90° clockwise to show upright
    upright = open_upload(file_of(wide, "JPEG", exif=exif), "image", 16)
    assert upright.size == (20, 40)
    assert open_upload(file_of(wide, "WEBP"), "image", 16).size == (40, 20)


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"GIF89a not really", "not a PNG, JPEG or WebP"),
        (file_of(Image.new("RGB", (8, 40))), "too small (8x40)"),
        (file_of(Image.new("RGB", (40, 40)))[:60], "cannot be decoded"),
    ],
)
def test_bad_uploads_are_400_naming_the_field(data: bytes, words: str) -> None:
    with pytest.raises(RequestError) as info:
        open_upload(data, "mask", 16)
    assert (info.value.status, info.value.param) == (400, "mask")
    assert words in info.value.message


def test_openai_mask_becomes_a_fill_mask() -> None:
    mask = Image.new("RGBA", (2, 1), (0, 0, 0, 255))
    mask.putpixel((1, 0), (0, 0, 0, 0))  # transparent: paint here
    fill = fill_mask(mask, (2, 1))
    assert fill.mode == "L" and fill.tobytes() == bytes([0, 255])
    gray = Image.new("L", (2, 1), 0)
    gray.putpixel((0, 0), 255)  # no alpha: white means paint, as mflux reads it
    assert fill_mask(gray, (2, 1)).tobytes() == bytes([255, 0])
    with pytest.raises(RequestError) as info:
        fill_mask(mask, (4, 4))
    assert info.value.param == "mask"


@pytest.mark.parametrize("fmt", ["png", "jpeg", "webp"])
def test_encode(fmt: str) -> None:
    picture = Image.new("RGB", (16, 16), (30, 60, 90))
    data = encode(picture, fmt, 80)
    decoded = Image.open(io.BytesIO(data))
    assert decoded.format == fmt.upper() and decoded.size == (16, 16)
