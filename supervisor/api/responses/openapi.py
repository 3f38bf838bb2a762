"""What ``GET /openapi.json`` says about the Responses API's routes."""

from __future__ import annotations

from mlx_gateway.supervisor.api.responses.schemas import ResponsesRequest
from mlx_gateway.supervisor.http import JSON_OBJECT, OpenApi, Operation

OPENAPI = OpenApi(
    {
        ("POST", "/v1/responses"): Operation(
            "createResponse",
            "A model response (the Responses API), as one JSON object or as server-sent events.",
            request=ResponsesRequest,
            extra=JSON_OBJECT,
            stream=True,
        ),
        ("POST", "/v1/responses/input_tokens"): Operation(
            "countResponseInputTokens",
            "The input tokens of a Responses body, counted by the model's worker.",
            request=ResponsesRequest,
            extra=JSON_OBJECT,
        ),
    }
)
