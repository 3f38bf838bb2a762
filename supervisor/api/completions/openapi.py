"""What ``GET /openapi.json`` says about the legacy completions route."""

from __future__ import annotations

from mlx_gateway.supervisor.engine.objects import Completion
from mlx_gateway.supervisor.engine.requests import CompletionRequest
from mlx_gateway.supervisor.http import OpenApi, Operation

OPENAPI = OpenApi(
    {
        ("POST", "/v1/completions"): Operation(
            "createCompletion",
            "Legacy text completion, as one JSON object or as server-sent events.",
            request=CompletionRequest,
            response=Completion,
            stream=True,
        ),
    }
)
