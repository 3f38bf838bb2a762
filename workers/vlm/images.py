"""The image parts of a vlm request: their files, decoded by :mod:`...common.images`."""

from __future__ import annotations

from collections.abc import Sequence

from mlx_gateway.protocol.messages import Generate
from mlx_gateway.workers.common.images import (
    DETAILS,
    FORMAT_NAMES,
    FORMATS,
    LOW_DETAIL_SIZE,
    MAX_DECODED_PIXELS,
    ImageLimits,
    decode_image,
)
from mlx_gateway.workers.runtime.contract import RequestError

__all__ = [
    "DETAILS",
    "FORMATS",
    "FORMAT_NAMES",
    "LOW_DETAIL_SIZE",
    "MAX_DECODED_PIXELS",
    "ImageLimits",
    "decode_image",
    "image_payload",
]


def image_payload(request: Generate, payloads: Sequence[bytes], index: int, where: str) -> bytes:
    """The bytes of the request's ``index``-th image part."""
    if index >= len(request.images):
        raise RequestError(f"{where}: no image payload for this part", param=where)
    frame = request.images[index]
    if not 0 <= frame < len(payloads):
        raise RequestError(
            f"{where}: image payload {frame} is missing ({len(payloads)} sent)", param=where
        )
    return payloads[frame]
