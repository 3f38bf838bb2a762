"""What ``GET /openapi.json`` says about Ollama's native API: NDJSON streams and
``{"error": "..."}`` errors (the ``OllamaError`` component)."""

from __future__ import annotations

from typing import Any

from mlx_gateway.supervisor.api.ollama.schemas import (
    ChatRequest,
    CopyRequest,
    EmbeddingsRequest,
    EmbedRequest,
    GenerateRequest,
    ModelRequest,
)
from mlx_gateway.supervisor.http import JSON_OBJECT, OpenApi, Operation

_OK = {**JSON_OBJECT, "application/x-ndjson": {"schema": {"type": "string"}}}
"""One JSON object, or NDJSON lines (``stream``, the default)."""


def _op(
    operation_id: str,
    summary: str,
    request: type,
    extra: dict[str, Any] = JSON_OBJECT,
    statuses: tuple[int, ...] = (400, 404),
) -> Operation:
    return Operation(
        operation_id, summary, request=request, extra=extra, statuses=statuses, error="OllamaError"
    )


_SERVED = (400, 404, 429, 503)
"""The statuses of a route that runs a model."""

OPENAPI = OpenApi(
    {
        ("POST", "/api/chat"): _op(
            "ollamaChat",
            "Ollama chat: one JSON object, or NDJSON lines (stream, the default).",
            ChatRequest,
            _OK,
            _SERVED,
        ),
        ("POST", "/api/generate"): _op(
            "ollamaGenerate",
            "Ollama generate: one JSON object, or NDJSON lines (stream, the default).",
            GenerateRequest,
            _OK,
            _SERVED,
        ),
        ("POST", "/api/embed"): _op(
            "ollamaEmbed",
            "Ollama embeddings of one or more inputs.",
            EmbedRequest,
            statuses=_SERVED,
        ),
        ("POST", "/api/embeddings"): _op(
            "ollamaEmbeddings",
            "Ollama's older embedding route: one prompt.",
            EmbeddingsRequest,
            statuses=_SERVED,
        ),
        ("POST", "/api/show"): _op(
            "ollamaShow", "Ollama: a model's details, model_info and capabilities.", ModelRequest
        ),
        ("POST", "/api/pull"): _op(
            "ollamaPull",
            "Ollama pull: download a Hugging Face repo and serve it (admin).",
            ModelRequest,
            _OK,
            (400, 403, 404, 502, 503),
        ),
        ("DELETE", "/api/delete"): _op(
            "ollamaDelete",
            "Ollama delete: stop serving a pulled model, remove its files (admin).",
            ModelRequest,
        ),
        ("POST", "/api/copy"): _op(
            "ollamaCopy", "Ollama copy: another name for a model (admin).", CopyRequest
        ),
        **{
            ("GET", f"/api/{name}"): Operation(
                f"ollama{name.title()}", summary, extra=JSON_OBJECT, statuses=()
            )
            for name, summary in (
                ("tags", "Ollama: every served name and alias."),
                ("ps", "Ollama: the loaded models and when they unload."),
                ("version", "Ollama: the API version these routes follow."),
            )
        },
    },
    {
        "OllamaError": {
            "type": "object",
            "required": ["error"],
            "properties": {"error": {"type": "string"}},
        },
    },
)
