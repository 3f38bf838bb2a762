"""``POST /v1/rerank``, ``/rerank`` and ``/v2/rerank``.

The worker scores every document against the query (:class:`~...protocol.messages.Rerank`,
answered by ``Scores`` and ``Done``); the gateway sorts, cuts to ``top_n`` and
answers in the shape Jina, Cohere, llama-server and vLLM share (an embeddings
model ranks by its vectors instead, image documents too: :mod:`.late`): ``results`` of
``index``, ``relevance_score`` (highest first) and, with ``return_documents``,
``document``; ``usage`` counts the tokens the model read.
"""

from __future__ import annotations

from uuid import uuid4

from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.protocol.messages import Done, Rerank, Scores
from mlx_gateway.supervisor import recorder
from mlx_gateway.supervisor.api.rerank.late import embed_and_score
from mlx_gateway.supervisor.api.rerank.schemas import (
    BilledUnits,
    Meta_,
    RerankRequest,
    RerankResponse,
    RerankUsage,
    document_texts,
    ranked,
)
from mlx_gateway.supervisor.engine.kinds import (
    EMBEDDING_KINDS,
    RERANK_KINDS,
    kind_of,
    require_kind,
)
from mlx_gateway.supervisor.errors import BadRequest, ModelNotFound, ModelUnavailable
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.http.body import read_json
from mlx_gateway.supervisor.http.disconnect import unless_disconnected
from mlx_gateway.supervisor.http.replies import JSONResponse
from mlx_gateway.supervisor.pool.model_handle import ModelHandle
from mlx_gateway.supervisor.pool.worker_call import WorkerCall

ENDPOINT = "/v1/rerank"


async def rerank(request: Request) -> Response:
    """Validate, resolve the model, score every document in one worker request."""
    req = await read_json(request, RerankRequest)
    return JSONResponse(await ranking(request, req))


async def ranking(request: Request, req: RerankRequest) -> RerankResponse:
    """The documents of ``req`` ranked by its model (unless the client leaves first)."""
    try:
        handle = gateway_of(request).registry.resolve(req.model)
    except ModelNotFound as exc:  # a bad field of this request, as rerank APIs answer it
        raise BadRequest(exc.message, param="model", code="model_not_found") from None
    require_kind(handle, RERANK_KINDS + EMBEDDING_KINDS, ENDPOINT)
    if kind_of(handle) in EMBEDDING_KINDS:
        return await _by_embeddings(request, req)
    texts = document_texts(req)
    msg = Rerank(
        request_id=f"rerank-{uuid4().hex}",
        query=req.query,
        documents=texts,
        max_tokens_per_doc=req.max_tokens_per_doc,
        max_chunks_per_doc=req.max_chunks_per_doc or 1,
        instruction=req.instruction,
    )
    scores, tokens = await unless_disconnected(request, score(handle, msg))
    if len(scores) != len(texts):
        raise ModelUnavailable(
            f"The worker scored {len(scores)} of {len(texts)} documents.", code="bad_worker_reply"
        )
    return RerankResponse(
        id=msg.request_id,
        model=handle.name,
        results=ranked(scores, texts, req.top_n, req.return_documents),
        usage=RerankUsage(prompt_tokens=tokens, total_tokens=tokens),
        meta=Meta_(billed_units=BilledUnits(search_units=1)),
    )


async def _by_embeddings(request: Request, req: RerankRequest) -> RerankResponse:
    """An embeddings model ranks the documents by their vectors (see :mod:`.late`)."""
    scores, documents, tokens, model = await embed_and_score(request, req, ENDPOINT)
    return RerankResponse(
        id=f"rerank-{uuid4().hex}",
        model=model,
        results=ranked(scores, documents, req.top_n, req.return_documents),
        usage=RerankUsage(prompt_tokens=tokens, total_tokens=tokens),
        meta=Meta_(billed_units=BilledUnits(search_units=1)),
    )


async def score(handle: ModelHandle, msg: Rerank) -> tuple[list[float], int]:
    """The worker's scores (document order) and the tokens it read."""
    scores: list[float] | None = None
    recorder.note_handle(handle)
    async with WorkerCall(handle, msg) as call:
        async for reply in call:
            if isinstance(reply, Scores):
                scores = reply.scores
            elif isinstance(reply, Done) and scores is not None:
                recorder.note_done("stop", reply.usage.prompt_tokens, 0)
                return scores, reply.usage.prompt_tokens
    raise ModelUnavailable(
        "The worker ended the request without scores.", code="incomplete_generation"
    )
