"""Model names as Ollama's clients write them: ``name:tag``.

A served name (or alias, or ``model_path``) matches with or without the default
tag ``:latest``; ``/api/tags`` lists a name without a tag as ``name:latest``, the
form Ollama's clients expect and send back.
"""

from __future__ import annotations

from typing import Any

from mlx_gateway.supervisor.errors import GatewayError, ModelNotFound
from mlx_gateway.supervisor.pool.model_handle import ModelHandle

DEFAULT_TAG = ":latest"


def listed(name: str) -> str:
    """``name`` as ``/api/tags`` lists it: with a tag (``:latest`` when it has none)."""
    tail = name.rsplit("/", 1)[-1]
    return name if ":" in tail else name + DEFAULT_TAG


def bare(name: str) -> str:
    """``name`` without the default tag."""
    return name[: -len(DEFAULT_TAG)] if name.endswith(DEFAULT_TAG) else name


def resolve(registry: Any, name: str) -> ModelHandle:
    """The model ``name`` names, with or without ``:latest``; a 404 naming the
    served models (in the listed form) otherwise."""
    if not name:
        raise GatewayError("model is required", status=400, param="model")
    for candidate in dict.fromkeys((name, bare(name))):
        try:
            handle: ModelHandle = registry.resolve(candidate)
            return handle
        except ModelNotFound:
            continue
    served = [listed(h.name) for h in registry.handles]
    raise ModelNotFound(name, served)
