"""``POST /api/chat`` and ``POST /api/generate``: a turn of a language model,
answered as one JSON object or, by default (``stream`` left out or ``true``), as
NDJSON lines, the last with ``done: true``, ``done_reason`` and the durations.

Both are a dialect over the one serve (:mod:`...reply.serve`): the request becomes
an :class:`~...engine.ask.Ask`, the turn's events become Ollama's lines."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.supervisor.api.ollama.convert import (
    output_of,
    thinking_of,
    to_chat,
    tool_spec,
    user_content,
)
from mlx_gateway.supervisor.api.ollama.options import read_options, sampling_fields
from mlx_gateway.supervisor.api.ollama.replies import (
    NDJSON,
    Clock,
    arguments_object,
    done_reason,
    error_line,
    line,
    now_iso,
    ollama_errors,
)
from mlx_gateway.supervisor.api.ollama.schemas import ChatRequest, GenerateRequest
from mlx_gateway.supervisor.engine.tools import ToolSpec
from mlx_gateway.supervisor.errors import BadRequest, GatewayError
from mlx_gateway.supervisor.http import JSONResponse, ollama_error_body, read_json
from mlx_gateway.supervisor.reply.serve import (
    Ask,
    Finished,
    ReasoningDelta,
    Reply,
    TextDelta,
    ToolCallMade,
    Turn,
    TurnEvent,
    serve,
    warm,
)

log = logging.getLogger(__name__)


class _Shape:
    """How one endpoint writes a piece of the answer: chat puts it in ``message``,
    generate at the top level (``response``, ``thinking``)."""

    def __init__(self, model: str, chat: bool) -> None:
        self.model = model
        self.chat = chat

    def piece(self, text: str = "", thinking: str = "", calls: list[Any] | None = None) -> dict:
        out: dict[str, Any] = {"model": self.model, "created_at": now_iso()}
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if thinking:
                message["thinking"] = thinking
            if calls:
                message["tool_calls"] = calls
            out["message"] = message
        else:
            out["response"] = text
            if thinking:
                out["thinking"] = thinking
        out["done"] = False
        return out

    def final(self, finish: Finished | None, clock: Clock, **whole: Any) -> dict:
        out = self.piece(**whole)
        out["done"] = True
        out["done_reason"] = done_reason(finish.reason if finish else "stop")
        out.update(clock.durations(finish.usage if finish else None))
        return out

    def empty(self, reason: str) -> dict:
        """The answer to a request with nothing to generate (a load or an unload)."""
        body: dict[str, Any] = {"model": self.model, "created_at": now_iso()}
        if self.chat:
            body["message"] = {"role": "assistant", "content": ""}
        else:
            body["response"] = ""
        body.update(done=True, done_reason=reason)
        return body


def _call(event: ToolCallMade) -> dict[str, Any]:
    return {
        "id": event.id,
        "function": {
            "index": event.index,
            "name": event.name,
            "arguments": arguments_object(event.arguments),
        },
    }


class OllamaReply(Reply):
    """A turn as Ollama's NDJSON lines or one JSON object, with the durations of
    ``clock`` (started when the request arrived)."""

    ndjson = True
    padded = False

    def __init__(self, shape: _Shape, clock: Clock) -> None:
        self.shape = shape
        self.clock = clock

    async def events(self, running: Turn) -> AsyncIterator[bytes]:
        shape, clock = self.shape, self.clock
        clock.mark_accepted()
        finish: Finished | None = None
        try:
            async for event in running.choice(0):
                chunk = _chunk(event, shape, clock)
                if chunk is not None:
                    yield line(chunk)
                if isinstance(event, Finished):
                    finish = event
            yield line(shape.final(finish, clock))
        except GatewayError as exc:
            running_name = running.handle.name
            log.warning(
                "Ollama stream of %s failed after it started: %s", running_name, exc.message
            )
            yield error_line(exc)
        finally:
            await running.aclose()

    async def whole(self, running: Turn) -> Any:
        clock = self.clock
        clock.mark_accepted()
        text, thinking, calls = [], [], []
        finish: Finished | None = None
        try:
            async for event in running.choice(0):
                match event:
                    case TextDelta(text=piece):
                        text.append(piece)
                    case ReasoningDelta(text=piece):
                        thinking.append(piece)
                    case ToolCallMade():
                        calls.append(_call(event))
                    case Finished():
                        finish = event
                if text or thinking or calls:
                    clock.mark_output()
        finally:
            await running.aclose()
        return self.shape.final(
            finish, clock, text="".join(text), thinking="".join(thinking), calls=calls or None
        )

    def error_body(self, exc: GatewayError) -> Any:
        return ollama_error_body(exc)


def _chunk(event: TurnEvent, shape: _Shape, clock: Clock) -> dict[str, Any] | None:
    match event:
        case TextDelta(text=text) if text:
            clock.mark_output()
            return shape.piece(text=text)
        case ReasoningDelta(text=text) if text:
            clock.mark_output()
            return shape.piece(thinking=text)
        case ToolCallMade():
            clock.mark_output()
            return shape.piece(calls=[_call(event)])
    return None


def _ask(
    req: ChatRequest | GenerateRequest,
    endpoint: str,
    messages: list[dict[str, Any]],
    tools: ToolSpec,
    prompt: str | None = None,
) -> Ask:
    thinking = thinking_of(req.think)
    return Ask(
        model=req.model,
        endpoint=endpoint,
        id_prefix="ollama-",
        sampling=sampling_fields(req.model, read_options(req.options)),
        messages=messages,
        prompt=prompt,
        keep_alive=req.keep_alive,
        enable_thinking=None if prompt is not None else thinking.enabled,
        thinking_budget=None if prompt is not None else thinking.budget,
        tools=tools,
        output=output_of(req.format),
    )


async def _answer(request: Request, ask: Ask, stream: bool, chat: bool, clock: Clock) -> Response:
    shape = _Shape(ask.model, chat)
    if not ask.messages and ask.prompt is None:  # Ollama's way to load or unload a model
        body = shape.empty(await warm(request, ask))
        return Response(line(body), media_type=NDJSON) if stream else JSONResponse(body)
    return await serve(request, ask, OllamaReply(shape, clock), stream=stream)


@ollama_errors
async def chat(request: Request) -> Response:
    """``POST /api/chat``."""
    clock = Clock()
    req = await read_json(request, ChatRequest)
    ask = _ask(req, "/api/chat", to_chat(req.messages), tool_spec(req.tools))
    return await _answer(request, ask, req.stream, True, clock)


@ollama_errors
async def generate(request: Request) -> Response:
    """``POST /api/generate``."""
    clock = Clock()
    req = await read_json(request, GenerateRequest)
    for field, value in (("suffix", req.suffix), ("template", req.template)):
        if value:
            raise BadRequest(
                f"'{field}' is not supported by this gateway: models are prompted with their "
                "own chat template (leave it out, or send raw: true with the whole prompt).",
                param=field,
            )
    if req.context:
        raise BadRequest(
            "'context' (token ids of an earlier answer) is not supported; send the "
            "conversation as messages to /api/chat instead.",
            param="context",
        )
    if not req.prompt and not req.images:
        return await _answer(
            request, _ask(req, "/api/generate", [], ToolSpec()), req.stream, False, clock
        )
    if req.raw:
        if req.images:
            raise BadRequest("'images' cannot be sent with raw: true.", param="images")
        if req.format:
            raise BadRequest("'format' cannot be combined with raw: true.", param="format")
        ask = _ask(req, "/api/generate", [], ToolSpec(), prompt=req.prompt or "")
        return await _answer(request, ask, req.stream, False, clock)
    messages: list[dict[str, Any]] = []
    if req.system:
        messages.append({"role": "system", "content": req.system})
    messages.append({"role": "user", "content": user_content(req.prompt or "", req.images, "")})
    ask = _ask(req, "/api/generate", messages, ToolSpec())
    return await _answer(request, ask, req.stream, False, clock)
