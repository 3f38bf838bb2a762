"""``POST /api/chat`` and ``POST /api/generate``: a turn of a language model,
answered as one JSON object or, by default (``stream`` left out or ``true``), as
NDJSON lines, the last with ``done: true``, ``done_reason`` and the durations."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.protocol.messages import Done, Generate
from mlx_gateway.supervisor import recorder
from mlx_gateway.supervisor.api.ollama.convert import (
    output_of,
    thinking_of,
    to_chat,
    tool_spec,
    user_content,
)
from mlx_gateway.supervisor.api.ollama.names import require_kind, resolve
from mlx_gateway.supervisor.api.ollama.options import read_options, sampling_fields
from mlx_gateway.supervisor.api.ollama.replies import (
    Clock,
    arguments_object,
    done_reason,
    error_line,
    line,
    ndjson,
    now_iso,
    ollama_errors,
)
from mlx_gateway.supervisor.api.ollama.schemas import ChatRequest, GenerateRequest
from mlx_gateway.supervisor.config.kinds import settings_as
from mlx_gateway.supervisor.config.text import TextModelConfig
from mlx_gateway.supervisor.engine.conversation import for_template
from mlx_gateway.supervisor.engine.generation import Generation
from mlx_gateway.supervisor.engine.keep_alive import apply_keep_alive
from mlx_gateway.supervisor.engine.kinds import CHAT_KINDS
from mlx_gateway.supervisor.engine.sampling import sampling_params
from mlx_gateway.supervisor.engine.tools import ToolSpec
from mlx_gateway.supervisor.engine.turns import (
    Finished,
    ReasoningDelta,
    TextDelta,
    ToolCallMade,
    Turn,
    TurnEvent,
    TurnRequest,
    check_turn,
    template_kwargs,
)
from mlx_gateway.supervisor.errors import BadRequest, GatewayError
from mlx_gateway.supervisor.http.body import read_json
from mlx_gateway.supervisor.http.disconnect import unless_disconnected
from mlx_gateway.supervisor.http.replies import JSONResponse
from mlx_gateway.supervisor.pool.keep_alive import lifetime, request_started
from mlx_gateway.supervisor.pool.model_handle import ModelHandle
from mlx_gateway.supervisor.reply.inputs import prepare_images

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


def _call(event: ToolCallMade) -> dict[str, Any]:
    return {
        "id": event.id,
        "function": {
            "index": event.index,
            "name": event.name,
            "arguments": arguments_object(event.arguments),
        },
    }


class Running(Protocol):
    """A started answer: a :class:`Turn`, or a raw generation read as one."""

    def choice(self, index: int) -> AsyncIterator[TurnEvent]: ...

    async def aclose(self) -> None: ...


async def _stream(running: Running, shape: _Shape, clock: Clock) -> AsyncIterator[bytes]:
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
        log.warning("Ollama stream failed after it started: %s", exc.message)
        yield error_line(exc)
    finally:
        await running.aclose()


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


async def _whole(running: Running, shape: _Shape, clock: Clock) -> dict[str, Any]:
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
    return shape.final(
        finish, clock, text="".join(text), thinking="".join(thinking), calls=calls or None
    )


async def _answer(
    request: Request,
    handle: ModelHandle,
    turn: TurnRequest,
    stream: bool,
    chat: bool,
    clock: Clock,
) -> Response:
    check_turn(handle, turn)
    running = await unless_disconnected(
        request, Turn.start(handle, turn, recorder.name_request("ollama-"))
    )
    clock.mark_accepted()
    return await _reply(request, handle, running, stream, chat, clock)


async def _reply(
    request: Request, handle: ModelHandle, running: Running, stream: bool, chat: bool, clock: Clock
) -> Response:
    shape = _Shape(request_name(request, handle), chat)
    if stream:
        return ndjson(_stream(running, shape, clock))
    body = await unless_disconnected(request, _whole(running, shape, clock))
    return JSONResponse(body)


def request_name(request: Request, handle: ModelHandle) -> str:
    """The model name answers carry: the one the client sent (Ollama echoes it)."""
    name = request.scope.get("ollama_model")
    return name if isinstance(name, str) and name else handle.name


def _turn(
    request: Request,
    handle: ModelHandle,
    messages: list[dict[str, Any]],
    tools: ToolSpec,
    req: ChatRequest | GenerateRequest,
) -> TurnRequest:
    options = read_options(req.options)
    thinking = thinking_of(req.think)
    return TurnRequest(
        messages=messages,
        sampling=sampling_params(
            sampling_fields(req.model, options), settings_as(handle.config, TextModelConfig)
        ),
        template_kwargs=template_kwargs(None, tools, thinking.enabled),
        thinking_budget=thinking.budget,
        tools=tools,
        output=output_of(req.format),
    )


@ollama_errors
async def chat(request: Request) -> Response:
    """``POST /api/chat``."""
    clock = Clock()
    req = await read_json(request, ChatRequest)
    handle = resolve(request.app.state.registry, req.model)
    request.scope["ollama_model"] = req.model
    require_kind(handle, CHAT_KINDS, "/api/chat")
    apply_keep_alive(request.app.state, handle, req.keep_alive)
    if not req.messages:  # Ollama's way to load (or, with keep_alive 0, unload) a model
        return await _load_only(request, handle, req.stream, chat=True)
    tools = tool_spec(req.tools)
    inputs = await prepare_images(request, handle, for_template(to_chat(req.messages)))
    turn = _turn(request, handle, inputs.messages, tools, req)
    turn.files, turn.images = inputs.files, inputs.frame_indices
    return await _answer(request, handle, turn, req.stream, True, clock)


@ollama_errors
async def generate(request: Request) -> Response:
    """``POST /api/generate``."""
    clock = Clock()
    req = await read_json(request, GenerateRequest)
    handle = resolve(request.app.state.registry, req.model)
    request.scope["ollama_model"] = req.model
    require_kind(handle, CHAT_KINDS, "/api/generate")
    apply_keep_alive(request.app.state, handle, req.keep_alive)
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
        return await _load_only(request, handle, req.stream, chat=False)
    if req.raw:
        if req.images:
            raise BadRequest("'images' cannot be sent with raw: true.", param="images")
        return await _raw(request, handle, req, clock)
    messages: list[dict[str, Any]] = []
    if req.system:
        messages.append({"role": "system", "content": req.system})
    messages.append({"role": "user", "content": user_content(req.prompt or "", req.images, "")})
    inputs = await prepare_images(request, handle, messages)
    turn = _turn(request, handle, inputs.messages, ToolSpec(), req)
    turn.files, turn.images = inputs.files, inputs.frame_indices
    return await _answer(request, handle, turn, req.stream, False, clock)


async def _load_only(request: Request, handle: ModelHandle, stream: bool, chat: bool) -> Response:
    """An empty request: load the model (or unload it, with ``keep_alive: 0``)."""
    reason = "load"
    request_started(handle)  # no session: its keep_alive applies here
    if lifetime(handle) == 0:
        reason = "unload"
        stop = getattr(handle, "stop", None)
        if stop is not None and handle.status().state == "ready":
            await stop("keep_alive 0: unloaded by an empty request", if_idle=True)
    elif (load := getattr(handle, "load", None)) is not None:
        await unless_disconnected(request, load())
    body: dict[str, Any] = {"model": request_name(request, handle), "created_at": now_iso()}
    if chat:
        body["message"] = {"role": "assistant", "content": ""}
    else:
        body["response"] = ""
    body.update(done=True, done_reason=reason)
    if stream:
        return Response(line(body), media_type="application/x-ndjson")
    return JSONResponse(body)


class _RawTurn:
    """A raw generation (no chat template, no parsers) read as a one-choice turn."""

    def __init__(self, generation: Generation) -> None:
        self.generation = generation

    async def choice(self, index: int) -> AsyncIterator[TurnEvent]:
        async for reply in self.generation:
            if isinstance(reply, Done):
                yield Finished(reply.finish_reason, reply.usage)
                return
            yield TextDelta(reply.text)

    async def aclose(self) -> None:
        await self.generation.aclose()


async def _raw(
    request: Request, handle: ModelHandle, req: GenerateRequest, clock: Clock
) -> Response:
    """``raw: true``: the prompt goes to the model as it is, no chat template."""
    if req.format:
        raise BadRequest("'format' cannot be combined with raw: true.", param="format")
    options = read_options(req.options)
    msg = Generate(
        request_id=recorder.name_request("ollama-"),
        prompt=req.prompt or "",
        sampling=sampling_params(
            sampling_fields(req.model, options), settings_as(handle.config, TextModelConfig)
        ),
    )
    generation = await unless_disconnected(request, Generation.start(handle, msg))
    clock.mark_accepted()
    return await _reply(request, handle, _RawTurn(generation), req.stream, False, clock)
