"""Per-request sampling inside mlx-vlm's ``BatchGenerator``.

mlx-vlm's batch generator applies one sampler to the whole batch, but it calls
each row's own logits processors on that row alone. So each request gets a
:class:`RowSampler` as its last logits processor: it applies the request's
penalties, draws the request's token with the request's own sampler (temperature,
top-p/k, min-p, seed: see :mod:`.sampling`), and hands back logits in which only
that token is possible. The batch's sampler is then a plain argmax, which picks
exactly that token. A greedy request without penalties needs no processor.

mlx-vlm calls a processor in two ways: ``processor(tokens, logits)`` for the
first token after the prompt (``tokens`` is the prompt as the batch saw it, only
its uncached part after a prefix-cache hit) and ``processor.process_last_token(
token, logits)`` for every later one. The sampler keeps its own history (the
whole prompt, then each generated token) so penalties see the same context on
both paths.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx

from mlx_gateway.protocol.messages import SamplingParams
from mlx_gateway.workers.common.sampling import (
    LogitsProcessor,
    Sampler,
    make_request_processors,
    make_request_sampler,
)


def argmax_sampler(logprobs: mx.array) -> mx.array:
    """The batch's sampler: each row's best token."""
    return mx.argmax(logprobs, axis=-1)


class RowSampler:
    """One request's penalties and sampler, as a logits processor (see module doc)."""

    def __init__(
        self, prompt: Sequence[int], sampler: Sampler, processors: Sequence[LogitsProcessor]
    ) -> None:
        self.tokens = list(prompt)
        self._sampler = sampler
        self._processors = list(processors)

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        return self._choose(logits)

    def process_last_token(self, last_token: int, logits: mx.array) -> mx.array:
        self.tokens.append(int(last_token))
        return self._choose(logits)

    def _choose(self, logits: mx.array) -> mx.array:
        if self._processors:
            context = mx.array(self.tokens)
            for processor in self._processors:
                logits = processor(context, logits)
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        token = self._sampler(logprobs)
        vocab = mx.arange(logits.shape[-1])
        return mx.where(vocab == token.reshape(-1, 1), 0.0, -mx.inf).astype(logits.dtype)


def row_processors(params: SamplingParams, prompt: Sequence[int]) -> list[LogitsProcessor] | None:
    """The logits processors of one request in a batch (``None``: argmax suffices)."""
    processors = make_request_processors(params, len(prompt))
    if params.temperature == 0 and not processors:
        return None
    return [RowSampler(prompt, make_request_sampler(params), processors)]
