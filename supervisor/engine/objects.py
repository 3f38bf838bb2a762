"""OpenAI response objects shared by the surfaces, as msgspec Structs encoded
straight to JSON: usage, legacy completions and the error event. (The chat
completion objects are :mod:`mlx_gateway.supervisor.api.chat.objects`.)

Fields OpenAI always sends are always present (``null`` included). ``usage`` on
stream chunks is :data:`msgspec.UNSET` (left out) unless the client asked for
``stream_options.include_usage``, in which case it is ``null`` on every chunk but
the last, as OpenAI does.
"""

from __future__ import annotations

from typing import Literal

from msgspec import UNSET, Struct, UnsetType

from mlx_gateway.protocol import messages as wire

FinishReason = str


class PromptTokensDetails(Struct):
    cached_tokens: int = 0


class CompletionTokensDetails(Struct):
    """OpenAI's fields for tokens of a prediction, here a draft model's proposals
    (speculative decoding): those the model took and those it refused."""

    accepted_prediction_tokens: int = 0
    rejected_prediction_tokens: int = 0


class Usage(Struct):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails
    completion_tokens_details: CompletionTokensDetails | UnsetType = UNSET
    """Only when a draft model proposed tokens."""


def usage_from(usage: wire.Usage) -> Usage:
    """The OpenAI usage object of a worker's :class:`~mlx_gateway.protocol.messages.Usage`."""
    details: CompletionTokensDetails | UnsetType = UNSET
    if usage.draft_proposed:
        details = CompletionTokensDetails(
            accepted_prediction_tokens=usage.draft_accepted,
            rejected_prediction_tokens=usage.draft_proposed - usage.draft_accepted,
        )
    return Usage(
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        total_tokens=usage.prompt_tokens + usage.completion_tokens,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=usage.cached_tokens),
        completion_tokens_details=details,
    )


# ---------------------------------------------------------------- completions


class CompletionChoice(Struct):
    index: int
    text: str
    finish_reason: FinishReason | None = None
    logprobs: None = None


class Completion(Struct):
    """A legacy completion; also each chunk of its stream (OpenAI uses one shape)."""

    id: str
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | UnsetType | None = UNSET
    object: Literal["text_completion"] = "text_completion"
