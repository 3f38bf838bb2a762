"""The image inputs of an embeddings request, read by the gateway as a vision
model's image parts are (:mod:`.url_reader`: ``data:`` URLs, http(s) fetches with
the size, time and private-address guards; the entry's rules from
:mod:`.media_policy`), all of a request's at once.

Each file travels to the worker once, as a binary frame of the ``Embed``; the
worker decodes it once. A model whose worker said it embeds text only (its
``inputs`` fact) is refused before anything is fetched; one not loaded yet is
refused by its worker, with the same message.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlx_gateway.supervisor.config import ModelConfig, ServerConfig
from mlx_gateway.supervisor.engine.media_policy import media_policy
from mlx_gateway.supervisor.engine.media_table import IMAGE
from mlx_gateway.supervisor.engine.url_reader import read_all, read_url
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.pool.model_handle import ModelHandle

IMAGE_INPUTS = "image"
"""In an embeddings worker's ``inputs`` fact (``text`` or ``text,image``)."""


@dataclass(frozen=True)
class ImageInput:
    """One image among an embeddings request's inputs."""

    position: int
    """Its place among the inputs (its vector's index in the answer)."""
    url: str
    """A ``data:`` URL or an http(s) URL."""
    param: str
    """The request field it came from, for errors."""


def base64_url(data: str) -> str:
    """An image given as bare base64 (Ollama's ``images``, Jina's ``image``) as a
    ``data:`` URL; a URL stays as it is."""
    head = data[:8].lower()
    if head.startswith(("data:", "http://", "https://")):
        return data
    return "data:;base64," + data


def check_image_inputs(handle: ModelHandle, images: list[ImageInput]) -> None:
    """A 400 naming the model when its worker said it embeds text only."""
    if not images or handle.facts is None:
        return
    inputs = handle.facts.extra.get("inputs")
    if inputs is None or IMAGE_INPUTS in inputs.split(","):
        return
    raise BadRequest(
        f"The model '{handle.name}' embeds text only: it cannot embed the image in "
        f"{images[0].param}. Send images to an image-embedding model (a SigLIP-style "
        "dual encoder).",
        param=images[0].param,
        code="images_not_supported",
    )


async def read_image_inputs(
    images: list[ImageInput], config: ModelConfig, server: ServerConfig
) -> list[bytes]:
    """Every image's file, in order, read concurrently under ``config``'s image rules;
    raises the first failure (a 400 naming its field, or a 413)."""
    rules = media_policy(config, server).of(IMAGE)
    return await read_all(read_url(image.url, rules, image.param) for image in images)
