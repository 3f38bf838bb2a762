"""What ``GET /openapi.json`` says about the tokenizer routes."""

from __future__ import annotations

from mlx_gateway.supervisor.api.tokenize.routes import DetokenizeRequest, TokenizeRequest
from mlx_gateway.supervisor.http.openapi import JSON_OBJECT, OpenApi, Operation

OPENAPI = OpenApi(
    {
        ("POST", "/tokenize"): Operation(
            "tokenize",
            "Token ids (and pieces) of a text or a chat conversation, with the model's tokenizer.",
            request=TokenizeRequest,
            extra=JSON_OBJECT,
        ),
        ("POST", "/detokenize"): Operation(
            "detokenize",
            "The text of token ids, with the model's tokenizer.",
            request=DetokenizeRequest,
            extra=JSON_OBJECT,
        ),
    }
)
