"""``POST /v1/rerank``: the request and response in the shape Jina, Cohere,
llama-server and vLLM share, and the checks on it that its types cannot express."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from mlx_gateway.supervisor.errors import BadRequest

MAX_DOCUMENTS = 10_000
"""Most documents in one request."""

_Count = Annotated[int, Meta(ge=1, le=2**31 - 1)]


class Document(Struct, kw_only=True):
    """A document given as an object (Jina, Cohere v1): ``text``; for an embeddings
    model also an image, as an embeddings input item (``{"type": "image_url",
    "image_url": {"url"}}``, Jina's ``{"image"}``)."""

    text: str | None = None
    type: str | None = None
    image_url: dict[str, Any] | str | None = None
    image: str | None = None

    def item(self) -> dict[str, Any]:
        """The document as an embeddings input item."""
        return {k: v for k, v in msgspec.structs.asdict(self).items() if v is not None}


class RerankRequest(Struct, kw_only=True):
    """The request body. Unknown fields are accepted and ignored."""

    model: str
    query: str
    documents: list[str | Document]
    top_n: _Count | None = None
    return_documents: bool = False
    max_tokens_per_doc: _Count | None = None
    """Cohere v2: each document is cut to this many tokens."""
    max_chunks_per_doc: Annotated[int, Meta(ge=1, le=64)] | None = None
    """Cohere v1: a long document is read in up to this many windows and scores by its
    best one (default 1: it is cut to the window)."""
    instruction: str | None = None
    """LM rerankers: the task they are told (default: web search passages)."""


class ResultDocument(Struct, omit_defaults=True):
    text: str | UnsetType = UNSET
    image_url: str | UnsetType = UNSET
    """An image document's URL (embeddings models)."""


class RerankResult(Struct, kw_only=True, omit_defaults=True):
    index: int
    relevance_score: float
    document: ResultDocument | UnsetType = UNSET


class RerankUsage(Struct):
    prompt_tokens: int
    total_tokens: int


class BilledUnits(Struct):
    search_units: int


class Meta_(Struct):
    billed_units: BilledUnits


class RerankResponse(Struct, kw_only=True):
    id: str
    object: str = "rerank"
    model: str
    results: list[RerankResult]
    usage: RerankUsage
    meta: Meta_


def document_texts(req: RerankRequest) -> list[str]:
    """The documents' texts; a 400 naming the field for an empty query, no
    documents, an empty document, or too many."""
    check_documents(req)
    texts = [d if isinstance(d, str) else d.text for d in req.documents]
    for i, text in enumerate(texts):
        if text is None:
            raise BadRequest(
                f"documents[{i}] has no text: this model scores text. Rank images with an "
                "image-embedding or multi-vector model (model_type embeddings).",
                param=f"documents[{i}]",
            )
        if not text:
            raise BadRequest(f"documents[{i}] must not be empty.", param=f"documents[{i}]")
    return [t or "" for t in texts]


def check_documents(req: RerankRequest) -> None:
    """A 400 for an empty query, no documents or too many."""
    if not req.query.strip():
        raise BadRequest("'query' must not be empty.", param="query")
    if not req.documents:
        raise BadRequest("'documents' must hold at least one document.", param="documents")
    if len(req.documents) > MAX_DOCUMENTS:
        raise BadRequest(
            f"'documents' holds {len(req.documents)} documents; at most {MAX_DOCUMENTS} "
            "are allowed per request.",
            param="documents",
        )


def ranked(
    scores: list[float],
    texts: Sequence[str | ResultDocument],
    top_n: int | None,
    with_documents: bool,
) -> list[RerankResult]:
    """Results by falling score (ties in document order), the first ``top_n``."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    if top_n is not None:
        order = order[:top_n]
    return [
        RerankResult(
            index=i,
            relevance_score=scores[i],
            document=_document(texts[i]) if with_documents else UNSET,
        )
        for i in order
    ]


def _document(document: str | ResultDocument) -> ResultDocument:
    return ResultDocument(text=document) if isinstance(document, str) else document
