"""What ``GET /openapi.json`` says about the rerank route."""

from __future__ import annotations

from mlx_gateway.supervisor.api.rerank.schemas import RerankRequest, RerankResponse
from mlx_gateway.supervisor.http.openapi import OpenApi, Operation

OPENAPI = OpenApi(
    {
        ("POST", "/v1/rerank"): Operation(
            "rerank",
            "Documents scored for their relevance to a query, best first "
            "(also /v2/rerank, /rerank).",
            request=RerankRequest,
            response=RerankResponse,
        ),
    }
)
