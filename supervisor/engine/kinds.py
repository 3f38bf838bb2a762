"""Which kinds of model each endpoint serves: a request for a model of another
kind is a 400 that says where that model is served, before any worker starts."""

from __future__ import annotations

from mlx_gateway.protocol import kinds
from mlx_gateway.protocol.kinds import KINDS, MODEL_TYPES, kind_serves, kinds_serving
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.pool.model_handle import ModelHandle

CHAT_KINDS = kinds_serving(kinds.CHAT)
COMPLETION_KINDS = kinds_serving(kinds.COMPLETIONS)
EMBEDDING_KINDS = kinds_serving(kinds.EMBEDDINGS)
TRANSCRIPTION_KINDS = kinds_serving(kinds.TRANSCRIPTION)
IMAGE_KINDS = kinds_serving(kinds.IMAGES)
RERANK_KINDS = kinds_serving(kinds.RERANK)
TOKENIZE_KINDS = kinds_serving(kinds.TOKENIZE)
SPEECH_KINDS = kinds_serving(kinds.SPEECH)


def kind_of(handle: ModelHandle) -> str:
    """The worker kind serving ``handle``'s model (``multimodal`` → ``vlm``)."""
    model_type = handle.config.model_type
    return MODEL_TYPES.get(model_type, model_type)


def serves(handle: ModelHandle, surface: str) -> bool:
    """Whether ``handle``'s model serves ``surface`` (a :mod:`~mlx_gateway.protocol.kinds`
    surface: ``chat``, ``adapters``, ``image_input`` …)."""
    return kind_serves(kind_of(handle), surface)


OLLAMA_ROUTES = {kinds.CHAT: "/api/chat or /api/generate", kinds.EMBEDDINGS: "/api/embed"}
"""Where Ollama's API serves a surface, named to a client of an ``/api/`` route."""


def require_kind(handle: ModelHandle, kinds: tuple[str, ...], endpoint: str) -> None:
    """Raise a 400 (param ``model``) unless ``handle``'s model is one of ``kinds``;
    it names the routes that serve the model (Ollama's to an Ollama client)."""
    kind = kind_of(handle)
    if kind in kinds:
        return
    where = KINDS[kind].endpoints if kind in KINDS else None
    if endpoint.startswith("/api/"):
        ollama = (route for surface, route in OLLAMA_ROUTES.items() if serves(handle, surface))
        where = next(ollama, where)
    hint = f"; use {where} for it" if where else ""
    raise BadRequest(
        f"The model '{handle.name}' (model_type {handle.config.model_type}) cannot be "
        f"used with {endpoint}{hint}.",
        param="model",
        code="model_not_supported",
    )
