"""``GET /openapi.json``: the OpenAPI 3.1 description of the gateway
(:func:`...http.openapi.build`) of what the surfaces declare, gathered by
``api/openapi.py`` and handed to :func:`openapi_route`.

``model`` lists the served names and aliases, and the security schemes appear
when keys are set; the document is rebuilt only when those change.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.http.openapi import OpenApi, build
from mlx_gateway.supervisor.http.replies import JSONResponse


def openapi_route(declared: OpenApi) -> Callable[[Request], Awaitable[Response]]:
    """The endpoint that describes the app it serves, with the operations and
    components of ``declared``."""

    async def openapi(request: Request) -> Response:
        """The OpenAPI 3.1 description of this gateway."""
        gateway = gateway_of(request)
        server = gateway.config.server
        # the models this key may see (a scoped key's document names only its own)
        names = [name for handle in gateway.registry.visible() for name in handle.config.names]
        keys = (*server.api_keys, *server.admin_keys, *(app.key for app in server.keys))
        key = (tuple(names), keys)
        routes = request.app.routes
        return JSONResponse(
            gateway.openapi.get(key, lambda: build(server, names, routes, declared))
        )

    return openapi
