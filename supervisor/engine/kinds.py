"""Which kinds of model each endpoint serves: a request for a model of another
kind is a 400 that says where that model is served, before any worker starts."""

from __future__ import annotations

from mlx_gateway.supervisor.config import MODEL_TYPES
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.pool.model_handle import ModelHandle

CHAT_KINDS = ("lm", "vlm")
COMPLETION_KINDS = ("lm", "vlm")
EMBEDDING_KINDS = ("embeddings",)

_ENDPOINTS = {
    "lm": "/v1/chat/completions or /v1/completions",
    "vlm": "/v1/chat/completions",
    "embeddings": "/v1/embeddings",
    "whisper": "/v1/audio/transcriptions or /v1/audio/translations",
    "image": "/v1/images/generations or /v1/images/edits",
}


def kind_of(handle: ModelHandle) -> str:
    """The worker kind serving ``handle``'s model (``multimodal`` → ``vlm``)."""
    model_type = handle.config.model_type
    return MODEL_TYPES.get(model_type, model_type)


def require_kind(handle: ModelHandle, kinds: tuple[str, ...], endpoint: str) -> None:
    """Raise a 400 (param ``model``) unless ``handle``'s model is one of ``kinds``."""
    kind = kind_of(handle)
    if kind in kinds:
        return
    where = _ENDPOINTS.get(kind)
    hint = f"; use {where} for it" if where else ""
    raise BadRequest(
        f"The model '{handle.name}' (model_type {handle.config.model_type}) cannot be "
        f"used with {endpoint}{hint}.",
        param="model",
        code="model_not_supported",
    )
