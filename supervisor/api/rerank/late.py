"""``/v1/rerank`` with an embeddings model: the query and the documents (texts or
images) are embedded in one request and each document scores against the query by
late interaction (MaxSim: for each query vector its best dot product with a
document vector, summed) for a multi-vector model, or by the cosine of the two
vectors for one with a vector per input (a SigLIP ranks images for a text query)."""

from __future__ import annotations

from starlette.requests import Request

from mlx_gateway.protocol.messages import Embeddings
from mlx_gateway.supervisor.api.rerank.schemas import RerankRequest, ResultDocument, check_documents
from mlx_gateway.supervisor.engine.embedding_items import part
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.reply.embed import (
    EmbedAsk,
    ImageInput,
    embed_for,
    float_rows,
    input_groups,
)


async def embed_and_score(
    request: Request, req: RerankRequest, endpoint: str
) -> tuple[list[float], list[ResultDocument], int, str]:
    """Each document's score (document order), the documents as the answer shows
    them, the tokens read and the model's served name."""
    check_documents(req)
    texts = [req.query]
    images: list[ImageInput] = []
    shown: list[ResultDocument] = []
    for i, document in enumerate(req.documents):
        where = f"documents[{i}]"
        if isinstance(document, str):
            kind, content, param = "text", document, where
        else:
            kind, content, param = part(document.item(), where)
        if not content:
            raise BadRequest(f"{param} must not be empty.", param=param)
        if kind == "text":
            texts.append(content)
            shown.append(ResultDocument(text=content))
        else:
            images.append(ImageInput(i + 1, content, param))
            shown.append(ResultDocument(image_url=content))
    ask = EmbedAsk(model=req.model, endpoint=endpoint, texts=texts, images=images, truncate=True)
    matrix = await embed_for(request, ask)
    scores = scores_of(matrix.header, matrix.data)
    return scores, shown, matrix.prompt_tokens, matrix.model


def scores_of(header: Embeddings, matrix: bytes) -> list[float]:
    """Every document's score against the query (input 0)."""
    if header.vectors:
        query, *documents = input_groups(header, matrix)
        return [max_sim(query, document) for document in documents]
    query_vector, *vectors = float_rows(header, matrix)
    return [_dot(query_vector, v) / (_norm(query_vector) * _norm(v)) for v in vectors]


def max_sim(query: list[list[float]], document: list[list[float]]) -> float:
    """ColBERT's late interaction: Σ over query vectors of the best dot product."""
    return sum(max(_dot(q, d) for d in document) for q in query)


def _dot(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def _norm(a: list[float]) -> float:
    return max(_dot(a, a) ** 0.5, 1e-12)
