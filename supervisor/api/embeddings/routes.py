"""``POST /v1/embeddings``.

The worker answers one :class:`~mlx_gateway.protocol.messages.Embeddings` whose
frame is the whole float32 matrix (little-endian, C order), then ``Done``. For
``encoding_format: base64`` each row's bytes are base64-encoded as they came, which
is exactly what OpenAI sends; for ``float`` the rows become JSON numbers.
"""

from __future__ import annotations

import array
import base64
import sys
from typing import Any
from uuid import uuid4

import anyio
import msgspec
from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.protocol.messages import Done, Embed, Embeddings
from mlx_gateway.supervisor import recorder
from mlx_gateway.supervisor.api.embeddings.inputs import (
    Embedding,
    EmbeddingList,
    EmbeddingRequest,
    EmbeddingUsage,
    split_input,
)
from mlx_gateway.supervisor.config.kinds import settings_as
from mlx_gateway.supervisor.config.kinds.embeddings import EmbeddingsConfig
from mlx_gateway.supervisor.engine.keep_alive import client_lifetime
from mlx_gateway.supervisor.engine.kinds import EMBEDDING_KINDS, require_kind
from mlx_gateway.supervisor.errors import GatewayError, ModelUnavailable
from mlx_gateway.supervisor.http.body import read_json
from mlx_gateway.supervisor.http.disconnect import unless_disconnected
from mlx_gateway.supervisor.pool.model_handle import ModelHandle
from mlx_gateway.supervisor.pool.worker_call import WorkerCall, unwrap

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
        vectors = [_floats(row) for row in rows]
    data = [Embedding(index=i, embedding=v) for i, v in enumerate(vectors)]
    return msgspec.json.encode(EmbeddingList(data=data, model=model, usage=usage))


async def embed(handle: ModelHandle, msg: Embed) -> tuple[Embeddings, bytes, int]:
    """Run ``msg`` on ``handle``'s worker: the header, the matrix bytes and the
    prompt tokens. Raises the worker's error as a :class:`GatewayError`; when
    cancelled (the client left) the worker is told to drop the request."""
    result: tuple[Embeddings, bytes] | None = None
    recorder.note_handle(handle)
    async with WorkerCall(handle, msg) as call:
        async for item in call:
            match unwrap(item):
                case Embeddings() as header, [matrix, *_]:
                    result = header, matrix
                case Done(usage=usage), _:
                    if result is not None:
                        recorder.note_done("stop", usage.prompt_tokens, 0)
                        return result[0], result[1], usage.prompt_tokens
    raise ModelUnavailable(
        "The worker ended the request without embeddings.", code="incomplete_generation"
    )


def split_rows(header: Embeddings, matrix: bytes) -> list[memoryview]:
    """The matrix's rows as byte views; a size that does not match is a 500."""
    width = header.dims * 4
    if len(matrix) != header.rows * width:
        raise GatewayError(
            f"The worker sent {len(matrix)} bytes for a {header.rows} by {header.dims} matrix.",
            code="bad_worker_reply",
        )
    view = memoryview(matrix)
    return [view[i * width : (i + 1) * width] for i in range(header.rows)]


def float_rows(header: Embeddings, matrix: bytes) -> list[list[float]]:
    """The matrix's rows as lists of floats."""
    return [_floats(row) for row in split_rows(header, matrix)]


def _floats(row: memoryview) -> list[float]:
    values = array.array("f")
    values.frombytes(row)
    if sys.byteorder == "big":  # the wire format is little-endian
        values.byteswap()
    return values.tolist()
