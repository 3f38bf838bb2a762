"""The image inputs of an ``Embed``: checked, decoded once and processed when the
request arrives, so a batch only stacks their pixel arrays.

``Embed.images[k]`` is the input position of the ``k``-th image and payload frame
``k`` its file; the texts fill the other positions in order. A model without a
vision tower refuses images with a 400 that names it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mlx_gateway.protocol.messages import Embed
from mlx_gateway.workers.common.images import decode_image
from mlx_gateway.workers.embeddings.multivector import MultiVector
from mlx_gateway.workers.embeddings.vision import DualEncoder
from mlx_gateway.workers.runtime.contract import RequestError


@dataclass
class ImageInputs:
    """A request's images as pixel arrays, by input position."""

    pixels: dict[int, Any] = field(default_factory=dict)
    """What the model's processor made of each image."""
    widths: dict[int, int] = field(default_factory=dict)
    """Each image's tokens: its width in a batch."""
    tokens: int = 0
    """The prompt tokens they count for (the patches the vision tower reads, or a
    multi-vector model's document prompt)."""

    def merge(self, texts: list[list[int]]) -> list[list[int]]:
        """Every input's token ids in input order: the texts' around the images'
        positions (an image has none)."""
        count = len(texts) + len(self.pixels)
        rest = iter(texts)
        return [[] if i in self.pixels else next(rest) for i in range(count)]


def read_images(
    request: Embed,
    payloads: Sequence[bytes],
    encoder: DualEncoder | MultiVector | None,
    model: str,
) -> ImageInputs:
    """The request's images decoded and processed for ``encoder``; a 400 naming the
    input for a text-only model, a bad position, a missing frame or a file that is
    no image."""
    positions = request.images
    if not positions:
        return ImageInputs()
    first = f"input[{positions[0]}]"
    if encoder is None:
        raise RequestError(
            f"The model '{model}' embeds text only: it cannot embed the image in {first}. "
            "Send images to an image-embedding model (a SigLIP-style dual encoder).",
            param=first,
            code="images_not_supported",
        )
    count = len(request.texts or request.token_ids) + len(positions)
    if len(set(positions)) != len(positions) or not all(0 <= p < count for p in positions):
        raise RequestError(f"image positions {positions} do not fit {count} inputs", param="input")
    if len(payloads) < len(positions):
        raise RequestError(
            f"{len(positions)} images but {len(payloads)} files were sent", param="input"
        )
    inputs = ImageInputs()
    for frame, position in enumerate(positions):
        where = f"input[{position}]"
        image = decode_image(bytes(payloads[frame]), where=where)
        if isinstance(encoder, MultiVector):
            prepared = encoder.prepare(image)
            inputs.pixels[position], width = prepared, prepared.tokens
        else:
            inputs.pixels[position], width = encoder.pixels(image), encoder.image_tokens
        inputs.widths[position] = width
        inputs.tokens += width
    return inputs
