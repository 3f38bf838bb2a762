"""``GET /openapi.json``: an OpenAPI 3.1 description of the gateway, built by hand.

Request and response bodies are the msgspec Structs the handlers decode and
encode, turned into JSON Schema by :func:`msgspec.json.schema_components`, so the
description cannot drift from what the gateway checks. Paths come from the app's
own routes: an operation described in :data:`OPERATIONS` gets its bodies, any
other route (one added later) still appears, with its docstring as summary.

``model`` lists the served names and aliases, and the security schemes appear
when keys are set; the document is rebuilt only when those change.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from mlx_gateway.supervisor.config import ServerConfig
from mlx_gateway.supervisor.http.auth import OPEN_PATHS, is_admin
from mlx_gateway.supervisor.http.replies import JSONResponse

VERSION = "0.1.0"
REF = "#/components/schemas/{name}"


@dataclass(frozen=True)
class Operation:
    """What the description says about one ``METHOD path``."""

    operation_id: str
    summary: str
    request: str | None = None
    """``module:Struct`` of the JSON (or form) body, relative to ``mlx_gateway.supervisor``."""
    files: tuple[str, ...] = ()
    """The body is ``multipart/form-data`` with these binary parts (the first one
    required) beside the Struct's text fields."""
    response: str | None = None
    """``module:Struct`` of the 200 JSON body (alternatives separated by ``|``: the
    first whose module exists); ``None``: described in ``extra``."""
    stream: bool = False
    """The endpoint may answer ``text/event-stream`` (``"stream": true``)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """200 content types beyond (or instead of) ``response``."""
    statuses: tuple[int, ...] = (400, 404, 413, 429, 503)
    optional_body: bool = False
    error: str = "Error"
    """The component of its error bodies (``OllamaError`` on Ollama's ``/api/…``)."""


_TEXT = {"text/plain": {"schema": {"type": "string"}}}
_MODEL_LIST = {"$ref": REF.format(name="ModelList")}
_MODEL = {"$ref": REF.format(name="Model")}

OPERATIONS: dict[tuple[str, str], Operation] = {
    ("POST", "/v1/chat/completions"): Operation(
        "createChatCompletion",
        "Chat completion, as one JSON object or as server-sent events.",
        request="engine.requests:ChatCompletionRequest",
        response="api.chat.objects:ChatCompletionOut",
        stream=True,
    ),
    ("POST", "/v1/completions"): Operation(
        "createCompletion",
        "Legacy text completion, as one JSON object or as server-sent events.",
        request="engine.requests:CompletionRequest",
        response="engine.objects:Completion",
        stream=True,
    ),
    ("POST", "/v1/responses"): Operation(
        "createResponse",
        "A model response (the Responses API), as one JSON object or as server-sent events.",
        request="api.responses.schemas:ResponsesRequest",
        extra={"application/json": {"schema": {"type": "object"}}},
        stream=True,
    ),
    ("POST", "/v1/embeddings"): Operation(
        "createEmbedding",
        "Embedding vectors of one or more inputs.",
        request="api.embeddings.inputs:EmbeddingRequest",
        response="api.embeddings.inputs:EmbeddingList",
    ),
    ("POST", "/v1/chat/completions/input_tokens"): Operation(
        "countChatInputTokens",
        "The prompt tokens of a chat-completions body, counted by the model's worker.",
        request="engine.requests:ChatCompletionRequest",
        extra={"application/json": {"schema": {"type": "object"}}},
    ),
    ("POST", "/v1/responses/input_tokens"): Operation(
        "countResponseInputTokens",
        "The input tokens of a Responses body, counted by the model's worker.",
        request="api.responses.schemas:ResponsesRequest",
        extra={"application/json": {"schema": {"type": "object"}}},
    ),
    ("POST", "/tokenize"): Operation(
        "tokenize",
        "Token ids (and pieces) of a text or a chat conversation, with the model's tokenizer.",
        request="api.tokenize.routes:TokenizeRequest",
        extra={"application/json": {"schema": {"type": "object"}}},
    ),
    ("POST", "/detokenize"): Operation(
        "detokenize",
        "The text of token ids, with the model's tokenizer.",
        request="api.tokenize.routes:DetokenizeRequest",
        extra={"application/json": {"schema": {"type": "object"}}},
    ),
    ("POST", "/v1/rerank"): Operation(
        "rerank",
        "Documents scored for their relevance to a query, best first (also /v2/rerank, /rerank).",
        request="api.rerank.schemas:RerankRequest",
        response="api.rerank.schemas:RerankResponse",
    ),
    ("POST", "/v1/audio/transcriptions"): Operation(
        "createTranscription",
        "Speech to text in the language spoken.",
        request="api.audio.formats:TranscriptionForm",
        files=("file",),
        response="api.audio.formats:TranscriptionBody",
        stream=True,
        extra={"text/plain": _TEXT["text/plain"], "text/vtt": {"schema": {"type": "string"}}},
    ),
    ("POST", "/v1/audio/translations"): Operation(
        "createTranslation",
        "Speech in any language to English text.",
        request="api.audio.formats:TranslationForm",
        files=("file",),
        response="api.audio.formats:TextBody",
        extra={"text/plain": _TEXT["text/plain"], "text/vtt": {"schema": {"type": "string"}}},
    ),
    ("POST", "/v1/audio/speech"): Operation(
        "createSpeech",
        "Text to speech: the audio file, streamed as it is synthesized (or as SSE events).",
        request="api.speech.schemas:SpeechRequest",
        extra={
            media: {"schema": {"type": "string", "contentMediaType": media}}
            for media in ("audio/mpeg", "audio/ogg", "audio/aac", "audio/flac", "audio/wav")
        }
        | {"audio/pcm": {"schema": {"type": "string", "contentMediaType": "audio/pcm"}}},
        stream=True,
        statuses=(400, 404, 429, 500, 503),
    ),
    ("GET", "/v1/audio/voices"): Operation(
        "listVoices",
        "The voices of the text-to-speech models (?model= starts that model to ask it).",
        response="api.speech.schemas:VoiceList",
        statuses=(400, 404, 503),
    ),
    ("POST", "/v1/images/generations"): Operation(
        "createImage",
        "Images from a text prompt, as JSON or as server-sent events.",
        request="api.images.schemas:ImageGenerationRequest",
        response="api.images.schemas:ImagesResponse",
        stream=True,
    ),
    ("POST", "/v1/images/edits"): Operation(
        "createImageEdit",
        "An edit of one or more input images (and a mask, for inpainting models).",
        request="api.images.schemas:ImageEditForm",
        files=("image", "mask"),
        response="api.images.schemas:ImagesResponse",
        stream=True,
    ),
    ("GET", "/v1/images/files/{name}"): Operation(
        "getImageFile",
        "A generated image kept for response_format 'url' (until it expires).",
        extra={
            f"image/{ext}": {"schema": {"type": "string", "contentMediaType": f"image/{ext}"}}
            for ext in ("png", "jpeg", "webp")
        },
        statuses=(404,),
    ),
    ("POST", "/v1/models/{model_id}/load"): Operation(
        "loadModel",
        "Start the model now (an admin endpoint); clears a failure backoff. force: true "
        "starts it past a refusal of the memory budget.",
        request="api.models.admin:LoadOptions",
        optional_body=True,
        extra={"application/json": {"schema": _MODEL}},
        statuses=(400, 404, 503),
    ),
    ("GET", "/v1/models/{model_id}/fit"): Operation(
        "modelFit",
        "Would the model fit in the memory budget now: its need, the free budget, the idle "
        "models a load evicts, the busy or pinned ones that block it, what force would do.",
        extra={"application/json": {"schema": {"type": "object"}}},
        statuses=(404,),
    ),
    ("POST", "/v1/models/{model_id}/unload"): Operation(
        "unloadModel",
        "Stop the model (an admin endpoint); 409 while busy unless force is true.",
        request="api.models.admin:UnloadOptions",
        optional_body=True,
        extra={"application/json": {"schema": _MODEL}},
        statuses=(400, 404, 409),
    ),
    ("POST", "/v1/models/{model_id}/pin"): Operation(
        "pinModel",
        "Pin (never evict) or unpin the model at run time (an admin endpoint).",
        request="api.models.admin:PinOptions",
        optional_body=True,
        extra={"application/json": {"schema": _MODEL}},
        statuses=(400, 404),
    ),
    ("GET", "/v1/adapters"): Operation(
        "listAdapters",
        "The LoRA adapters of the language models (an admin endpoint); ?model= for one.",
        extra={"application/json": {"schema": {"type": "object"}}},
        statuses=(404,),
    ),
    ("POST", "/v1/adapters"): Operation(
        "mountAdapter",
        "Mount a LoRA adapter on a language model at run time (an admin endpoint).",
        request="api.models.adapters:MountRequest",
        extra={"application/json": {"schema": {"type": "object"}}},
        statuses=(400, 404, 409),
    ),
    ("DELETE", "/v1/adapters/{adapter_id}"): Operation(
        "unmountAdapter",
        "Unmount a LoRA adapter (an admin endpoint); ?model= names the model.",
        extra={"application/json": {"schema": {"type": "object"}}},
        statuses=(400, 404, 409),
    ),
    ("GET", "/v1/models"): Operation(
        "listModels",
        "Every served model with its live state.",
        extra={"application/json": {"schema": _MODEL_LIST}},
        statuses=(),
    ),
    ("GET", "/v1/models/{model_id}"): Operation(
        "retrieveModel",
        "One model by served name or alias (the id may contain '/').",
        extra={"application/json": {"schema": _MODEL}},
        statuses=(404,),
    ),
    ("GET", "/v1/requests"): Operation(
        "listRequests",
        "The requests being answered or queued now: id (X-Request-Id), model, path, "
        "client, age, phase, tokens (an admin endpoint).",
        extra={"application/json": {"schema": {"type": "object"}}},
        statuses=(),
    ),
    ("POST", "/v1/requests/{request_id}/cancel"): Operation(
        "cancelRequest",
        "End a running request as a client's disconnect would (an admin endpoint).",
        extra={"application/json": {"schema": {"type": "object"}}},
        statuses=(404,),
    ),
    ("GET", "/health"): Operation(
        "health",
        "The gateway answers; each model's state. Never needs a key.",
        extra={"application/json": {"schema": {"type": "object"}}},
        statuses=(),
    ),
    ("GET", "/metrics"): Operation(
        "metrics",
        "Prometheus text format (an admin endpoint).",
        extra={"text/plain": _TEXT["text/plain"]},
        statuses=(),
    ),
    ("GET", "/openapi.json"): Operation(
        "openapi",
        "This description.",
        extra={"application/json": {"schema": {"type": "object"}}},
        statuses=(),
    ),
}

# Ollama's native API (api/ollama): NDJSON streams, ``{"error": "..."}`` errors.
_OLLAMA_OK = {
    "application/json": {"schema": {"type": "object"}},
    "application/x-ndjson": {"schema": {"type": "string"}},
}
_OLLAMA_JSON = {"application/json": {"schema": {"type": "object"}}}
_OLLAMA = "api.ollama.schemas"
OPERATIONS.update(
    {
        ("POST", "/api/chat"): Operation(
            "ollamaChat",
            "Ollama chat: one JSON object, or NDJSON lines (stream, the default).",
            request=f"{_OLLAMA}:ChatRequest",
            extra=_OLLAMA_OK,
            statuses=(400, 404, 429, 503),
            error="OllamaError",
        ),
        ("POST", "/api/generate"): Operation(
            "ollamaGenerate",
            "Ollama generate: one JSON object, or NDJSON lines (stream, the default).",
            request=f"{_OLLAMA}:GenerateRequest",
            extra=_OLLAMA_OK,
            statuses=(400, 404, 429, 503),
            error="OllamaError",
        ),
        ("POST", "/api/embed"): Operation(
            "ollamaEmbed",
            "Ollama embeddings of one or more inputs.",
            request=f"{_OLLAMA}:EmbedRequest",
            extra=_OLLAMA_JSON,
            statuses=(400, 404, 429, 503),
            error="OllamaError",
        ),
        ("POST", "/api/embeddings"): Operation(
            "ollamaEmbeddings",
            "Ollama's older embedding route: one prompt.",
            request=f"{_OLLAMA}:EmbeddingsRequest",
            extra=_OLLAMA_JSON,
            statuses=(400, 404, 429, 503),
            error="OllamaError",
        ),
        ("POST", "/api/show"): Operation(
            "ollamaShow",
            "Ollama: a model's details, model_info and capabilities.",
            request=f"{_OLLAMA}:ModelRequest",
            extra=_OLLAMA_JSON,
            statuses=(400, 404),
            error="OllamaError",
        ),
        ("POST", "/api/pull"): Operation(
            "ollamaPull",
            "Ollama pull: download a Hugging Face repo and serve it (admin).",
            request=f"{_OLLAMA}:ModelRequest",
            extra=_OLLAMA_OK,
            statuses=(400, 403, 404, 502, 503),
            error="OllamaError",
        ),
        ("DELETE", "/api/delete"): Operation(
            "ollamaDelete",
            "Ollama delete: stop serving a pulled model, remove its files (admin).",
            request=f"{_OLLAMA}:ModelRequest",
            extra=_OLLAMA_JSON,
            statuses=(400, 404),
            error="OllamaError",
        ),
        ("POST", "/api/copy"): Operation(
            "ollamaCopy",
            "Ollama copy: another name for a model (admin).",
            request=f"{_OLLAMA}:CopyRequest",
            extra=_OLLAMA_JSON,
            statuses=(400, 404),
            error="OllamaError",
        ),
        **{
            ("GET", f"/api/{name}"): Operation(
                f"ollama{name.title()}", summary, extra=_OLLAMA_JSON, statuses=()
            )
            for name, summary in (
                ("tags", "Ollama: every served name and alias."),
                ("ps", "Ollama: the loaded models and when they unload."),
                ("version", "Ollama: the API version these routes follow."),
            )
        },
    }
)

_HAND_WRITTEN: dict[str, dict[str, Any]] = {
    "OllamaError": {
        "type": "object",
        "required": ["error"],
        "properties": {"error": {"type": "string"}},
    },
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {"error": {"$ref": REF.format(name="ErrorBody")}},
    },
    "Model": {
        "type": "object",
        "required": ["id", "object", "created", "owned_by"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "model"},
            "created": {"type": "integer"},
            "owned_by": {"type": "string"},
            "state": {"type": "string"},
            "memory_need": {"type": ["integer", "null"]},
            "memory_need_source": {
                "enum": ["measured", "configured", "estimated", "unknown"],
            },
        },
    },
    "ModelList": {
        "type": "object",
        "required": ["object", "data"],
        "properties": {
            "object": {"const": "list"},
            "data": {"type": "array", "items": _MODEL},
            "memory": {"$ref": REF.format(name="MemoryBudget")},
        },
    },
    "MemoryBudget": {
        "type": "object",
        "description": "Bytes: the memory budget, the needs of the resident models, "
        "and what is left (negative when over).",
        "required": ["budget", "reserved", "free"],
        "properties": {
            "budget": {"type": "integer"},
            "reserved": {"type": "integer"},
            "free": {"type": "integer"},
        },
    },
}

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
    components.update(_HAND_WRITTEN)
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
