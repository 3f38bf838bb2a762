"""The OpenAPI 3.1 description of the gateway, built by hand from what each API
surface declares.

Each surface declares its own operations in ``api/<surface>/openapi.py`` (an
:class:`OpenApi`: what the description says about each of its ``METHOD path``, and
the components it writes by hand); ``api/openapi.py`` gathers them and the models
surface serves ``GET /openapi.json``. Request and response bodies are the msgspec
Structs the handlers decode and encode, named by the declarations themselves and
turned into JSON Schema by :func:`msgspec.json.schema_components`, so the
description cannot drift from what the gateway checks. Paths come from the app's own
routes: an operation declared gets its bodies, any other route (one added later)
still appears, with its docstring as summary.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
from starlette.routing import BaseRoute, Route

from mlx_gateway.supervisor.config import ServerConfig
from mlx_gateway.supervisor.http.auth import OPEN_PATHS, is_admin
from mlx_gateway.supervisor.http.error_body import ErrorBody

VERSION = "0.1.0"

REF = "#/components/schemas/{name}"

_PATH_PARAM = re.compile(r"\{([^}:]+)(?::[^}]*)?\}")


@dataclass(frozen=True)
class Operation:
    """What the description says about one ``METHOD path``."""

    operation_id: str
    summary: str
    request: type | None = None
    """The Struct of the JSON (or form) body."""
    files: tuple[str, ...] = ()
    """The body is ``multipart/form-data`` with these binary parts (the first one
    required) beside the Struct's text fields."""
    response: type | None = None
    """The Struct of the 200 JSON body; ``None``: described in ``extra``."""
    stream: bool = False
    """The endpoint may answer ``text/event-stream`` (``"stream": true``)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """200 content types beyond (or instead of) ``response``."""
    statuses: tuple[int, ...] = (400, 404, 413, 429, 503)
    optional_body: bool = False
    error: str = "Error"
    """The component of its error bodies (``OllamaError`` on Ollama's ``/api/…``)."""


@dataclass(frozen=True)
class OpenApi:
    """What one surface (or all of them, :meth:`gather`) declares: its operations by
    ``(METHOD, path)`` (the path as the description writes it, ``{model_id}``), and
    the components it writes by hand (by name)."""

    operations: dict[tuple[str, str], Operation]
    components: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def gather(cls, *parts: OpenApi) -> OpenApi:
        """The declarations of ``parts`` as one; a ``METHOD path`` or a component
        declared twice is a mistake, refused at import."""
        operations: dict[tuple[str, str], Operation] = {}
        components: dict[str, dict[str, Any]] = {}
        for part in parts:
            _refuse_twice("operation", operations, part.operations)
            _refuse_twice("component", components, part.components)
            operations.update(part.operations)
            components.update(part.components)
        return cls(operations, components)


def _refuse_twice(what: str, mine: Mapping[Any, Any], theirs: Mapping[Any, Any]) -> None:
    if twice := sorted(map(str, mine.keys() & theirs.keys())):
        raise ValueError(f"OpenAPI {what} declared twice: {', '.join(twice)}")


JSON_OBJECT = {"application/json": {"schema": {"type": "object"}}}
"""A 200 (or a body) described only as a JSON object."""

TEXT = {"text/plain": {"schema": {"type": "string"}}}

ERROR = OpenApi(
    {},
    {
        "Error": {
            "type": "object",
            "required": ["error"],
            "properties": {"error": {"$ref": REF.format(name="ErrorBody")}},
        },
    },
)
"""The error body every surface but Ollama's answers with (the ``ErrorBody`` Struct
inside ``{"error": …}``)."""

SSE_EVENT: dict[str, Any] = {
    "description": "One server-sent event: its JSON payload in `data` (or `[DONE]`), "
    "and on Responses and Anthropic Messages streams its type in `event`.",
    "type": "object",
    "properties": {
        "data": {"type": "string"},
        "event": {"type": "string"},
        "id": {"type": "string"},
        "retry": {"type": "integer"},
    },
}
"""A ``text/event-stream`` body is described event by event (as OpenAPI 3.2's
``itemSchema`` does, and as schemathesis checks each event)."""


def _routes(routes: Iterable[BaseRoute]) -> list[tuple[str, str, Route]]:
    out = []
    for route in routes:
        if isinstance(route, Route):
            path = _PATH_PARAM.sub(r"{\1}", route.path)
            for method in sorted(route.methods or ()):
                if method != "HEAD":
                    out.append((method, path, route))
    return out


def build(
    server: ServerConfig, names: list[str], routes: Iterable[BaseRoute], declared: OpenApi
) -> dict[str, Any]:
    """The OpenAPI 3.1 document of an app with ``routes`` serving models by ``names``
    (served names and aliases) with the keys of ``server``, its operations and
    hand-written components as ``declared``."""
    found = _routes(routes)
    structs: dict[type, None] = {ErrorBody: None}
    for method, path, _ in found:
        op = declared.operations.get((method, path))
        for struct in (op.request, op.response) if op else ():
            if struct is not None:
                structs[struct] = None
    schemas, components = msgspec.json.schema_components(structs, ref_template=REF)
    by_struct = dict(zip(structs, schemas, strict=True))
    components.update(declared.components)
    _restrict_model(components, names)

    keys = bool(server.api_keys or server.admin_keys or server.keys)
    closed = bool(server.api_keys or server.keys)  # every endpoint needs a key
    paths: dict[str, dict[str, Any]] = {}
    for method, path, route in found:
        op = declared.operations.get((method, path))
        operation = _operation(method, path, route, op, by_struct, components)
        if keys and path not in OPEN_PATHS and (closed or is_admin(method, path)):
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


class DocumentCache:
    """The last document built, kept with the key it was built for (the served
    names and the keys): :meth:`get` builds again only when the key changed."""

    def __init__(self) -> None:
        self._key: object = None
        self._document: dict[str, Any] | None = None

    def get(self, key: object, make: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        if self._document is None or self._key != key:
            self._key, self._document = key, make()
        return self._document


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
    by_struct: dict[type, Any],
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
    if op.request is not None:
        schema = by_struct[op.request]
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
    if op.response is not None:
        ok["application/json"] = {"schema": by_struct[op.response]}
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
