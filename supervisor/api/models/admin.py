"""Admin endpoints: ``POST /v1/models/{id}/load``, ``…/unload`` and ``…/pin``, and
``POST /unload`` (every idle model).

``load`` starts the model now (through the memory budget; ``force: true`` past
its refusal) and clears a failure backoff; ``unload`` stops it, refusing (409)
while it is busy unless the query or JSON body says ``force: true`` — then its
in-flight requests fail at once.
"""

from __future__ import annotations

from typing import TypeVar

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.supervisor.api.models.routes import model_object
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.http.replies import JSONResponse


class UnloadOptions(msgspec.Struct):
    force: bool = False


class LoadOptions(msgspec.Struct):
    force: bool = False
    """Start past a refusal of the memory budget (``GET …/fit`` says what it stops)."""


class PinOptions(msgspec.Struct):
    pinned: bool = True


class UnloadAllOptions(msgspec.Struct):
    """``POST /unload`` takes no options; a body, when sent, must be a JSON object."""


async def load_model(request: Request) -> Response:
    force = request.query_params.get("force", "").lower() in ("1", "true", "yes")
    force = force or (await _options(request, LoadOptions, "force")).force
    handle = await gateway_of(request).registry.load(request.path_params["model_id"], force=force)
    return JSONResponse(model_object(handle))


T = TypeVar("T", LoadOptions, UnloadOptions, PinOptions, UnloadAllOptions)


async def _options(request: Request, type_: type[T], param: str) -> T:
    """The optional JSON body of an admin request (defaults when empty)."""
    body = await request.body()
    if not body.strip():
        return type_()
    try:
        return msgspec.json.decode(body, type=type_)
    except (
        msgspec.DecodeError,
        msgspec.ValidationError,
        UnicodeDecodeError,
        RecursionError,
    ) as exc:
        raise BadRequest(f"Invalid body: {exc}", param=param) from None


async def unload_model(request: Request) -> Response:
    force = request.query_params.get("force", "").lower() in ("1", "true", "yes")
    force = force or (await _options(request, UnloadOptions, "force")).force
    handle = await gateway_of(request).registry.unload(request.path_params["model_id"], force=force)
    return JSONResponse(model_object(handle))


async def unload_all(request: Request) -> Response:
    """``POST /unload`` (mlx-vlm's server): stop every idle ready model; busy ones
    keep running. ``{"unloaded": [names], "busy": [names]}``."""
    await _options(request, UnloadAllOptions, "body")
    registry = gateway_of(request).registry
    stopped = await registry.unload_idle()
    busy = [h.name for h in registry.handles if not h.idle]
    return JSONResponse({"status": "ok", "unloaded": [h.name for h in stopped], "busy": busy})


async def pin_model(request: Request) -> Response:
    """``{"pinned": true|false}`` (default true): a pinned model is never evicted for
    another one. Lasts until the gateway restarts or a reload replaces the entry."""
    options = await _options(request, PinOptions, "pinned")
    handle = gateway_of(request).registry.resolve(request.path_params["model_id"])
    handle.pin(options.pinned)
    return JSONResponse(model_object(handle))
