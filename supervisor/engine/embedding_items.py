"""The text and image items of an embeddings request (``POST /v1/embeddings``'s
``input``; ``/v1/rerank``'s documents for an embeddings model).

``input`` items may be strings or parts, in any mix: ``{"type": "text", "text"}``,
``{"type": "image_url", "image_url": {"url"}}`` (or ``"image_url": "<url>"``),
the Responses API's ``{"type": "input_image", "image_url": "<url>"}`` and
``input_text``, and Jina's typeless ``{"text"}`` / ``{"image"}`` (a URL or bare
base64). A top-level ``images`` list (Cohere's) adds images after the inputs.
Each item is one input with one vector, in order.
"""

from __future__ import annotations

from typing import Any

from mlx_gateway.supervisor.engine.embedding_images import ImageInput, base64_url
from mlx_gateway.supervisor.errors import BadRequest

TEXT_TYPES = ("text", "input_text")
IMAGE_TYPES = ("image_url", "input_image")
JINA_IMAGE = "image"
"""Jina's key of a typeless image item."""
_SHAPES = (
    "give a string, {'type': 'text', 'text': …} or "
    "{'type': 'image_url', 'image_url': {'url': …}} (a data: URL or an http(s) URL)"
)


def read_items(
    value: Any, images: list[str] | None, max_inputs: int
) -> tuple[list[str], list[ImageInput]] | None:
    """The texts and the image inputs of a request with parts or ``images``;
    ``None`` for one without (strings or token ids only: read as before)."""
    items = [value] if isinstance(value, str | dict) else list(value or [])
    if not images and not any(isinstance(item, dict) for item in items):
        return None
    texts: list[str] = []
    found: list[ImageInput] = []
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if isinstance(item, dict):
            kind, content, param = part(item, where)
        elif isinstance(item, str):
            kind, content, param = "text", item, where
        else:
            raise BadRequest(
                f"{where} is token ids among image or text parts; {_SHAPES}.", param=where
            )
        if not content:
            raise BadRequest(f"{param} must not be empty.", param=param)
        if kind == "text":
            texts.append(content)
        else:
            found.append(ImageInput(i, content, param))
    for j, data in enumerate(images or []):
        where = f"images[{j}]"
        if not isinstance(data, str) or not data:
            raise BadRequest(f"{where} must be a non-empty string.", param=where)
        found.append(ImageInput(len(items) + j, base64_url(data), where))
    count = len(texts) + len(found)
    if count > max_inputs:
        raise BadRequest(
            f"The request holds {count} inputs; at most {max_inputs} are allowed.",
            param="input",
        )
    return texts, found


def part(item: dict[str, Any], where: str) -> tuple[str, str, str]:
    """One part as (``text`` or ``image``, its text or URL, its field)."""
    kind = item.get("type")
    if kind in TEXT_TYPES or (kind is None and "text" in item):
        text = item.get("text")
        if not isinstance(text, str):
            raise BadRequest(f"{where}.text must be a string.", param=f"{where}.text")
        return "text", text, f"{where}.text"
    if kind in IMAGE_TYPES or (kind is None and "image_url" in item):
        image = item.get("image_url")
        if isinstance(image, dict):
            image = image.get("url")
            where = f"{where}.image_url.url"
        else:
            where = f"{where}.image_url"
        if not isinstance(image, str):
            raise BadRequest(f"{where} must be a URL string.", param=where)
        return "image", image, where
    image = item.get(JINA_IMAGE)
    if kind is None and image is not None:
        if not isinstance(image, str):
            raise BadRequest(f"{where}.image must be a string.", param=f"{where}.image")
        return "image", base64_url(image), f"{where}.image"
    raise BadRequest(f"{where} is not an input this endpoint reads: {_SHAPES}.", param=where)
