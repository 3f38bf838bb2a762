"""What ``GET /openapi.json`` says about the embeddings route."""

from __future__ import annotations

from mlx_gateway.supervisor.api.embeddings.inputs import EmbeddingList, EmbeddingRequest
from mlx_gateway.supervisor.http.openapi import OpenApi, Operation

OPENAPI = OpenApi(
    {
        ("POST", "/v1/embeddings"): Operation(
            "createEmbedding",
            "Embedding vectors of one or more inputs.",
            request=EmbeddingRequest,
            response=EmbeddingList,
        ),
    }
)
