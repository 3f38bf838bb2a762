"""``GET /health``: the gateway answers, and how each model is doing."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from .responses import JSONResponse


async def health(request: Request) -> Response:
    """``{"status": "ok", "models": {name: status}}``; 200 while the gateway runs,
    whatever the models' states (a failed model shows ``"state": "failed"``)."""
    handles = request.app.state.registry.handles
    return JSONResponse({"status": "ok", "models": {h.name: h.status() for h in handles}})
