"""Per-request samplers and logits processors for mlx-lm's BatchGenerator.

``BatchGenerator`` calls each request's sampler on that request's row of
log-probabilities (shape ``(1, vocab)``) and each logits processor as
``processor(tokens, logits)`` where ``tokens`` holds the prompt followed by the
tokens generated so far.

Seeds: a request with a ``seed`` samples from its own ``mx.random`` key chain, so
the same seed, prompt and settings reproduce the same text when the request runs
alone. In a batch the logits of one row can differ in the last bits with the
batch's size and padding (other shapes, other reduction orders), and a near tie
can then sample differently: a seed is reproducible as far as batching allows,
exactly as with OpenAI's "best effort" determinism. Temperature 0 is greedy and
needs no seed. Unseeded requests draw from MLX's global random state.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import mlx.core as mx
from mlx_lm.sample_utils import (
    apply_min_p,
    apply_top_k,
    apply_top_p,
    make_logits_processors,
    make_sampler,
)

from mlx_gateway.protocol.messages import SamplingParams

Sampler = Callable[[mx.array], mx.array]
LogitsProcessor = Callable[[mx.array, mx.array], mx.array]


def _seeded_sampler(params: SamplingParams, seed: int) -> Sampler:
    key = mx.random.key(seed)
    temp = params.temperature

    def sample(logprobs: mx.array) -> mx.array:
        nonlocal key
        key, sub = mx.random.split(key)
        # The same filters, in the same order, as mlx-lm's make_sampler.
        if 0 < params.top_p < 1.0:
            logprobs = apply_top_p(logprobs, params.top_p)
        if params.min_p != 0.0:
            logprobs = apply_min_p(logprobs, params.min_p)
        if params.top_k > 0:
            logprobs = apply_top_k(logprobs, params.top_k)
        return mx.random.categorical(logprobs * (1.0 / temp), key=sub)

    return sample


@functools.lru_cache(maxsize=64)
def _shared_sampler(temp: float, top_p: float, min_p: float, top_k: int) -> Sampler:
    # Stateless (it draws from the global random state), so requests with equal
    # settings can share it, and BatchGenerator samples a batch whose rows all
    # share one sampler in a single call instead of one call per row.
    return make_sampler(temp=temp, top_p=top_p, min_p=min_p, top_k=top_k)


def make_request_sampler(params: SamplingParams) -> Sampler:
    """The sampler for one request. Unseeded requests with equal settings share
    one sampler (temperature 0: mlx-lm's greedy sampler)."""
    if params.temperature == 0 or params.seed is None:
        return _shared_sampler(params.temperature, params.top_p, params.min_p, params.top_k)
    return _seeded_sampler(params, params.seed)


def make_openai_penalties(presence: float, frequency: float, prompt_tokens: int) -> LogitsProcessor:
    """OpenAI's presence and frequency penalties: counted over the completion
    only (not the prompt, and not a sliding window as mlx-lm's are).

    ``logits[j] -= frequency * count[j] + presence * (count[j] > 0)``.
    """

    def penalize(tokens: mx.array, logits: mx.array) -> mx.array:
        generated = tokens[prompt_tokens:]
        if generated.size == 0:
            return logits
        counts = mx.zeros((logits.shape[-1],), dtype=logits.dtype).at[generated].add(1)
        penalty = frequency * counts + presence * (counts > 0).astype(logits.dtype)
        return logits - penalty

    return penalize


def make_request_processors(params: SamplingParams, prompt_tokens: int) -> list[LogitsProcessor]:
    """Logits processors for one request (empty when it needs none)."""
    processors: list[LogitsProcessor] = []
    if params.repetition_penalty is not None and params.repetition_penalty != 1.0:
        processors.extend(make_logits_processors(repetition_penalty=params.repetition_penalty))
    if params.presence_penalty or params.frequency_penalty:
        processors.append(
            make_openai_penalties(params.presence_penalty, params.frequency_penalty, prompt_tokens)
        )
    return processors
