"""``GET /openapi.json``: an OpenAPI 3.1 description of the gateway, built by hand.

Request and response bodies are the msgspec Structs the handlers decode and
encode, turned into JSON Schema by :func:`msgspec.json.schema_components`, so the
description cannot drift from what the gateway checks. Paths come from the app's
own routes: an operation described in :data:`.operations.OPERATIONS` gets its
bodies, any other route (one added later) still appears, with its docstring as
summary.

``model`` lists the served names and aliases, and the security schemes appear
when keys are set; the document is rebuilt only when those change.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Iterable
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from mlx_gateway.supervisor.api.models.operations import (
    HAND_WRITTEN,
    OPERATIONS,
    REF,
    SSE_EVENT,
    Operation,
)
from mlx_gateway.supervisor.config import ServerConfig
from mlx_gateway.supervisor.http.auth import OPEN_PATHS, is_admin
from mlx_gateway.supervisor.http.replies import JSONResponse

VERSION = "0.1.0"

_PATH_PARAM = re.compile(r"\{([^}:]+)(?::[^}]*)?\}")


def _struct(ref: str) -> Any | None:
    """The Struct named by ``module:Name`` (or the first of ``a:X|b:Y`` that exists),
    or ``None`` when none does."""
    for alternative in ref.split("|"):
        module_name, _, name = alternative.partition(":")
        try:
            module = importlib.import_module(f"mlx_gateway.supervisor.{module_name}")
        except ImportError:
            continue
        struct = getattr(module, name, None)
        if struct is not None:
            return struct
    return None


def _routes(routes: Iterable[BaseRoute]) -> list[tuple[str, str, Route]]:
    out = []
    for route in routes:
        if isinstance(route, Route):
            path = _PATH_PARAM.sub(r"{\1}", route.path)
            for method in sorted(route.methods or ()):
                if method != "HEAD":
                    out.append((method, path, route))
    return out


def build(server: ServerConfig, names: list[str], routes: Iterable[BaseRoute]) -> dict[str, Any]:
    """The OpenAPI 3.1 document of an app with ``routes`` serving models by ``names``
    (served names and aliases) with the keys of ``server``."""
    found = _routes(routes)
    structs: dict[str, Any] = {}
    from mlx_gateway.supervisor.http.error_body import ErrorBody

    structs["engine.objects:ErrorBody"] = ErrorBody
    for method, path, _ in found:
        op = OPERATIONS.get((method, path))
        for ref in (op.request, op.response) if op else ():
            if ref and (struct := _struct(ref)) is not None:
                structs[ref] = struct
    types = list(structs.values())
    schemas, components = msgspec.json.schema_components(types, ref_template=REF)
    by_ref = dict(zip(structs, schemas, strict=True))
    components.update(HAND_WRITTEN)
    _restrict_model(components, names)

    keys = bool(server.api_keys or server.admin_keys)
    paths: dict[str, dict[str, Any]] = {}
    for method, path, route in found:
        op = OPERATIONS.get((method, path))
        operation = _operation(method, path, route, op, by_ref, components)
        if keys and path not in OPEN_PATHS and (server.api_keys or is_admin(method, path)):
            operation["security"] = [{"bearer": []}, {"apiKey": []}]
            operation["responses"]["401"] = _error_response("Missing or incorrect API key.")
        paths.setdefault(path, {})[method.lower()] = operation

    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "mlx-gateway",
            "version": VERSION,
            "description": "Local MLX models through the OpenAI API.",
        },
        "paths": paths,
        "components": {"schemas": components},
    }
    if keys:
        document["components"]["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer"},
            "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"},
        }
    return document


def _restrict_model(components: dict[str, Any], names: list[str]) -> None:
    """``model`` in every request body: one of the served names and aliases."""
    for schema in components.values():
        props = schema.get("properties", {})
        if "model" in props and props["model"].get("type") == "string":
            props["model"] = {**props["model"], "enum": names}


def _operation(
    method: str,
    path: str,
    route: Route,
    op: Operation | None,
    by_ref: dict[str, Any],
    components: dict[str, Any],
) -> dict[str, Any]:
    params = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in _PATH_PARAM.findall(path)
    ]
    if op is None:
        doc = inspect.getdoc(route.endpoint) or route.name or path
        operation: dict[str, Any] = {
            "operationId": re.sub(r"\W+", "_", f"{method.lower()}{path}").strip("_"),
            "summary": doc.splitlines()[0],
            "responses": {"200": {"description": "OK"}, "default": {"description": "An error."}},
        }
        if params:
            operation["parameters"] = params
        if method in ("POST", "PUT", "PATCH"):
            any_json = {"application/json": {"schema": {"type": "object"}}}
            operation["requestBody"] = {"required": False, "content": any_json}
        return operation

    operation = {"operationId": op.operation_id, "summary": op.summary}
    if params:
        operation["parameters"] = params
    if op.request and op.request in by_ref:
        schema = by_ref[op.request]
        if op.files:
            name = schema["$ref"].rsplit("/", 1)[-1]
            form = {**components[name]}
            binary = {"type": "string", "contentMediaType": "application/octet-stream"}
            form["properties"] = {
                **{part: binary for part in op.files},
                **form.get("properties", {}),
            }
            form["required"] = [op.files[0], *form.get("required", [])]
            content = {"multipart/form-data": {"schema": form}}
        else:
            content = {"application/json": {"schema": schema}}
        operation["requestBody"] = {"required": not op.optional_body, "content": content}
    ok: dict[str, Any] = {}
    if op.response and op.response in by_ref:
        ok["application/json"] = {"schema": by_ref[op.response]}
    ok.update(op.extra)
    if op.stream:
        ok["text/event-stream"] = {"schema": SSE_EVENT}
    responses: dict[str, Any] = {"200": {"description": "OK", "content": ok}}
    for status in op.statuses:
        responses[str(status)] = _error_response(_STATUS_TEXT[status], op.error)
    operation["responses"] = responses
    return operation


_STATUS_TEXT = {
    400: "Invalid request (the error's param names the field).",
    403: "A gated repo (pull).",
    404: "Unknown model (the message lists the served names).",
    409: "The model is busy (unload without force).",
    413: "The request body is too large.",
    429: "Too many requests for this model (see Retry-After).",
    500: "The model failed on the request.",
    502: "The hub cannot be reached (pull).",
    503: "The model cannot serve now (failed to load, crashed, or busy past the wait).",
}


def _error_response(description: str, name: str = "Error") -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": REF.format(name=name)}}},
    }


async def openapi(request: Request) -> Response:
    """The OpenAPI 3.1 description of this gateway."""
    state = request.app.state
    server = state.config.server
    names = [name for handle in state.registry.handles for name in handle.config.names]
    key = (tuple(names), tuple(server.api_keys), tuple(server.admin_keys))
    cached = getattr(state, "openapi", None)
    if cached is None or cached[0] != key:
        cached = state.openapi = (key, build(server, names, request.app.routes))
    return JSONResponse(cached[1])
