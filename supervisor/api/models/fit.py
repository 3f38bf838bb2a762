"""``GET /v1/models/{model_id}/fit``: would the model fit in the memory budget now?

Answers what a load would do (see :mod:`mlx_gateway.supervisor.pool.fit`): the
model's need, the free budget, the idle models it would stop, the busy or pinned
ones that hold it back, and what ``POST …/load`` with ``force`` would do instead.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.supervisor.api.models.routes import retrieve_model
from mlx_gateway.supervisor.errors import GatewayError, ModelNotFound
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.http.replies import JSONResponse
from mlx_gateway.supervisor.pool.fit import assess


async def model_fit(request: Request) -> Response:
    registry = gateway_of(request).registry
    name = request.path_params["model_id"]
    try:
        handle = registry.resolve(name)
    except ModelNotFound:
        # A model whose own id ends in "/fit" (a repo named ".../fit") is still found.
        try:
            registry.resolve(f"{name}/fit")
        except ModelNotFound:
            raise ModelNotFound(name, registry.served_names()) from None
        request.path_params["model_id"] = f"{name}/fit"
        return await retrieve_model(request)
    if registry.placement is None:
        raise GatewayError("this gateway keeps no memory budget", status=501, code="no_budget")
    return JSONResponse(assess(registry.placement, handle).as_dict())
