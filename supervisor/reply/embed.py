"""The one serve of the embeddings surfaces (OpenAI's ``/v1/embeddings``, Ollama's
``/api/embed`` and ``/api/embeddings``): resolve the model (a route's models in
turn), check its kind, record the request's ``keep_alive``, run one ``Embed`` on
its worker while watching the client, and hand back the matrix for the surface to
write its own way."""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import uuid4

from starlette.requests import Request

from mlx_gateway.protocol.messages import Embed, Embeddings
from mlx_gateway.supervisor.config.kinds.embeddings import EmbeddingsConfig
from mlx_gateway.supervisor.engine.embedding_images import (
    ImageInput,
    base64_url,
    check_image_inputs,
    read_image_inputs,
)
from mlx_gateway.supervisor.engine.embeddings import (
    embed,
    float_rows,
    floats,
    input_groups,
    one_per_input,
    split_rows,
    summary,
)
from mlx_gateway.supervisor.engine.keep_alive import client_lifetime
from mlx_gateway.supervisor.engine.kinds import EMBEDDING_KINDS
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.http.disconnect import unless_disconnected
from mlx_gateway.supervisor.pool.model_handle import ModelHandle
from mlx_gateway.supervisor.reply.priority import priority_of
from mlx_gateway.supervisor.reply.routed import MODEL_HEADER, candidates, first_started

__all__ = [
    "EmbedAsk",
    "ImageInput",
    "Matrix",
    "base64_url",
    "embed_for",
    "float_rows",
    "floats",
    "input_groups",
    "one_per_input",
    "split_rows",
    "summary",
]


@dataclass
class EmbedAsk:
    """What an embeddings surface asks for, before its model is known."""

    model: str
    endpoint: str
    texts: list[str] = field(default_factory=list)
    token_ids: list[list[int]] = field(default_factory=list)
    images: list[ImageInput] = field(default_factory=list)
    """Image inputs (image-embedding models), by position; the texts or token id
    lists fill the other positions in order."""
    dimensions: int | None = None
    truncate: bool | None = None
    """Cut inputs longer than the model's window (``None``: the model's ``truncate``)."""
    keep_alive: float | str | None = None
    ttl: float | None = None
    id_prefix: str = "embd-"
    service_tier: str | None = None
    """``flex``: batch work, whatever the caller's priority (:mod:`.priority`)."""


@dataclass
class Matrix:
    """The worker's answer: the header, the float32 rows as bytes, the prompt tokens,
    and the served name of the model that computed them."""

    header: Embeddings
    data: bytes
    prompt_tokens: int
    model: str

    def headers(self) -> dict[str, str]:
        """The answer's headers: the model that computed it."""
        return {MODEL_HEADER: self.model}


async def embed_for(request: Request, ask: EmbedAsk) -> Matrix:
    """Run ``ask`` on its model's worker (unless the client leaves first); a
    route's on the first of its models that starts (:mod:`.routed`)."""
    choice = candidates(
        gateway_of(request).registry, ask.model, EMBEDDING_KINDS, ask.endpoint, None
    )

    async def attempt(handle: ModelHandle, i: int) -> Matrix:
        return await _embed_on(request, handle, ask)

    _, matrix = await first_started(choice, lambda h: h.name, attempt)
    return matrix


async def _embed_on(request: Request, handle: ModelHandle, ask: EmbedAsk) -> Matrix:
    gateway = gateway_of(request)
    check_image_inputs(handle, ask.images)
    client_lifetime(gateway.config.server, handle, ask.keep_alive, ask.ttl)
    files: list[bytes] = []
    if ask.images:
        server = gateway.registry.config.server
        files = await unless_disconnected(
            request, read_image_inputs(ask.images, handle.config, server)
        )
    truncate = ask.truncate
    if truncate is None:
        config = handle.config
        truncate = config.truncate if isinstance(config, EmbeddingsConfig) else True
    msg = Embed(
        request_id=f"{ask.id_prefix}{uuid4().hex}",
        texts=ask.texts,
        token_ids=ask.token_ids,
        dimensions=ask.dimensions,
        truncate=truncate,
        images=[image.position for image in ask.images],
        priority=priority_of(request, ask.service_tier),
    )
    header, data, tokens = await unless_disconnected(request, embed(handle, msg, files))
    return Matrix(header, data, tokens, handle.name)
