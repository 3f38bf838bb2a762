"""``POST /v1/embeddings``.

The worker answers one :class:`~mlx_gateway.protocol.messages.Embeddings` whose
frame is the whole float32 matrix (little-endian, C order), then ``Done``. For
``encoding_format: base64`` each row's bytes are base64-encoded as they came, which
is exactly what OpenAI sends; for ``float`` the rows become JSON numbers.
"""

from __future__ import annotations

import base64
from typing import Any
from uuid import uuid4

import anyio
import msgspec
from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.protocol.messages import Embed, Embeddings
from mlx_gateway.supervisor.api.embeddings.inputs import (
    Embedding,
    EmbeddingList,
    EmbeddingRequest,
    EmbeddingUsage,
    split_input,
)
from mlx_gateway.supervisor.config.kinds import settings_as
from mlx_gateway.supervisor.config.kinds.embeddings import EmbeddingsConfig
from mlx_gateway.supervisor.engine.embeddings import embed, floats, split_rows
from mlx_gateway.supervisor.engine.keep_alive import client_lifetime
from mlx_gateway.supervisor.engine.kinds import EMBEDDING_KINDS, require_kind
from mlx_gateway.supervisor.http.body import read_json
from mlx_gateway.supervisor.http.disconnect import unless_disconnected

ENDPOINT = "/v1/embeddings"
INLINE_VALUES = 1 << 16
"""Replies with more numbers than this are encoded on a worker thread."""


async def create_embeddings(request: Request) -> Response:
    """Validate, resolve the model, embed every input in one worker request."""
    req = await read_json(request, EmbeddingRequest)
    texts, token_ids = split_input(req.input)
    handle = request.app.state.registry.resolve(req.model)
    client_lifetime(request.app.state, handle, req.keep_alive, req.ttl)
    require_kind(handle, EMBEDDING_KINDS, ENDPOINT)
    msg = Embed(
        request_id=f"embd-{uuid4().hex}",
        texts=texts,
        token_ids=token_ids,
        dimensions=req.dimensions,
        truncate=settings_as(handle.config, EmbeddingsConfig).truncate,
    )
    header, matrix, prompt_tokens = await unless_disconnected(request, embed(handle, msg))
    usage = EmbeddingUsage(prompt_tokens=prompt_tokens, total_tokens=prompt_tokens)
    args = (header, matrix, req.encoding_format, handle.name, usage)
    if header.rows * header.dims <= INLINE_VALUES:
        body = render(*args)
    else:
        # Hundreds of milliseconds for the largest float replies: not on the event loop.
        body = await anyio.to_thread.run_sync(render, *args)
    return Response(body, media_type="application/json")


def render(
    header: Embeddings, matrix: bytes, encoding_format: str, model: str, usage: EmbeddingUsage
) -> bytes:
    """The JSON body of the reply."""
    rows = split_rows(header, matrix)
    if encoding_format == "base64":
        vectors: list[Any] = [base64.b64encode(row).decode("ascii") for row in rows]
    else:
        vectors = [floats(row) for row in rows]
    data = [Embedding(index=i, embedding=v) for i, v in enumerate(vectors)]
    return msgspec.json.encode(EmbeddingList(data=data, model=model, usage=usage))
