"""What ``GET /openapi.json`` says about each ``METHOD path`` (:data:`OPERATIONS`), and
the components written by hand (:data:`HAND_WRITTEN`, :data:`SSE_EVENT`); the
document is built from them and the app's routes by :mod:`.openapi`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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

HAND_WRITTEN: dict[str, dict[str, Any]] = {
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
