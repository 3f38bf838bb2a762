"""The OpenAI HTTP API of the gateway (language models for now).

``routes`` and ``exception_handlers`` plug into ``Starlette(...)``; handlers find
the gateway's services with ``gateway_of(request)`` (:mod:`...gateway`).
"""

from __future__ import annotations

from starlette.routing import BaseRoute, Route, WebSocketRoute

from mlx_gateway.supervisor.api.anthropic.routes import count_tokens, create_message
from mlx_gateway.supervisor.api.audio.routes import create_transcription, create_translation
from mlx_gateway.supervisor.api.chat.routes import count_input_tokens as chat_input_tokens
from mlx_gateway.supervisor.api.chat.routes import create_chat_completion
from mlx_gateway.supervisor.api.completions.routes import create_completion
from mlx_gateway.supervisor.api.embeddings.routes import create_embeddings
from mlx_gateway.supervisor.api.images.routes import create_image, create_image_edit, get_image_file
from mlx_gateway.supervisor.api.models.adapters import (
    list_adapters,
    mount_adapter,
    unmount_adapter,
)
from mlx_gateway.supervisor.api.models.admin import load_model, pin_model, unload_all, unload_model
from mlx_gateway.supervisor.api.models.document import openapi_route
from mlx_gateway.supervisor.api.models.fit import model_fit
from mlx_gateway.supervisor.api.models.health import health
from mlx_gateway.supervisor.api.models.metrics import metrics
from mlx_gateway.supervisor.api.models.routes import list_models, retrieve_model
from mlx_gateway.supervisor.api.ollama.routes import ollama_routes
from mlx_gateway.supervisor.api.openapi import DECLARED
from mlx_gateway.supervisor.api.realtime.routes import realtime
from mlx_gateway.supervisor.api.requests.routes import cancel_request, list_requests
from mlx_gateway.supervisor.api.rerank.routes import rerank
from mlx_gateway.supervisor.api.responses.routes import (
    count_input_tokens as response_input_tokens,
)
from mlx_gateway.supervisor.api.responses.routes import (
    create_response,
    delete_response,
    list_input_items,
    retrieve_response,
)
from mlx_gateway.supervisor.api.speech.routes import create_speech, list_voices
from mlx_gateway.supervisor.api.tokenize.routes import detokenize, tokenize
from mlx_gateway.supervisor.api.ui.routes import logs as ui_logs
from mlx_gateway.supervisor.api.ui.routes import page as ui_page
from mlx_gateway.supervisor.api.ui.routes import static_file as ui_static
from mlx_gateway.supervisor.api.ui.routes import stats as ui_stats
from mlx_gateway.supervisor.api.usage.routes import get_usage
from mlx_gateway.supervisor.http.exceptions import exception_handlers

routes: list[BaseRoute] = [
    Route("/v1/chat/completions", create_chat_completion, methods=["POST"]),
    Route("/v1/chat/completions/input_tokens", chat_input_tokens, methods=["POST"]),
    Route("/v1/completions", create_completion, methods=["POST"]),
    Route("/v1/responses", create_response, methods=["POST"]),
    Route("/v1/responses/input_tokens", response_input_tokens, methods=["POST"]),
    Route("/v1/messages", create_message, methods=["POST"]),
    Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
    Route("/v1/responses/{response_id}", retrieve_response, methods=["GET"]),
    Route("/v1/responses/{response_id}", delete_response, methods=["DELETE"]),
    Route("/v1/responses/{response_id}/input_items", list_input_items, methods=["GET"]),
    Route("/v1/embeddings", create_embeddings, methods=["POST"]),
    Route("/v1/requests", list_requests, methods=["GET"]),
    Route("/v1/requests/{request_id}/cancel", cancel_request, methods=["POST"]),
    Route("/v1/usage", get_usage, methods=["GET"]),
    Route("/v1/rerank", rerank, methods=["POST"]),
    # Cohere's v2 path, and the path llama-server and Jina-style clients also use
    Route("/v2/rerank", rerank, methods=["POST"]),
    Route("/rerank", rerank, methods=["POST"]),
    Route("/v1/audio/transcriptions", create_transcription, methods=["POST"]),
    Route("/v1/audio/translations", create_translation, methods=["POST"]),
    Route("/v1/audio/speech", create_speech, methods=["POST"]),
    Route("/v1/audio/voices", list_voices, methods=["GET"]),
    WebSocketRoute("/v1/realtime", realtime),
    Route("/v1/images/generations", create_image, methods=["POST"]),
    Route("/v1/images/edits", create_image_edit, methods=["POST"]),
    Route("/v1/images/files/{name}", get_image_file, methods=["GET"]),
    Route("/v1/models", list_models, methods=["GET"]),
    Route("/v1/models/{model_id:path}/load", load_model, methods=["POST"]),
    Route("/v1/models/{model_id:path}/unload", unload_model, methods=["POST"]),
    Route("/v1/models/{model_id:path}/pin", pin_model, methods=["POST"]),
    Route("/v1/models/{model_id:path}/fit", model_fit, methods=["GET"]),
    Route("/v1/models/{model_id:path}", retrieve_model, methods=["GET"]),
    Route("/v1/adapters", list_adapters, methods=["GET"]),
    Route("/v1/adapters", mount_adapter, methods=["POST"]),
    Route("/v1/adapters/{adapter_id}", unmount_adapter, methods=["DELETE"]),
    Route("/health", health, methods=["GET"]),
    # llama-server's (and vLLM's) tokenizer endpoints
    Route("/tokenize", tokenize, methods=["POST"]),
    Route("/detokenize", detokenize, methods=["POST"]),
    # mlx-vlm's server answers these without the /v1 prefix too.
    Route("/chat/completions", create_chat_completion, methods=["POST"]),
    Route("/responses", create_response, methods=["POST"]),
    Route("/models", list_models, methods=["GET"]),
    Route("/unload", unload_all, methods=["POST"]),
    Route("/metrics", metrics, methods=["GET"]),
    Route("/openapi.json", openapi_route(DECLARED), methods=["GET"]),
    Route("/ui", ui_page, methods=["GET"]),
    Route("/ui/static/{name}", ui_static, methods=["GET"]),
    Route("/ui/stats", ui_stats, methods=["GET"]),
    Route("/ui/logs", ui_logs, methods=["GET"]),
    *ollama_routes,  # Ollama's native API
]

__all__ = ["exception_handlers", "routes"]
