"""A thinking budget: at most so many generated tokens inside a thinking block.

A logits processor that watches the generated tokens. Inside a thinking block (one
the prompt left open, as templates with thinking on do, or one the model opened
itself with the start marker), it counts the tokens; once ``budget`` of them were
generated it forces the model's end-of-thinking marker, token by token (every other
logit is set to ``-inf``), and the model goes on with its answer. A block the model
closes by itself ends the count; a later block starts a new one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import mlx.core as mx


class ThinkingBudget:
    """``processor(tokens, logits)`` for mlx-lm (``tokens``: the context so far, 1-D)."""

    def __init__(
        self,
        budget: int,
        start: Sequence[int],
        end: Sequence[int],
        prompt_tokens: int,
        inside: bool,
    ) -> None:
        self.budget = budget
        self._start = list(start)
        self._end = list(end)
        self._seen = prompt_tokens
        self._inside = inside
        self._count = 0
        self._recent: list[int] = []
        self._forcing: list[int] = list(self._end) if inside and budget <= 0 else []
        self.forced = 0
        """How many times the budget closed a block (for tests and logs)."""
        if self._forcing:
            self.forced += 1

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        if tokens.shape[-1] > self._seen:
            for token in cast(list[int], tokens[self._seen :].tolist()):
                self._observe(token)
            self._seen = tokens.shape[-1]
        if not self._forcing:
            return logits
        allowed = mx.arange(logits.shape[-1]) == self._forcing[0]
        return mx.where(allowed, logits, mx.array(-mx.inf, dtype=logits.dtype))

    def _observe(self, token: int) -> None:
        if self._forcing and token == self._forcing[0]:
            self._forcing.pop(0)
        keep = max(len(self._start), len(self._end))
        self._recent = [*self._recent, token][-keep:]
        if self._inside:
            if self._recent[-len(self._end) :] == self._end:
                self._inside, self._forcing = False, []
                return
            self._count += 1
            if self._count >= self.budget and not self._forcing:
                self._forcing = list(self._end)
                self.forced += 1
        elif self._recent[-len(self._start) :] == self._start:
            self._inside, self._count = True, 0
            if self.budget <= 0:
                self._forcing = list(self._end)
                self.forced += 1


def make_thinking_budget(
    tokenizer: object, budget: int | None, prompt: list[int], inside: bool
) -> ThinkingBudget | None:
    """The processor for one request, or ``None`` (no budget, or a model without
    thinking markers: the budget is then moot)."""
    if budget is None or not getattr(tokenizer, "has_thinking", False):
        return None
    start = getattr(tokenizer, "think_start_tokens", None)
    end = getattr(tokenizer, "think_end_tokens", None)
    if not start or not end:
        return None
    return ThinkingBudget(budget, start, end, len(prompt), inside)
