"""``POST /api/embed`` (a string or a list in ``input``, and ``images`` for an
image-embedding model; ``embeddings``: one vector an input, the images' after the
texts') and Ollama's older ``POST /api/embeddings`` (one ``prompt``; ``embedding``)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.supervisor.api.ollama.options import read_options
from mlx_gateway.supervisor.api.ollama.replies import Clock, ollama_errors
from mlx_gateway.supervisor.api.ollama.schemas import EmbeddingsRequest, EmbedRequest
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.http import JSONResponse, read_json
from mlx_gateway.supervisor.reply.embed import (
    EmbedAsk,
    ImageInput,
    base64_url,
    embed_for,
    float_rows,
    one_per_input,
)

MAX_INPUTS = 2048


@ollama_errors
async def embed(request: Request) -> Response:
    """``POST /api/embed``."""
    clock = Clock()
    req = await read_json(request, EmbedRequest)
    texts = [req.input] if isinstance(req.input, str) else list(req.input)
    count = len(texts) + len(req.images)
    if not count or count > MAX_INPUTS:
        raise BadRequest(
            f"'input' and 'images' must hold 1 to {MAX_INPUTS} inputs, not {count}.",
            param="input",
        )
    images = [
        ImageInput(len(texts) + i, base64_url(data), f"images[{i}]")
        for i, data in enumerate(req.images)
    ]
    read_options(req.options)
    ask = EmbedAsk(
        model=req.model,
        endpoint="/api/embed",
        texts=texts,
        images=images,
        dimensions=req.dimensions,
        truncate=req.truncate,
        keep_alive=req.keep_alive,
        id_prefix="ollama-embd-",
    )
    matrix = await embed_for(request, ask)
    clock.mark_accepted()
    durations = clock.durations(None)
    body = {
        "model": req.model,
        "embeddings": one_per_input(matrix.header, matrix.data),
        "total_duration": durations["total_duration"],
        "load_duration": durations["load_duration"],
        "prompt_eval_count": matrix.prompt_tokens,
    }
    return JSONResponse(body, headers=matrix.headers())


@ollama_errors
async def embeddings(request: Request) -> Response:
    """``POST /api/embeddings``."""
    req = await read_json(request, EmbeddingsRequest)
    read_options(req.options)
    ask = EmbedAsk(
        model=req.model,
        endpoint="/api/embeddings",
        texts=[req.prompt],
        truncate=True,
        keep_alive=req.keep_alive,
        id_prefix="ollama-embd-",
    )
    matrix = await embed_for(request, ask)
    body = {"embedding": float_rows(matrix.header, matrix.data)[0]}
    return JSONResponse(body, headers=matrix.headers())
