"""What ``GET /openapi.json`` says about the chat completions routes."""

from __future__ import annotations

from mlx_gateway.supervisor.api.chat.objects import ChatCompletionOut
from mlx_gateway.supervisor.engine.requests import ChatCompletionRequest
from mlx_gateway.supervisor.http import JSON_OBJECT, OpenApi, Operation

OPENAPI = OpenApi(
    {
        ("POST", "/v1/chat/completions"): Operation(
            "createChatCompletion",
            "Chat completion, as one JSON object or as server-sent events.",
            request=ChatCompletionRequest,
            response=ChatCompletionOut,
            stream=True,
        ),
        ("POST", "/v1/chat/completions/input_tokens"): Operation(
            "countChatInputTokens",
            "The prompt tokens of a chat-completions body, counted by the model's worker.",
            request=ChatCompletionRequest,
            extra=JSON_OBJECT,
        ),
    }
)
