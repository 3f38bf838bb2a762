"""Which MCP tools a caller has, and the model a call runs on.

A tool exists for a caller only when some model in its app's scope serves it
(``generate_image`` needs an image model, ``ask`` a language or vision model …);
``list_models`` always; ``load_model`` / ``unload_model`` only where the caller may
use the admin endpoints (an ``admin`` app; a ``client`` one when no key is an
admin's, as for ``POST /v1/models/{id}/load``); a ``read-only`` app has
``list_models`` alone. A call's ``model`` may be left out where exactly one model
in scope serves the tool.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mcp_types import ContentBlock
from msgspec import Struct
from starlette.requests import Request

from mlx_gateway.supervisor.config.server import ServerConfig
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.http.caller import Caller
from mlx_gateway.supervisor.mcp_server.args import input_schema
from mlx_gateway.supervisor.pool.model_handle import ModelHandle
from mlx_gateway.supervisor.pool.registry import Registry

Run = Callable[[Request, Any, str], Awaitable[list[ContentBlock]]]
"""A tool's work: the request, its decoded arguments and the model's name (empty
for a tool without a model)."""


@dataclass(frozen=True)
class ToolDef:
    """One tool of the gateway's MCP server."""

    name: str
    description: str
    args: type[Struct]
    run: Run
    serves: Callable[[ModelHandle], bool] | None = None
    """The models it runs on (``None``: it takes no model of a kind)."""
    preferred: Callable[[ModelHandle], bool] | None = None
    """Of those, the ones a call without ``model`` picks from first (rerank: the
    rerankers before the embeddings models that rank too)."""
    admin: bool = False
    """Only for callers that may use the admin endpoints."""
    works: bool = True
    """It makes a model work (a ``read-only`` app may not call it)."""

    def models(self, handles: Sequence[ModelHandle]) -> list[ModelHandle]:
        """The handles of ``handles`` this tool runs on (all of them for a tool
        that takes no model of a kind)."""
        serves = self.serves
        return [h for h in handles if serves is None or serves(h)]


def may_manage(caller: Caller, server: ServerConfig) -> bool:
    """Whether ``caller`` may load and unload models (the admin endpoints' rule)."""
    if caller.role == "admin":
        return True
    has_admin = bool(server.admin_keys) or any(k.role == "admin" for k in server.keys)
    return caller.role == "client" and not has_admin


def offered(
    tools: Sequence[ToolDef], caller: Caller, server: ServerConfig, handles: Sequence[ModelHandle]
) -> list[ToolDef]:
    """The tools ``caller`` has, given the models in its scope (``handles``)."""
    found = []
    for tool in tools:
        if tool.admin and not may_manage(caller, server):
            continue
        if tool.works and caller.role == "read-only":
            continue
        if tool.serves is not None and not tool.models(handles):
            continue
        found.append(tool)
    return found


def schema_of(tool: ToolDef, handles: Sequence[ModelHandle]) -> dict[str, Any]:
    """The tool's ``inputSchema``, its ``model`` naming the models it runs on."""
    models = tool.models(handles)
    if tool.preferred is not None and (first := [h for h in models if tool.preferred(h)]):
        models = [*first, *(h for h in models if h not in first)]
    return input_schema(tool.args, [h.name for h in models])


def model_for(
    tool: ToolDef, name: str | None, handles: Sequence[ModelHandle], registry: Registry
) -> str:
    """The model a call of ``tool`` runs on: ``name`` (checked to serve it; a route
    is left to the tool's serve), else the only one in scope that serves it."""
    models = tool.models(handles)
    served = ", ".join(h.name for h in models) or "none"
    if name is not None:
        if registry.route(name) is not None:
            return name
        handle = registry.resolve(name)  # a 404 naming the served models
        if tool.serves is not None and not tool.serves(handle):
            raise BadRequest(
                f"The model '{handle.name}' (model_type {handle.config.model_type}) does not "
                f"serve {tool.name}; the models that do: {served}.",
                param="model",
                code="model_not_supported",
            )
        return str(handle.name)
    pool = models
    if tool.preferred is not None:
        pool = [h for h in models if tool.preferred(h)] or models
    if len(pool) == 1:
        return str(pool[0].name)
    raise BadRequest(
        f"Missing argument 'model': {len(pool)} models serve {tool.name} ({served}); name one.",
        param="model",
    )
