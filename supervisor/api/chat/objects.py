"""Chat-completion response objects: whole answers and stream chunks, with tool
calls, reasoning and log-probabilities (the one family; plain text answers and
streams use it too, the unused keys left out or ``null``).

``reasoning_content`` is the field vLLM and most OpenAI-compatible servers use for a
model's thinking; the OpenAI SDK keeps unknown fields, so clients read it as
``message.reasoning_content``.
"""

from __future__ import annotations

from typing import Literal

from msgspec import UNSET, Struct, UnsetType

from mlx_gateway.protocol.messages import TokenLogprob
from mlx_gateway.supervisor.engine.objects import Usage

# ---------------------------------------------------------------- log-probabilities


class TopLogprob(Struct):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprobOut(Struct):
    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(Struct):
    content: list[TokenLogprobOut] | None
    refusal: None = None


def logprobs_out(entries: list[TokenLogprob]) -> list[TokenLogprobOut]:
    """OpenAI's token log-probabilities (``bytes``: the token's UTF-8 bytes)."""
    return [
        TokenLogprobOut(
            token=e.text,
            logprob=e.logprob,
            bytes=list(e.text.encode()),
            top_logprobs=[TopLogprob(t, lp, list(t.encode())) for t, lp in e.top],
        )
        for e in entries
    ]


# ---------------------------------------------------------------- whole answers


class FunctionOut(Struct):
    name: str
    arguments: str


class ToolCallOut(Struct):
    id: str
    function: FunctionOut
    type: Literal["function"] = "function"


class ChatMessageOut(Struct):
    content: str | None
    role: Literal["assistant"] = "assistant"
    tool_calls: list[ToolCallOut] | UnsetType = UNSET
    reasoning_content: str | UnsetType = UNSET
    refusal: None = None


class ChatChoiceOut(Struct):
    index: int
    message: ChatMessageOut
    finish_reason: str
    logprobs: ChoiceLogprobs | None = None


class ChatCompletionOut(Struct):
    id: str
    created: int
    model: str
    choices: list[ChatChoiceOut]
    usage: Usage
    object: Literal["chat.completion"] = "chat.completion"


# ---------------------------------------------------------------- stream chunks


class FunctionDelta(Struct, omit_defaults=True):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(Struct, omit_defaults=True):
    """One tool call's part of a delta: ``id``, ``type`` and ``name`` come in its
    first delta only, the arguments may follow in pieces (the SDK concatenates)."""

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionDelta | None = None


class DeltaOut(Struct, omit_defaults=True):
    role: str | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChunkChoiceOut(Struct):
    index: int
    delta: DeltaOut
    finish_reason: str | None = None
    logprobs: ChoiceLogprobs | None = None


class ChatChunkOut(Struct):
    id: str
    created: int
    model: str
    choices: list[ChunkChoiceOut]
    usage: Usage | UnsetType | None = UNSET
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
