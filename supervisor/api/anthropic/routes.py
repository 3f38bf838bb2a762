"""The Anthropic Messages API: ``POST /v1/messages`` and ``/v1/messages/count_tokens``.

With ``ANTHROPIC_BASE_URL=http://host:8000`` the official ``anthropic`` SDK (and
tools built on it) talk to the gateway's models. A request becomes one turn
(:mod:`.turns`); stop sequences are applied by the gateway itself, so the answer
can say which one matched. Errors are Anthropic-shaped:
``{"type": "error", "error": {"type", "message"}}``.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.supervisor.api.anthropic import betas
from mlx_gateway.supervisor.api.anthropic.convert import request_tools, thinking_of, to_chat
from mlx_gateway.supervisor.api.anthropic.events import MessageBuilder
from mlx_gateway.supervisor.api.anthropic.schemas import CountTokensRequest, MessagesRequest
from mlx_gateway.supervisor.engine.requests import SamplingFields
from mlx_gateway.supervisor.errors import ContextLengthExceeded, GatewayError
from mlx_gateway.supervisor.http import JSONResponse, errors_shaped_by, read_json
from mlx_gateway.supervisor.reply.serve import (
    Ask,
    ChoiceReply,
    TextModel,
    Turn,
    TurnEvent,
    count,
    serve,
)

logger = logging.getLogger(__name__)

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def error_type(status: int) -> str:
    return ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def overflow_message(exc: ContextLengthExceeded) -> str:
    """A context overflow in the Anthropic API's own words, which clients parse:
    Claude Code retries with the ``max_tokens`` that fits when it reads the first."""
    if exc.max_tokens is not None and exc.prompt_tokens <= exc.limit:
        return (
            f"input length and `max_tokens` exceed context limit: {exc.prompt_tokens} + "
            f"{exc.max_tokens} > {exc.limit}, decrease input length or `max_tokens` and "
            "try again"
        )
    return f"prompt is too long: {exc.prompt_tokens} tokens > {exc.limit} maximum"


def error_message(exc: GatewayError) -> str:
    """The message of ``exc`` for an Anthropic client (the OpenAI ``param`` goes into it)."""
    if isinstance(exc, ContextLengthExceeded):
        return overflow_message(exc)
    if exc.param and exc.param not in exc.message:
        return f"{exc.message} (param: {exc.param})"
    return exc.message


def anthropic_error(exc: GatewayError) -> JSONResponse:
    """``exc`` in Anthropic's error shape."""
    message = error_message(exc)
    body = {"type": "error", "error": {"type": error_type(exc.status), "message": message}}
    return JSONResponse(body, status_code=exc.status, headers=exc.headers)


anthropic_errors = errors_shaped_by(anthropic_error)
"""Render the :class:`GatewayError`\\ s of ``handler`` the Anthropic way."""


def check_betas(request: Request, req: MessagesRequest | CountTokensRequest) -> None:
    """Refuse what the declared betas do not allow; log what is accepted but ignored."""
    declared = betas.declared(request.headers)
    betas.check_roles(req.messages, declared)
    if logger.isEnabledFor(logging.DEBUG):
        ignored = [
            name
            for name in ("context_management", "output_config")
            if getattr(req, name) is not None
        ]
        if ignored or declared:
            logger.debug(
                "%s: ignored fields %s; betas %s",
                request.url.path,
                ", ".join(ignored) or "none",
                ", ".join(sorted(declared)) or "none",
            )


def messages_ask(req: MessagesRequest | CountTokensRequest, endpoint: str) -> Ask:
    """The turn a Messages body asks for (a token count's body: the same prompt)."""
    tools = request_tools(req.tools, req.tool_choice, req.mcp_servers)
    if isinstance(req, CountTokensRequest):
        thinking = thinking_of(req.thinking)
        fields = SamplingFields(model=req.model)
        keep_alive, ttl, adapter, stops = None, None, None, []
    else:
        thinking = thinking_of(req.thinking, req.enable_thinking, req.thinking_budget)
        fields = SamplingFields(
            model=req.model,
            max_tokens=req.max_tokens,
            temperature=req.temperature,
            top_p=req.top_p,
            top_k=req.top_k,
        )
        keep_alive, ttl, adapter = req.keep_alive, req.ttl, req.adapter
        stops = [s for s in req.stop_sequences or [] if s]
    return Ask(
        model=req.model,
        endpoint=endpoint,
        id_prefix="msg_",
        sampling=fields,
        messages=to_chat(req.system, req.messages),
        keep_alive=keep_alive,
        ttl=ttl,
        enable_thinking=thinking.enabled,
        thinking_budget=thinking.budget,
        tools=tools.spec,
        server_tools=tools.server if isinstance(req, MessagesRequest) else [],
        server_choice=tools.server_choice,
        stops=stops,
        adapter=adapter,
        call_id_prefix="toolu_",
    )


class MessageReply(ChoiceReply):
    """A turn as Anthropic's message events or one ``message`` object."""

    ping = True

    def __init__(self, stream: bool) -> None:
        self.stream = stream
        self.builder = MessageBuilder("", "", stream=stream)

    def begin(self, model: TextModel, request_id: str) -> None:
        self.builder = MessageBuilder(request_id, model.name, stream=self.stream)

    def opening(self, running: Turn) -> bytes:
        started = running.generations[0].started
        return self.builder.opening(started.prompt_tokens if started else 0)

    def on(self, event: TurnEvent) -> bytes | None:
        return self.builder.on(event)

    def body(self) -> Any:
        return self.builder.message

    def failed(self, exc: GatewayError) -> bytes:
        return self.builder.error(error_type(exc.status), error_message(exc))

    def error_body(self, exc: GatewayError) -> Any:
        return {
            "type": "error",
            "error": {"type": error_type(exc.status), "message": error_message(exc)},
        }

    def alive(self) -> bytes:
        return self.builder.keepalive()


@anthropic_errors
async def create_message(request: Request) -> Response:
    """``POST /v1/messages``: JSON or, with ``stream``, Anthropic's event stream."""
    req = await read_json(request, MessagesRequest)
    check_betas(request, req)
    ask = messages_ask(req, "/v1/messages")
    return await serve(request, ask, MessageReply(req.stream), stream=req.stream)


@anthropic_errors
async def count_tokens(request: Request) -> Response:
    """``POST /v1/messages/count_tokens``: the prompt's tokens, counted by the model's
    own tokenizer and chat template (the worker renders it as for a real turn)."""
    req = await read_json(request, CountTokensRequest)
    check_betas(request, req)
    tokens = await count(request, messages_ask(req, "/v1/messages/count_tokens"))
    return JSONResponse({"input_tokens": tokens})
