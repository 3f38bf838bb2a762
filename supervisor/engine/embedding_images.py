"""The image inputs of an embeddings request, read by the gateway as a vision
model's image parts are (:mod:`.image_fetch`: ``data:`` URLs, http(s) fetches with
the size, time and private-address guards), all of a request's at once.

Each file travels to the worker once, as a binary frame of the ``Embed``; the
worker decodes it once. A model whose worker said it embeds text only (its
``inputs`` fact) is refused before anything is fetched; one not loaded yet is
refused by its worker, with the same message.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from mlx_gateway.supervisor.config import ModelConfig, ServerConfig
from mlx_gateway.supervisor.config.kinds import settings_as
from mlx_gateway.supervisor.config.kinds.embeddings import EmbeddingsConfig
from mlx_gateway.supervisor.engine.image_fetch import ImagePolicy, policy_of, read_image_url
from mlx_gateway.supervisor.errors import BadRequest, GatewayError
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


def embedding_image_policy(config: ModelConfig, server: ServerConfig) -> ImagePolicy:
    """How the gateway reads the image inputs of ``config``'s embeddings model."""
    return policy_of(settings_as(config, EmbeddingsConfig), server.allow_private_image_urls)


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


async def read_image_inputs(images: list[ImageInput], policy: ImagePolicy) -> list[bytes]:
    """Every image's file, in order, read concurrently; raises the first failure
    (a 400 naming its field, or a 413)."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [
                group.create_task(read_image_url(image.url, policy, image.param))
                for image in images
            ]
    except ExceptionGroup as failed:
        first = _first_error(failed)
        if first is None:
            raise
        raise first from None
    return [task.result() for task in tasks]


def _first_error(group: BaseExceptionGroup[Any]) -> GatewayError | None:
    for exc in group.exceptions:
        if isinstance(exc, GatewayError):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            inner = _first_error(exc)
            if inner is not None:
                return inner
    return None
