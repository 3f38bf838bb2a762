"""``POST /v1/chat/completions`` and its token count: decode, then the one serve."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.supervisor.api.chat.dialect import ChatReply, chat_ask
from mlx_gateway.supervisor.engine.requests import ChatCompletionRequest, check_common
from mlx_gateway.supervisor.http import JSONResponse, read_json
from mlx_gateway.supervisor.reply.serve import count, serve


async def count_input_tokens(request: Request) -> Response:
    """``POST /v1/chat/completions/input_tokens``: the prompt tokens of a chat body
    (tools and images included), counted by the worker as the completion would be."""
    req = await read_json(request, ChatCompletionRequest)
    tokens = await count(request, chat_ask(req, "/v1/chat/completions/input_tokens"))
    return JSONResponse({"object": "chat.completion.input_tokens", "input_tokens": tokens})


async def create_chat_completion(request: Request) -> Response:
    """Validate, then answer as JSON or as an SSE stream."""
    req = await read_json(request, ChatCompletionRequest)
    check_common(req)
    return await serve(request, chat_ask(req), ChatReply(req), stream=req.stream)
