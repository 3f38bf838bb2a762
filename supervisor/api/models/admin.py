"""Admin endpoints: ``POST /v1/models/{id}/load``, ``…/unload`` and ``…/pin``.

``load`` starts the model now (through the memory budget) and clears a failure
backoff; ``unload`` stops it, refusing (409) while it is busy unless the query or
JSON body says ``force: true`` — then its in-flight requests fail at once.
"""

from __future__ import annotations

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.supervisor.api.models.routes import model_object
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.http.replies import JSONResponse


class UnloadOptions(msgspec.Struct):
    force: bool = False


class PinOptions(msgspec.Struct):
    pinned: bool = True


async def load_model(request: Request) -> Response:
    handle = await request.app.state.registry.load(request.path_params["model_id"])
    return JSONResponse(model_object(handle))


async def unload_model(request: Request) -> Response:
    force = request.query_params.get("force", "").lower() in ("1", "true", "yes")
    body = await request.body()
    if body.strip():
        try:
            force = force or msgspec.json.decode(body, type=UnloadOptions).force
        except (
            msgspec.DecodeError,
            msgspec.ValidationError,
            UnicodeDecodeError,
            RecursionError,
        ) as exc:
            raise BadRequest(f"Invalid body: {exc}", param="force") from None
    handle = await request.app.state.registry.unload(request.path_params["model_id"], force=force)
    return JSONResponse(model_object(handle))


async def pin_model(request: Request) -> Response:
    """``{"pinned": true|false}`` (default true): a pinned model is never evicted for
    another one. Lasts until the gateway restarts or a reload replaces the entry."""
    body = await request.body()
    options = PinOptions()
    if body.strip():
        try:
            options = msgspec.json.decode(body, type=PinOptions)
        except (
            msgspec.DecodeError,
            msgspec.ValidationError,
            UnicodeDecodeError,
            RecursionError,
        ) as exc:
            raise BadRequest(f"Invalid body: {exc}", param="pinned") from None
    handle = request.app.state.registry.resolve(request.path_params["model_id"])
    handle.pin(options.pinned)
    return JSONResponse(model_object(handle))
