"""The Anthropic Messages API: ``POST /v1/messages`` and ``/v1/messages/count_tokens``.

With ``ANTHROPIC_BASE_URL=http://host:8000`` the official ``anthropic`` SDK (and
tools built on it) talk to the gateway's models. A request becomes one turn
(:mod:`.turns`); stop sequences are applied by the gateway itself, so the answer
can say which one matched. Errors are Anthropic-shaped:
``{"type": "error", "error": {"type", "message"}}``.
"""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.supervisor import recorder
from mlx_gateway.supervisor.api.anthropic import betas
from mlx_gateway.supervisor.api.anthropic.convert import thinking_of, to_chat, tool_spec
from mlx_gateway.supervisor.api.anthropic.events import MessageBuilder
from mlx_gateway.supervisor.api.anthropic.schemas import CountTokensRequest, MessagesRequest
from mlx_gateway.supervisor.engine.adapters import adapters_for
from mlx_gateway.supervisor.engine.conversation import for_template
from mlx_gateway.supervisor.engine.keep_alive import client_lifetime
from mlx_gateway.supervisor.engine.kinds import CHAT_KINDS, require_kind
from mlx_gateway.supervisor.engine.overflow import count_tokens as prompt_tokens
from mlx_gateway.supervisor.engine.requests import SamplingFields
from mlx_gateway.supervisor.engine.sampling import sampling_params
from mlx_gateway.supervisor.engine.turns import Turn, TurnRequest, check_turn, template_kwargs
from mlx_gateway.supervisor.errors import GatewayError
from mlx_gateway.supervisor.http.body import read_json
from mlx_gateway.supervisor.http.disconnect import unless_disconnected
from mlx_gateway.supervisor.http.error_body import (
    anthropic_error_body,
    anthropic_error_message,
    anthropic_error_type,
)
from mlx_gateway.supervisor.http.exceptions import errors_shaped_by
from mlx_gateway.supervisor.http.keepalive import keepalive_for
from mlx_gateway.supervisor.http.replies import JSONResponse
from mlx_gateway.supervisor.reply.inputs import prepare_images
from mlx_gateway.supervisor.reply.turn import serve_turn

logger = logging.getLogger(__name__)


def anthropic_error(exc: GatewayError) -> JSONResponse:
    """``exc`` in Anthropic's error shape."""
    return JSONResponse(anthropic_error_body(exc), status_code=exc.status, headers=exc.headers)


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


@anthropic_errors
async def create_message(request: Request) -> Response:
    """``POST /v1/messages``: JSON or, with ``stream``, Anthropic's event stream."""
    req = await read_json(request, MessagesRequest)
    check_betas(request, req)
    handle = request.app.state.registry.resolve(req.model)
    require_kind(handle, CHAT_KINDS, "/v1/messages")
    client_lifetime(request.app.state, handle, req.keep_alive, req.ttl)
    tools = tool_spec(req.tools, req.tool_choice)
    inputs = await prepare_images(request, handle, for_template(to_chat(req.system, req.messages)))
    fields = SamplingFields(
        model=req.model,
        max_tokens=req.max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k,
    )
    thinking = thinking_of(req.thinking, req.enable_thinking, req.thinking_budget)
    turn = TurnRequest(
        messages=inputs.messages,
        sampling=sampling_params(fields, handle.config),
        template_kwargs=template_kwargs(None, tools, thinking.enabled),
        thinking_budget=thinking.budget,
        adapters=adapters_for(handle, req.adapter),
        tools=tools,
        stops=[s for s in req.stop_sequences or [] if s],
        files=inputs.files,
        images=inputs.frame_indices,
        call_id_prefix="toolu_",
    )
    check_turn(handle, turn)
    message_id = recorder.name_request("msg_")
    builder = MessageBuilder(message_id, handle.name, stream=req.stream)

    def opening(running: Turn) -> bytes:
        started = running.generations[0].started
        return builder.opening(started.prompt_tokens if started else 0)

    def failed(exc: GatewayError) -> bytes:
        return builder.error(anthropic_error_type(exc.status), anthropic_error_message(exc))

    return await serve_turn(
        request,
        handle,
        lambda: Turn.start(handle, turn, message_id),
        stream=req.stream,
        keepalive=keepalive_for(request.app.state, anthropic=True),
        opening=opening,
        on=builder.on,
        broke=lambda exc: [failed(exc)],
        body=lambda: builder.message,
        failed=failed,
        error_body=anthropic_error_body,
        alive=builder.keepalive,
    )


@anthropic_errors
async def count_tokens(request: Request) -> Response:
    """``POST /v1/messages/count_tokens``: the prompt's tokens, counted by the model's
    own tokenizer and chat template (the worker renders it as for a real turn)."""
    req = await read_json(request, CountTokensRequest)
    check_betas(request, req)
    handle = request.app.state.registry.resolve(req.model)
    require_kind(handle, CHAT_KINDS, "/v1/messages/count_tokens")
    tools = tool_spec(req.tools, req.tool_choice)
    inputs = await prepare_images(request, handle, for_template(to_chat(req.system, req.messages)))
    kwargs = template_kwargs(None, tools, thinking_of(req.thinking).enabled)
    work = prompt_tokens(handle, inputs.messages, kwargs, inputs.files, inputs.frame_indices)
    tokens = await unless_disconnected(request, work)
    return JSONResponse({"input_tokens": tokens})
