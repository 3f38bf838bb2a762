"""``POST /v1/chat/completions``."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from msgspec import UNSET
from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.supervisor import recorder
from mlx_gateway.supervisor.api.chat.inputs import chat_input
from mlx_gateway.supervisor.api.chat.objects import (
    ChatChoiceOut,
    ChatCompletionOut,
    ChatMessageOut,
    ChoiceLogprobs,
    DeltaOut,
    FunctionOut,
    ToolCallOut,
    logprobs_out,
)
from mlx_gateway.supervisor.api.chat.stream import ChatStream, total_usage
from mlx_gateway.supervisor.config.kinds import settings_as
from mlx_gateway.supervisor.config.text import TextModelConfig
from mlx_gateway.supervisor.engine.adapters import adapters_for
from mlx_gateway.supervisor.engine.keep_alive import client_lifetime
from mlx_gateway.supervisor.engine.kinds import CHAT_KINDS, require_kind
from mlx_gateway.supervisor.engine.objects import usage_from
from mlx_gateway.supervisor.engine.overflow import count_tokens
from mlx_gateway.supervisor.engine.parsers.reasoning import resolve_reasoning
from mlx_gateway.supervisor.engine.requests import ChatCompletionRequest
from mlx_gateway.supervisor.engine.sampling import check_common, sampling_params
from mlx_gateway.supervisor.engine.tools import output_spec
from mlx_gateway.supervisor.engine.turns import (
    ChoiceResult,
    Turn,
    TurnRequest,
    check_turn,
)
from mlx_gateway.supervisor.http import sse
from mlx_gateway.supervisor.http.body import read_json
from mlx_gateway.supervisor.http.disconnect import unless_disconnected
from mlx_gateway.supervisor.http.keepalive import keepalive_for
from mlx_gateway.supervisor.http.replies import JSONResponse
from mlx_gateway.supervisor.reply.answer import json_answer
from mlx_gateway.supervisor.reply.loading import start_stream
from mlx_gateway.supervisor.reply.streaming import relay


class ChatEvents(ChatStream):
    """The ``chat.completion.chunk`` events of a plain text stream (one choice; no
    tools, reasoning or log-probabilities), as :func:`~...engine.streaming.relay`
    writes them: the content event is a template filled with each text."""

    def __init__(self, id: str, created: int, model: str, include_usage: bool) -> None:
        super().__init__(id, created, model, include_usage, logprobs=False)
        self._content = sse.Template(self.chunk_object(0, DeltaOut(content=sse.HOLE)))

    def opening(self) -> bytes:
        return self.chunk(0, DeltaOut(role="assistant", content=""))

    def content(self, text: str) -> bytes:
        return self._content.fill(text)

    def finish(self, finish_reason: str) -> bytes:
        return self.chunk(0, DeltaOut(), finish_reason)


async def count_input_tokens(request: Request) -> Response:
    """``POST /v1/chat/completions/input_tokens``: the prompt tokens of a chat body
    (tools and images included), counted by the worker as the completion would be."""
    req = await read_json(request, ChatCompletionRequest)
    handle = request.app.state.registry.resolve(req.model)
    require_kind(handle, CHAT_KINDS, "/v1/chat/completions/input_tokens")
    chat = await chat_input(request, req, handle)
    inputs = chat.inputs
    work = count_tokens(handle, inputs.messages, chat.kwargs, inputs.files, inputs.frame_indices)
    tokens = await unless_disconnected(request, work)
    return JSONResponse({"object": "chat.completion.input_tokens", "input_tokens": tokens})


async def create_chat_completion(request: Request) -> Response:
    """Validate, resolve the model, generate; answer as JSON or as an SSE stream."""
    req = await read_json(request, ChatCompletionRequest)
    check_common(req)
    handle = request.app.state.registry.resolve(req.model)
    client_lifetime(request.app.state, handle, req.keep_alive, req.ttl)
    require_kind(handle, CHAT_KINDS, "/v1/chat/completions")
    chat = await chat_input(request, req, handle)
    inputs = chat.inputs
    turn = TurnRequest(
        messages=inputs.messages,
        sampling=sampling_params(req, handle.config),
        template_kwargs=chat.kwargs,
        thinking_budget=chat.thinking.budget,
        adapters=adapters_for(handle, req.adapter),
        tools=chat.tools,
        output=output_spec(req.response_format),
        logprobs=(req.top_logprobs or 0) if req.logprobs else None,
        n=req.n or 1,
        files=inputs.files,
        images=inputs.frame_indices,
    )
    check_turn(handle, turn)
    request_id = recorder.name_request("chatcmpl-")
    created = int(time.time())
    if req.stream:
        include_usage = req.stream_options is not None and req.stream_options.include_usage
        start = unless_disconnected(request, Turn.start(handle, turn, request_id))

        def events(running: Turn) -> AsyncIterator[bytes]:
            if plain(running):  # the lean path: text only, one choice
                plain_events = ChatEvents(request_id, created, handle.name, include_usage)
                return relay(running.generations[0], plain_events)
            stream = ChatStream(
                request_id, created, handle.name, include_usage, req.logprobs is True
            )
            return stream.events(running)

        keepalive = keepalive_for(request.app.state)
        return await start_stream(handle, start, events, keepalive)
    running = await unless_disconnected(request, Turn.start(handle, turn, request_id))

    async def answer(running: Turn) -> ChatCompletionOut:
        try:
            results = await running.collect()
        finally:
            await running.aclose()
        return ChatCompletionOut(
            id=request_id,
            created=created,
            model=handle.name,
            choices=[_choice(r, req.logprobs is True) for r in results],
            usage=usage_from(total_usage([r.finish.usage for r in results if r.finish])),
        )

    async def again() -> ChatCompletionOut:
        return await answer(await Turn.start(handle, turn, request_id))

    interval = keepalive_for(request.app.state).interval
    return await json_answer(request, answer(running), interval, again)


def plain(turn: Turn) -> bool:
    """Whether a turn needs none of the parsers: one choice of text, nothing to split."""
    request = turn.request
    return (
        request.n == 1
        and not request.tools.active
        and request.logprobs is None
        and resolve_reasoning(
            settings_as(turn.handle.config, TextModelConfig).reasoning_parser,
            turn.handle.facts.extra if turn.handle.facts is not None else None,
        )
        is None
    )


def _choice(result: ChoiceResult, logprobs: bool) -> ChatChoiceOut:
    finish = result.finish
    calls = [ToolCallOut(c.id, FunctionOut(c.name, c.arguments)) for c in result.calls]
    message = ChatMessageOut(
        content=result.text if result.text or not calls else None,
        tool_calls=calls or UNSET,
        reasoning_content=result.reasoning or UNSET,
    )
    return ChatChoiceOut(
        index=result.index,
        message=message,
        finish_reason=finish.reason if finish else "stop",
        logprobs=ChoiceLogprobs(logprobs_out(result.logprobs)) if logprobs else None,
    )
