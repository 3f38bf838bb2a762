"""``POST /v1/chat/completions``."""

from __future__ import annotations

import time
from uuid import uuid4

from msgspec import UNSET
from starlette.requests import Request
from starlette.responses import Response

from ...protocol.messages import Generate
from . import sse
from .body import read_json
from .disconnect import unless_disconnected
from .generation import Generation
from .image_parts import prepare_images
from .kinds import CHAT_KINDS, require_kind
from .loading import start_stream
from .objects import (
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChunkChoice,
    Delta,
    Usage,
    usage_from,
)
from .responses import JSONResponse
from .sampling import check_common, sampling_params
from .schemas import ChatCompletionRequest, messages_to_builtins
from .streaming import relay


class ChatEvents:
    """The ``chat.completion.chunk`` events of one stream."""

    def __init__(self, id: str, created: int, model: str, include_usage: bool) -> None:
        self.id, self.created, self.model = id, created, model
        self.include_usage = include_usage

    def _chunk(self, delta: Delta, finish_reason: str | None = None) -> bytes:
        return sse.data(
            ChatCompletionChunk(
                id=self.id,
                created=self.created,
                model=self.model,
                choices=[ChunkChoice(index=0, delta=delta, finish_reason=finish_reason)],
                usage=None if self.include_usage else UNSET,
            )
        )

    def opening(self) -> bytes:
        return self._chunk(Delta(role="assistant", content=""))

    def content(self, text: str) -> bytes:
        return self._chunk(Delta(content=text))

    def finish(self, finish_reason: str) -> bytes:
        return self._chunk(Delta(), finish_reason)

    def usage(self, usage: Usage) -> bytes:
        return sse.data(
            ChatCompletionChunk(
                id=self.id, created=self.created, model=self.model, choices=[], usage=usage
            )
        )


async def create_chat_completion(request: Request) -> Response:
    """Validate, resolve the model, generate; answer as JSON or as an SSE stream."""
    req = await read_json(request, ChatCompletionRequest)
    check_common(req)
    handle = request.app.state.registry.resolve(req.model)
    require_kind(handle, CHAT_KINDS, "/v1/chat/completions")
    inputs = await prepare_images(request, handle, messages_to_builtins(req.messages))
    msg = Generate(
        request_id=f"chatcmpl-{uuid4().hex}",
        messages=inputs.messages,
        sampling=sampling_params(req, handle.config),
        chat_template_kwargs=req.chat_template_kwargs or {},
        images=inputs.frame_indices,
    )
    created = int(time.time())
    if req.stream:
        include_usage = req.stream_options is not None and req.stream_options.include_usage
        events = ChatEvents(msg.request_id, created, handle.name, include_usage)
        start = unless_disconnected(request, Generation.start(handle, msg, inputs.files))
        return await start_stream(handle, start, lambda g: relay(g, events))
    generation = await unless_disconnected(request, Generation.start(handle, msg, inputs.files))
    try:
        text, done = await unless_disconnected(request, generation.collect())
    finally:
        await generation.aclose()
    return JSONResponse(
        ChatCompletion(
            id=msg.request_id,
            created=created,
            model=handle.name,
            choices=[
                ChatChoice(
                    index=0,
                    message=AssistantMessage(content=text),
                    finish_reason=done.finish_reason,
                )
            ],
            usage=usage_from(done.usage),
        )
    )
