"""What ``GET /openapi.json`` says about the requests in flight."""

from __future__ import annotations

from mlx_gateway.supervisor.http.openapi import JSON_OBJECT, OpenApi, Operation

OPENAPI = OpenApi(
    {
        ("GET", "/v1/requests"): Operation(
            "listRequests",
            "The requests being answered or queued now: id (X-Request-Id), model, path, "
            "client, age, phase, tokens (an admin endpoint).",
            extra=JSON_OBJECT,
            statuses=(),
        ),
        ("POST", "/v1/requests/{request_id}/cancel"): Operation(
            "cancelRequest",
            "End a running request as a client's disconnect would (an admin endpoint).",
            extra=JSON_OBJECT,
            statuses=(404,),
        ),
    }
)
