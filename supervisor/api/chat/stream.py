"""The ``chat.completion.chunk`` stream of a turn with tools, thinking, log-probabilities
or several choices.

Per choice: an opening delta (``role``), then ``reasoning_content`` deltas,
``content`` deltas (with their tokens' log-probabilities when asked) and, per tool
call, a first delta with its ``id``, ``type`` and function ``name`` (arguments
``""``) and a second with the ``arguments`` — the shape the OpenAI SDK's stream
accumulator rebuilds calls from — then an empty delta with the ``finish_reason``.
Choices interleave as they generate. With ``include_usage``, one last chunk with no
choices carries the usage of the whole turn.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator

from msgspec import UNSET

from mlx_gateway.protocol.messages import Usage as WireUsage
from mlx_gateway.supervisor.api.chat.objects import (
    ChatChunkOut,
    ChoiceLogprobs,
    ChunkChoiceOut,
    DeltaOut,
    FunctionDelta,
    ToolCallDelta,
    logprobs_out,
)
from mlx_gateway.supervisor.engine.objects import Usage, usage_from
from mlx_gateway.supervisor.engine.turns import (
    Finished,
    ReasoningDelta,
    TextDelta,
    ToolCallMade,
    Turn,
)
from mlx_gateway.supervisor.http import ended, sse

logger = logging.getLogger(__name__)


def total_usage(usages: list[WireUsage]) -> WireUsage:
    """The usage of ``n`` choices: the prompt counted once, completions added up."""
    if not usages:
        return WireUsage()
    first = usages[0]
    return WireUsage(
        prompt_tokens=first.prompt_tokens,
        completion_tokens=sum(u.completion_tokens for u in usages),
        cached_tokens=first.cached_tokens,
        draft_proposed=sum(u.draft_proposed for u in usages),
        draft_accepted=sum(u.draft_accepted for u in usages),
    )


class ChatStream:
    """Writes one turn's events as SSE chunks."""

    def __init__(
        self, id: str, created: int, model: str, include_usage: bool, logprobs: bool
    ) -> None:
        self.id, self.created, self.model = id, created, model
        self.include_usage = include_usage
        self.logprobs = logprobs

    def chunk_object(
        self,
        index: int,
        delta: DeltaOut,
        finish_reason: str | None = None,
        logprobs: ChoiceLogprobs | None = None,
    ) -> ChatChunkOut:
        return ChatChunkOut(
            id=self.id,
            created=self.created,
            model=self.model,
            choices=[ChunkChoiceOut(index, delta, finish_reason, logprobs)],
            usage=None if self.include_usage else UNSET,
        )

    def chunk(
        self,
        index: int,
        delta: DeltaOut,
        finish_reason: str | None = None,
        logprobs: ChoiceLogprobs | None = None,
    ) -> bytes:
        return sse.data(self.chunk_object(index, delta, finish_reason, logprobs))

    def usage(self, usage: Usage) -> bytes:
        """The last chunk, with no choices and the usage of the whole request."""
        return sse.data(
            ChatChunkOut(
                id=self.id, created=self.created, model=self.model, choices=[], usage=usage
            )
        )

    def events(self, turn: Turn) -> AsyncIterator[bytes]:
        """Every event of ``turn``, then ``[DONE]``; a failure after the start ends
        the stream with an error event and ``[DONE]``."""
        return ended(self._events(turn), turn, logger)

    async def _events(self, turn: Turn) -> AsyncGenerator[bytes, None]:
        usages: list[WireUsage] = []
        for index in range(turn.request.n):
            yield self.chunk(index, DeltaOut(role="assistant", content=""))
        async for index, event in turn.merged():
            match event:
                case ReasoningDelta(text=text):
                    yield self.chunk(index, DeltaOut(reasoning_content=text))
                case TextDelta(text=text, logprobs=entries):
                    if not text and not entries:
                        continue
                    logprobs = ChoiceLogprobs(logprobs_out(entries)) if self.logprobs else None
                    yield self.chunk(index, DeltaOut(content=text), logprobs=logprobs)
                case ToolCallMade():
                    yield self.chunk(index, DeltaOut(tool_calls=[_call_head(event)]))
                    arguments = FunctionDelta(arguments=event.arguments)
                    yield self.chunk(
                        index,
                        DeltaOut(tool_calls=[ToolCallDelta(event.index, function=arguments)]),
                    )
                case Finished(reason=reason, usage=usage):
                    usages.append(usage)
                    yield self.chunk(index, DeltaOut(), reason)
        if self.include_usage:
            yield self.usage(usage_from(total_usage(usages)))


def _call_head(call: ToolCallMade) -> ToolCallDelta:
    return ToolCallDelta(
        call.index,
        id=call.id,
        type="function",
        function=FunctionDelta(name=call.name, arguments=""),
    )


class ChatEvents(ChatStream):
    """The ``chat.completion.chunk`` events of a plain text stream (one choice; no
    tools, reasoning or log-probabilities), as :func:`~...reply.streaming.relay`
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
