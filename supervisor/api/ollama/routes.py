"""The routes of Ollama's native API."""

from __future__ import annotations

from starlette.routing import Route

from mlx_gateway.supervisor.api.ollama.chat import chat, generate
from mlx_gateway.supervisor.api.ollama.embed import embed, embeddings
from mlx_gateway.supervisor.api.ollama.info import ps, show, tags, version
from mlx_gateway.supervisor.api.ollama.manage import copy, delete, pull

ollama_routes: list[Route] = [
    Route("/api/chat", chat, methods=["POST"]),
    Route("/api/generate", generate, methods=["POST"]),
    Route("/api/embed", embed, methods=["POST"]),
    Route("/api/embeddings", embeddings, methods=["POST"]),
    Route("/api/tags", tags, methods=["GET"]),
    Route("/api/show", show, methods=["POST"]),
    Route("/api/ps", ps, methods=["GET"]),
    Route("/api/version", version, methods=["GET"]),
    Route("/api/pull", pull, methods=["POST"]),
    Route("/api/delete", delete, methods=["DELETE"]),
    Route("/api/copy", copy, methods=["POST"]),
]
