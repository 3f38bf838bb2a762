"""``GET /v1/models`` and ``GET /v1/models/{model_id}`` (ids may contain ``/``)."""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.supervisor.api.images.job import progress_of
from mlx_gateway.supervisor.config.image import IMAGE_KIND
from mlx_gateway.supervisor.engine.kinds import kind_of
from mlx_gateway.supervisor.http.replies import JSONResponse
from mlx_gateway.supervisor.pool.model_files import configured_context_window
from mlx_gateway.supervisor.pool.model_handle import ModelHandle

CREATED = int(time.time())
"""The ``created`` of every model: when the gateway started."""

OWNED_BY = "mlx-gateway"


def model_object(handle: ModelHandle) -> dict[str, Any]:
    """The OpenAI model object of ``handle``, plus its live status (``state``,
    ``inflight``, ...) and configuration facts (``aliases``, ``model_type``)."""
    entry: dict[str, Any] = {
        "id": handle.name,
        "object": "model",
        "created": CREATED,
        "owned_by": OWNED_BY,
    }
    for key, value in handle.status().items():
        entry.setdefault(key, value)
    entry.setdefault("aliases", list(handle.config.aliases))
    entry.setdefault("model_type", handle.config.model_type)
    window = handle.facts.context_length if handle.facts is not None else None
    if window is None:
        window = configured_context_window(handle.config)
    if window is not None:
        entry.setdefault("context_window", window)
    if kind_of(handle) == IMAGE_KIND:  # how far each image request got
        entry.setdefault("progress", progress_of(handle.name))
    return entry


def memory_summary(registry: Any) -> dict[str, int] | None:
    """The memory budget, what the resident models reserve and what is free (bytes);
    ``None`` for a registry without a placement (the API tests' in-process fake)."""
    placement = registry.placement
    return placement.summary() if placement is not None else None


async def list_models(request: Request) -> Response:
    """Every served model, in configuration order, and the memory budget."""
    registry = request.app.state.registry
    body: dict[str, Any] = {"object": "list", "data": [model_object(h) for h in registry.handles]}
    if (memory := memory_summary(registry)) is not None:
        body["memory"] = memory
    return JSONResponse(body)


async def retrieve_model(request: Request) -> Response:
    """One model by served name or alias; 404 listing the served names otherwise."""
    handle = request.app.state.registry.resolve(request.path_params["model_id"])
    return JSONResponse(model_object(handle))
