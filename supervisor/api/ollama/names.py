"""Model names as Ollama's clients write them: ``name:tag``.

Which model a name means is the registry's one lookup (:mod:`...pool.names`: a
served name, alias or ``model_path``, with or without ``:latest``, in any case),
as on every other surface. What is Ollama's own here: ``/api/tags`` and
``/api/ps`` list a name without a tag as ``name:latest`` (:func:`listed`, the form
Ollama's clients expect and send back), and a 404 lists the served models in that
form.
"""

from __future__ import annotations

from typing import Any

from mlx_gateway.supervisor.errors import GatewayError, ModelNotFound
from mlx_gateway.supervisor.pool.model_handle import ModelHandle
from mlx_gateway.supervisor.pool.names import bare, listed

__all__ = ["bare", "listed", "resolve"]


def resolve(registry: Any, name: str) -> ModelHandle:
    """The model ``name`` names (the registry's lookup); a 404 naming the served
    models in the listed form otherwise."""
    if not name:
        raise GatewayError("model is required", status=400, param="model")
    try:
        handle: ModelHandle = registry.resolve(name)
    except ModelNotFound as exc:
        if exc.code != "model_not_found":
            raise  # a route's name (route_not_supported): the error says what it is
        raise ModelNotFound(name, [listed(h.name) for h in registry.visible()]) from None
    return handle
