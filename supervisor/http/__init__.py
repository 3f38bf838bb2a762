"""HTTP plumbing shared by every API surface: bodies, SSE, auth, limits, multipart
uploads, error replies, OpenAPI declarations, middleware.

What a surface uses of it is named here, so that a surface reads its plumbing from
one place: the body decoder, the JSON reply, the error shaping, the SSE framing,
the OpenAPI declaration types.
"""

from mlx_gateway.supervisor.http import sse
from mlx_gateway.supervisor.http.body import read_json, validation_error
from mlx_gateway.supervisor.http.error_body import anthropic_error_body, ollama_error_body
from mlx_gateway.supervisor.http.exceptions import errors_shaped_by
from mlx_gateway.supervisor.http.multipart import MIB
from mlx_gateway.supervisor.http.openapi import JSON_OBJECT, OpenApi, Operation
from mlx_gateway.supervisor.http.replies import JSONResponse, ended
from mlx_gateway.supervisor.http.ttl_store import TtlStore

__all__ = [
    "JSON_OBJECT",
    "MIB",
    "JSONResponse",
    "OpenApi",
    "Operation",
    "TtlStore",
    "anthropic_error_body",
    "ended",
    "errors_shaped_by",
    "ollama_error_body",
    "read_json",
    "sse",
    "validation_error",
]
