"""What ``GET /openapi.json`` says about Ollama's native API: NDJSON streams and
``{"error": "..."}`` errors (the ``OllamaError`` component)."""

from __future__ import annotations

from mlx_gateway.supervisor.api.ollama.schemas import (
    ChatRequest,
    CopyRequest,
    EmbeddingsRequest,
    EmbedRequest,
    GenerateRequest,
    ModelRequest,
)
from mlx_gateway.supervisor.http.openapi import JSON_OBJECT, OpenApi, Operation

_OK = {**JSON_OBJECT, "application/x-ndjson": {"schema": {"type": "string"}}}

OPENAPI = OpenApi(
    {
        ("POST", "/api/chat"): Operation(
            "ollamaChat",
            "Ollama chat: one JSON object, or NDJSON lines (stream, the default).",
            request=ChatRequest,
            extra=_OK,
            statuses=(400, 404, 429, 503),
            error="OllamaError",
        ),
        ("POST", "/api/generate"): Operation(
            "ollamaGenerate",
            "Ollama generate: one JSON object, or NDJSON lines (stream, the default).",
            request=GenerateRequest,
            extra=_OK,
            statuses=(400, 404, 429, 503),
            error="OllamaError",
        ),
        ("POST", "/api/embed"): Operation(
            "ollamaEmbed",
            "Ollama embeddings of one or more inputs.",
            request=EmbedRequest,
            extra=JSON_OBJECT,
            statuses=(400, 404, 429, 503),
            error="OllamaError",
        ),
        ("POST", "/api/embeddings"): Operation(
            "ollamaEmbeddings",
            "Ollama's older embedding route: one prompt.",
            request=EmbeddingsRequest,
            extra=JSON_OBJECT,
            statuses=(400, 404, 429, 503),
            error="OllamaError",
        ),
        ("POST", "/api/show"): Operation(
            "ollamaShow",
            "Ollama: a model's details, model_info and capabilities.",
            request=ModelRequest,
            extra=JSON_OBJECT,
            statuses=(400, 404),
            error="OllamaError",
        ),
        ("POST", "/api/pull"): Operation(
            "ollamaPull",
            "Ollama pull: download a Hugging Face repo and serve it (admin).",
            request=ModelRequest,
            extra=_OK,
            statuses=(400, 403, 404, 502, 503),
            error="OllamaError",
        ),
        ("DELETE", "/api/delete"): Operation(
            "ollamaDelete",
            "Ollama delete: stop serving a pulled model, remove its files (admin).",
            request=ModelRequest,
            extra=JSON_OBJECT,
            statuses=(400, 404),
            error="OllamaError",
        ),
        ("POST", "/api/copy"): Operation(
            "ollamaCopy",
            "Ollama copy: another name for a model (admin).",
            request=CopyRequest,
            extra=JSON_OBJECT,
            statuses=(400, 404),
            error="OllamaError",
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
