"""One answered request's usage row, and the kind of request a route is."""

from __future__ import annotations

from dataclasses import dataclass

KIND_OF_ROUTE: dict[str, str] = {
    "/v1/chat/completions": "chat",
    "/chat/completions": "chat",
    "/v1/completions": "completions",
    "/v1/responses": "responses",
    "/responses": "responses",
    "/v1/messages": "anthropic",
    "/api/chat": "ollama",
    "/api/generate": "ollama",
    "/v1/realtime": "realtime",
    "/v1/embeddings": "embeddings",
    "/api/embed": "embeddings",
    "/api/embeddings": "embeddings",
    "/v1/rerank": "rerank",
    "/v2/rerank": "rerank",
    "/rerank": "rerank",
    "/v1/audio/transcriptions": "transcription",
    "/v1/audio/translations": "translation",
    "/v1/audio/speech": "speech",
    "/v1/images/generations": "images",
    "/v1/images/edits": "images",
    "wyoming transcribe": "transcription",
    "wyoming synthesize": "speech",
    "mcp generate_image": "images",
    "mcp edit_image": "images",
    "mcp transcribe": "transcription",
    "mcp speak": "speech",
    "mcp embed": "embeddings",
    "mcp rerank": "rerank",
    "mcp ask": "chat",
}
"""The kind of request each route answers (what ``group_by=kind`` groups by; the
Wyoming server's requests and the MCP server's tool calls count as HTTP ones);
any other route that used a model is named by its path."""


def kind_of_route(route: str) -> str:
    return KIND_OF_ROUTE.get(route, route)


@dataclass(frozen=True, slots=True)
class UsageRow:
    """What one answered request used."""

    at: float
    """When it ended (Unix time, seconds)."""
    key: str
    """The app's name (``server.keys``' ``name``; ``anonymous`` without keys)."""
    model: str
    """The served name that answered it."""
    kind: str
    input_tokens: int = 0
    cached_tokens: int = 0
    """Of the input tokens, read from the prompt cache."""
    output_tokens: int = 0
    audio_seconds: float = 0.0
    """Heard (transcription, translation) or spoken (speech, Realtime audio)."""
    images: int = 0
    duration: float = 0.0
    """Seconds from the request's arrival to the end of its answer."""
    status: int = 200
    """The HTTP status (a Realtime response: 200, the error's status, or 499 when
    cancelled)."""
    outcome: str | None = None
    """How the model's work ended: a finish reason, ``error`` or ``client_left``."""
