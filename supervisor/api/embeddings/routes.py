"""``POST /v1/embeddings``.

The worker answers one :class:`~mlx_gateway.protocol.messages.Embeddings` whose
frame is the whole float32 matrix (little-endian, C order), then ``Done``. For
``encoding_format: base64`` each row's bytes are base64-encoded as they came, which
is exactly what OpenAI sends; for ``float`` the rows become JSON numbers.
"""

from __future__ import annotations

import base64
from typing import Any

import anyio
import msgspec
from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.protocol.messages import Embeddings
from mlx_gateway.supervisor.api.embeddings.inputs import (
    Embedding,
    EmbeddingList,
    EmbeddingRequest,
    EmbeddingUsage,
    split_input,
)
from mlx_gateway.supervisor.http.body import read_json
from mlx_gateway.supervisor.reply.embed import EmbedAsk, embed_for, floats, split_rows

ENDPOINT = "/v1/embeddings"
INLINE_VALUES = 1 << 16
"""Replies with more numbers than this are encoded on a worker thread."""


async def create_embeddings(request: Request) -> Response:
    """Validate, then embed every input in one worker request."""
    req = await read_json(request, EmbeddingRequest)
    texts, token_ids = split_input(req.input)
    ask = EmbedAsk(
        model=req.model,
        endpoint=ENDPOINT,
        texts=texts,
        token_ids=token_ids,
        dimensions=req.dimensions,
        keep_alive=req.keep_alive,
        ttl=req.ttl,
    )
    matrix = await embed_for(request, ask)
    tokens = matrix.prompt_tokens
    usage = EmbeddingUsage(prompt_tokens=tokens, total_tokens=tokens)
    args = (matrix.header, matrix.data, req.encoding_format, matrix.model, usage)
    if matrix.header.rows * matrix.header.dims <= INLINE_VALUES:
        body = render(*args)
    else:
        # Hundreds of milliseconds for the largest float replies: not on the event loop.
        body = await anyio.to_thread.run_sync(render, *args)
    return Response(body, media_type="application/json", headers=matrix.headers())


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
