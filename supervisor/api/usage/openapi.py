"""What ``GET /openapi.json`` says about ``GET /v1/usage``."""

from __future__ import annotations

from mlx_gateway.supervisor.http.openapi import JSON_OBJECT, OpenApi, Operation

OPENAPI = OpenApi(
    {
        ("GET", "/v1/usage"): Operation(
            "getUsage",
            "What the answered requests used (requests, input, cached and output tokens, "
            "audio seconds, images, seconds, errors), summed per group_by (key, model, kind, "
            "day; comma-separated) from start to end (Unix seconds or ISO dates), filtered "
            "by key, model, kind. An admin key reads every app's rows, a client key its own.",
            extra=JSON_OBJECT,
            statuses=(400, 404),
        ),
    }
)
