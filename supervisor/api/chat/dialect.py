"""Chat completions as a dialect over the one serve: a request into an
:class:`~...engine.ask.Ask`, and a turn out as ``chat.completion`` chunks or one
``chat.completion`` object."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from msgspec import UNSET

from mlx_gateway.supervisor.api.chat.objects import (
    ChatChoiceOut,
    ChatCompletionOut,
    ChatMessageOut,
    ChoiceLogprobs,
    FunctionOut,
    ToolCallOut,
    logprobs_out,
)
from mlx_gateway.supervisor.api.chat.stream import ChatEvents, ChatStream, total_usage
from mlx_gateway.supervisor.engine.objects import usage_from
from mlx_gateway.supervisor.engine.requests import ChatCompletionRequest, messages_to_builtins
from mlx_gateway.supervisor.engine.thinking import from_effort
from mlx_gateway.supervisor.engine.tools import output_spec, tool_spec
from mlx_gateway.supervisor.reply.serve import Ask, ChoiceResult, Reply, TextModel, Turn, relay

ENDPOINT = "/v1/chat/completions"


def chat_ask(req: ChatCompletionRequest, endpoint: str = ENDPOINT) -> Ask:
    """The turn a chat-completions body asks for."""
    thinking = from_effort(req.reasoning_effort, req.enable_thinking, req.thinking_budget)
    return Ask(
        model=req.model,
        endpoint=endpoint,
        id_prefix="chatcmpl-",
        sampling=req,
        messages=messages_to_builtins(req.messages),
        keep_alive=req.keep_alive,
        ttl=req.ttl,
        chat_template_kwargs=req.chat_template_kwargs,
        enable_thinking=thinking.enabled,
        thinking_budget=thinking.budget,
        tools=tool_spec(req.tools, req.tool_choice, req.parallel_tool_calls),
        output=output_spec(req.response_format),
        logprobs=(req.top_logprobs or 0) if req.logprobs else None,
        n=req.n or 1,
        adapter=req.adapter,
    )


class ChatReply(Reply):
    """A turn as ``chat.completion.chunk`` events or one ``chat.completion``."""

    def __init__(self, req: ChatCompletionRequest) -> None:
        self.id = ""
        self.created = int(time.time())
        self.include_usage = req.stream_options is not None and req.stream_options.include_usage
        self.logprobs = req.logprobs is True

    def begin(self, model: TextModel, request_id: str) -> None:
        self.id = request_id

    def events(self, running: Turn) -> AsyncIterator[bytes]:
        name = running.handle.name
        if running.plain():  # the lean path: text only, one choice
            plain = ChatEvents(self.id, self.created, name, self.include_usage)
            return relay(running.generations[0], plain)
        stream = ChatStream(self.id, self.created, name, self.include_usage, self.logprobs)
        return stream.events(running)

    async def whole(self, running: Turn) -> Any:
        try:
            results = await running.collect()
        finally:
            await running.aclose()
        return ChatCompletionOut(
            id=self.id,
            created=self.created,
            model=running.handle.name,
            choices=[_choice(r, self.logprobs) for r in results],
            usage=usage_from(total_usage([r.finish.usage for r in results if r.finish])),
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
