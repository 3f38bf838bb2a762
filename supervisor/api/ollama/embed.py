"""``POST /api/embed`` (a string or a list in ``input``; ``embeddings``: one vector
a string) and Ollama's older ``POST /api/embeddings`` (one ``prompt``; ``embedding``)."""

from __future__ import annotations

from uuid import uuid4

from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.protocol.messages import Embed
from mlx_gateway.supervisor.api.ollama.names import resolve
from mlx_gateway.supervisor.api.ollama.options import read_options
from mlx_gateway.supervisor.api.ollama.replies import Clock, ollama_errors
from mlx_gateway.supervisor.api.ollama.schemas import EmbeddingsRequest, EmbedRequest
from mlx_gateway.supervisor.engine.embeddings import embed as run_embed
from mlx_gateway.supervisor.engine.embeddings import float_rows
from mlx_gateway.supervisor.engine.keep_alive import apply_keep_alive
from mlx_gateway.supervisor.engine.kinds import EMBEDDING_KINDS, require_kind
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.http.body import read_json
from mlx_gateway.supervisor.http.disconnect import unless_disconnected
from mlx_gateway.supervisor.http.replies import JSONResponse
from mlx_gateway.supervisor.pool.model_handle import ModelHandle

MAX_INPUTS = 2048


async def _vectors(
    request: Request, handle: ModelHandle, texts: list[str], truncate: bool, dims: int | None
) -> tuple[list[list[float]], int]:
    msg = Embed(
        request_id=f"ollama-embd-{uuid4().hex}",
        texts=texts,
        dimensions=dims,
        truncate=truncate,
    )
    header, matrix, tokens = await unless_disconnected(request, run_embed(handle, msg))
    return float_rows(header, matrix), tokens


@ollama_errors
async def embed(request: Request) -> Response:
    """``POST /api/embed``."""
    clock = Clock()
    req = await read_json(request, EmbedRequest)
    texts = [req.input] if isinstance(req.input, str) else list(req.input)
    if not texts or len(texts) > MAX_INPUTS:
        raise BadRequest(
            f"'input' must hold 1 to {MAX_INPUTS} strings, not {len(texts)}.", param="input"
        )
    read_options(req.options)
    handle = resolve(request.app.state.registry, req.model)
    require_kind(handle, EMBEDDING_KINDS, "/api/embed")
    apply_keep_alive(request.app.state, handle, req.keep_alive)
    vectors, tokens = await _vectors(request, handle, texts, req.truncate, req.dimensions)
    clock.mark_accepted()
    durations = clock.durations(None)
    body = {
        "model": req.model,
        "embeddings": vectors,
        "total_duration": durations["total_duration"],
        "load_duration": durations["load_duration"],
        "prompt_eval_count": tokens,
    }
    return JSONResponse(body)


@ollama_errors
async def embeddings(request: Request) -> Response:
    """``POST /api/embeddings``."""
    req = await read_json(request, EmbeddingsRequest)
    read_options(req.options)
    handle = resolve(request.app.state.registry, req.model)
    require_kind(handle, EMBEDDING_KINDS, "/api/embeddings")
    apply_keep_alive(request.app.state, handle, req.keep_alive)
    vectors, _ = await _vectors(request, handle, [req.prompt], True, None)
    return JSONResponse({"embedding": vectors[0]})
