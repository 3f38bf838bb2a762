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
from mlx_gateway.supervisor.api.anthropic.convert import (
    referenced,
    request_tools,
    searched,
    thinking_of,
    to_chat,
)
from mlx_gateway.supervisor.api.anthropic.diagnostics import Diagnosis, request_digest
from mlx_gateway.supervisor.api.anthropic.events import MessageBuilder
from mlx_gateway.supervisor.api.anthropic.schemas import CountTokensRequest, MessagesRequest
from mlx_gateway.supervisor.engine.requests import SamplingFields
from mlx_gateway.supervisor.errors import GatewayError
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.http import (
    JSONResponse,
    anthropic_error_body,
    errors_shaped_by,
    read_json,
)
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


def anthropic_error(exc: GatewayError) -> JSONResponse:
    """``exc`` in Anthropic's error shape."""
    return JSONResponse(anthropic_error_body(exc), status_code=exc.status, headers=exc.headers)


anthropic_errors = errors_shaped_by(anthropic_error)
"""Render the :class:`GatewayError`\\ s of ``handler`` the Anthropic way."""


def log_betas(request: Request, req: MessagesRequest | CountTokensRequest) -> None:
    """Log the declared betas and the fields accepted but ignored (no beta changes
    what a valid request is: see :mod:`.betas`)."""
    declared = betas.declared(request.headers)
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


def _user_id(metadata: dict[str, Any] | None) -> str | None:
    """``metadata.user_id``: the session a route keeps on one model."""
    user = (metadata or {}).get("user_id")
    return user if isinstance(user, str) else None


def messages_ask(req: MessagesRequest | CountTokensRequest, endpoint: str) -> Ask:
    """The turn a Messages body asks for (a token count's body: the same prompt)."""
    tools = request_tools(
        req.tools,
        req.tool_choice,
        req.mcp_servers,
        loaded=searched(req.messages),
        placed=referenced(req.messages),
    )
    labels: list[str] = []
    # a tool_reference puts the definition of the tool it names in place
    client_tools = {f.name: f for f in tools.spec.parsed()}
    messages = to_chat(req.system, req.messages, client_tools, labels)
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
            user=_user_id(req.metadata),
        )
        keep_alive, ttl, adapter = req.keep_alive, req.ttl, req.adapter
        stops = [s for s in req.stop_sequences or [] if s]
    return Ask(
        model=req.model,
        endpoint=endpoint,
        id_prefix="msg_",
        sampling=fields,
        messages=messages,
        keep_alive=keep_alive,
        ttl=ttl,
        enable_thinking=thinking.enabled,
        thinking_budget=thinking.budget,
        tools=tools.spec,
        server_tools=tools.server,  # a count renders only the tool search of them
        server_choice=tools.server_choice,
        stops=stops,
        adapter=adapter,
        call_id_prefix="toolu_",
        part_labels=labels,
    )


class MessageReply(ChoiceReply):
    """A turn as Anthropic's message events or one ``message`` object."""

    ping = True

    def __init__(self, stream: bool, diagnosis: Diagnosis | None = None) -> None:
        self.stream = stream
        self.diagnosis = diagnosis
        self.builder = MessageBuilder("", "", stream=stream)

    def begin(self, model: TextModel, request_id: str) -> None:
        self.builder = MessageBuilder(request_id, model.name, stream=self.stream)

    def opening(self, running: Turn) -> bytes:
        started = running.generations[0].started
        prompt, cached = (started.prompt_tokens, started.cached_tokens) if started else (0, 0)
        self._diagnose(prompt, cached)
        return self.builder.opening(prompt, cached)

    def _diagnose(self, prompt_tokens: int, cached_tokens: int) -> None:
        diagnosis, message = self.diagnosis, self.builder.message
        if diagnosis is None:
            return
        if diagnosis.asked:
            message["diagnostics"] = diagnosis.answer(message["id"], prompt_tokens, cached_tokens)
        else:
            diagnosis.remember(message["id"], prompt_tokens)

    def on(self, event: TurnEvent) -> bytes | None:
        return self.builder.on(event)

    def body(self) -> Any:
        usage = self.builder.message["usage"]
        if not self.stream:  # the final count of cached tokens, not the worker's first word
            self._diagnose(usage["input_tokens"], usage["cache_read_input_tokens"])
        return self.builder.message

    def failed(self, exc: GatewayError) -> bytes:
        body = anthropic_error_body(exc)["error"]
        return self.builder.error(body["type"], body["message"])

    def error_body(self, exc: GatewayError) -> Any:
        return anthropic_error_body(exc)

    def alive(self) -> bytes:
        return self.builder.keepalive()


@anthropic_errors
async def create_message(request: Request) -> Response:
    """``POST /v1/messages``: JSON or, with ``stream``, Anthropic's event stream."""
    req = await read_json(request, MessagesRequest)
    log_betas(request, req)
    ask = messages_ask(req, "/v1/messages")
    asked = req.diagnostics
    diagnosis = Diagnosis(
        gateway_of(request).message_digests,
        request_digest(req),
        asked=asked is not None,
        previous_id=asked.previous_message_id if asked is not None else None,
    )
    return await serve(request, ask, MessageReply(req.stream, diagnosis), stream=req.stream)


@anthropic_errors
async def count_tokens(request: Request) -> Response:
    """``POST /v1/messages/count_tokens``: the prompt's tokens, counted by the model's
    own tokenizer and chat template (the worker renders it as for a real turn)."""
    req = await read_json(request, CountTokensRequest)
    log_betas(request, req)
    tokens = await count(request, messages_ask(req, "/v1/messages/count_tokens"))
    return JSONResponse({"input_tokens": tokens})
