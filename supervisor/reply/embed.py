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
from mlx_gateway.supervisor.engine.embeddings import embed, float_rows, floats, split_rows
from mlx_gateway.supervisor.engine.keep_alive import client_lifetime
from mlx_gateway.supervisor.engine.kinds import EMBEDDING_KINDS
from mlx_gateway.supervisor.http.disconnect import unless_disconnected
from mlx_gateway.supervisor.pool.model_handle import ModelHandle
from mlx_gateway.supervisor.reply.routed import MODEL_HEADER, candidates, first_started

__all__ = ["EmbedAsk", "Matrix", "embed_for", "float_rows", "floats", "split_rows"]


@dataclass
class EmbedAsk:
    """What an embeddings surface asks for, before its model is known."""

    model: str
    endpoint: str
    texts: list[str] = field(default_factory=list)
    token_ids: list[list[int]] = field(default_factory=list)
    dimensions: int | None = None
    truncate: bool | None = None
    """Cut inputs longer than the model's window (``None``: the model's ``truncate``)."""
    keep_alive: float | str | None = None
    ttl: float | None = None
    id_prefix: str = "embd-"


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
    state = request.app.state
    choice = candidates(state, ask.model, EMBEDDING_KINDS, ask.endpoint, None)

    async def attempt(handle: ModelHandle, i: int) -> Matrix:
        return await _embed_on(request, handle, ask)

    _, matrix = await first_started(choice, lambda h: h.name, attempt)
    return matrix


async def _embed_on(request: Request, handle: ModelHandle, ask: EmbedAsk) -> Matrix:
    client_lifetime(request.app.state, handle, ask.keep_alive, ask.ttl)
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
    )
    header, data, tokens = await unless_disconnected(request, embed(handle, msg))
    return Matrix(header, data, tokens, handle.name)
