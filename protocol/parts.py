"""What every wire message is built on: the tagged base :class:`Message`, and the
parts that requests and replies share (sampling, usage, memory, a model's facts, a
grammar, a token's log-probability). See :mod:`.messages` for the whole vocabulary."""

from __future__ import annotations

from typing import Literal

import msgspec

Priority = Literal["interactive", "batch"]
"""Whose work a request is: a person waiting (``interactive``, the default) or an
app's background work (``batch``), which yields to interactive work: in a model's
queue, in a language model's prefill, and across the machine's workers (see
:class:`~.requests.Pause`)."""
INTERACTIVE: Priority = "interactive"
BATCH: Priority = "batch"


class Message(msgspec.Struct, tag_field="op", omit_defaults=True, forbid_unknown_fields=False):
    """Base of every wire message."""


# ---------------------------------------------------------------- shared parts


class SamplingParams(msgspec.Struct, omit_defaults=True):
    """Sampling settings after the gateway applied the model's defaults."""

    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    stop: list[str] = []
    fit_max_tokens: bool = False
    """A ``max_tokens`` beyond what the context leaves after the prompt is cut to
    that (the model's ``max_tokens_overflow: clamp``) instead of the 400."""


class Usage(msgspec.Struct, omit_defaults=True):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    draft_proposed: int = 0
    """Tokens a draft model proposed (speculative decoding; 0 without one)."""
    draft_accepted: int = 0
    """Proposed tokens the model took (each is one of ``completion_tokens``)."""


class Memory(msgspec.Struct, omit_defaults=True):
    """A worker's memory as it measured it, in bytes."""

    rss: int = 0
    mlx_active: int = 0
    mlx_cache: int = 0
    mlx_peak: int = 0
    kv_active: int = 0
    """Bytes of KV cache held by the requests running now (language models)."""
    kv_kept: int = 0
    """Bytes of KV cache kept for later turns (the prompt cache)."""
    kv_limit: int = 0
    """Bytes of KV cache the worker admits requests against now (0: no limit)."""


class ModelFacts(msgspec.Struct, omit_defaults=True):
    """What a loaded model tells about itself."""

    context_length: int | None = None
    model_type: str | None = None
    load_seconds: float = 0.0
    extra: dict[str, str] = {}


class Constraint(msgspec.Struct, omit_defaults=True):
    """A grammar the generated text must match, in llguidance's Lark dialect
    (``%json {…}`` embeds a JSON schema). ``param`` names the request field it came
    from, for the 400 when it does not compile."""

    grammar: str
    param: str = "response_format"


class TokenLogprob(msgspec.Struct, array_like=True):
    """One generated token: its text (the text of the tokens of a chunk joins to the
    chunk's text), its log-probability and the most likely alternatives as
    ``(text, logprob)`` pairs."""

    text: str
    logprob: float
    top: list[tuple[str, float]] = []
