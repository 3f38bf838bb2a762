"""``POST /v1/embeddings``.

The worker answers one :class:`~mlx_gateway.protocol.messages.Embeddings` whose
frame is the whole float32 matrix (little-endian, C order), then ``Done``. For
``encoding_format: base64`` each row's bytes are base64-encoded as they came, which
is exactly what OpenAI sends; for ``float`` the rows become JSON numbers.
"""

from __future__ import annotations

import array
import base64
from typing import Any

import anyio
import msgspec
from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.protocol.messages import Embeddings
from mlx_gateway.supervisor.api.embeddings.inputs import (
    MAX_INPUTS,
    Embedding,
    EmbeddingList,
    EmbeddingRequest,
    EmbeddingUsage,
    split_input,
)
from mlx_gateway.supervisor.engine.embedding_items import read_items
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.http.body import read_json
from mlx_gateway.supervisor.reply.embed import (
    EmbedAsk,
    embed_for,
    floats,
    input_groups,
    split_rows,
    summary,
)

ENDPOINT = "/v1/embeddings"
INLINE_VALUES = 1 << 16
"""Replies with more numbers than this are encoded on a worker thread."""


async def create_embeddings(request: Request) -> Response:
    """Validate, then embed every input in one worker request."""
    req = await read_json(request, EmbeddingRequest)
    parts = read_items(req.input, req.images, MAX_INPUTS)
    token_ids: list[list[int]] = []
    if parts is not None:
        texts, images = parts
    elif req.input is None:
        raise BadRequest("'input' is required.", param="input")
    else:
        (texts, token_ids), images = split_input(req.input), []
    ask = EmbedAsk(
        model=req.model,
        endpoint=ENDPOINT,
        texts=texts,
        token_ids=token_ids,
        images=images,
        dimensions=req.dimensions,
        keep_alive=req.keep_alive,
        ttl=req.ttl,
        service_tier=req.service_tier,
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
    if header.vectors:
        return _render_multi(header, matrix, encoding_format, model, usage)
    rows = split_rows(header, matrix)
    if encoding_format == "base64":
        vectors: list[Any] = [base64.b64encode(row).decode("ascii") for row in rows]
    else:
        vectors = [floats(row) for row in rows]
    data = [Embedding(index=i, embedding=v) for i, v in enumerate(vectors)]
    return msgspec.json.encode(EmbeddingList(data=data, model=model, usage=usage))


def _render_multi(
    header: Embeddings, matrix: bytes, encoding_format: str, model: str, usage: EmbeddingUsage
) -> bytes:
    """A multi-vector model's body: ``multi_vector`` per input (floats), and its
    summary as ``embedding``."""
    data = []
    for i, group in enumerate(input_groups(header, matrix)):
        vector: list[float] | str = summary(group)
        if encoding_format == "base64":
            vector = base64.b64encode(array.array("f", vector).tobytes()).decode("ascii")
        data.append(Embedding(index=i, embedding=vector, multi_vector=group))
    return msgspec.json.encode(EmbeddingList(data=data, model=model, usage=usage))
