"""The model tools: ``list_models`` for every caller, ``load_model`` and
``unload_model`` for those that may use the admin endpoints; each answers the
models' objects as ``GET /v1/models`` writes them, as JSON text."""

from __future__ import annotations

import json
from typing import Any

from mcp_types import ContentBlock, TextContent
from starlette.requests import Request

from mlx_gateway.supervisor.api.models.routes import model_object
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.mcp_server.args import ModelArgs, NoArgs, UnloadArgs


def _text(value: Any) -> list[ContentBlock]:
    return [TextContent(text=json.dumps(value, default=str))]


async def list_models(request: Request, args: NoArgs, model: str) -> list[ContentBlock]:
    return _text([model_object(handle) for handle in gateway_of(request).registry.visible()])


async def load_model(request: Request, args: ModelArgs, model: str) -> list[ContentBlock]:
    return _text(model_object(await gateway_of(request).registry.load(model)))


async def unload_model(request: Request, args: UnloadArgs, model: str) -> list[ContentBlock]:
    handle = await gateway_of(request).registry.unload(model, force=args.force)
    return _text(model_object(handle))
