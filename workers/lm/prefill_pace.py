"""Prefill slices sized to the machine's measured prompt speed.

The serve loop sees a cancel or a new request only between two steps, and a step
that prefills reads one slice of each prompt. With a fixed slice of
``prefill_step_size`` tokens (2,048 by default) a slow machine spends minutes on
one step: a client that left is still prefilled, and every request behind it
waits. :class:`PrefillPace` sizes the next slice so that a step reads about
:data:`SLICE_SECONDS` worth of prompt, never more than ``prefill_step_size``
tokens. On a fast machine slices stay at ``prefill_step_size``, and only the
first prompt a worker reads starts with one short slice, before any measurement.

A prefill step costs a fixed part (one pass over the weights, whatever the
slice) plus a part per token. Where the fixed part is near :data:`SLICE_SECONDS`
(a real model on a CPU: a pass over 135M float32 weights takes 0.1 to 0.2 s on
two cores), slices sized by the average speed shrink until each step is almost
all fixed cost, reading three tokens per prompt, and a wave of short prompts
takes many times its prefill. So the pace fits ``seconds = fixed + tokens *
per_token`` to the recent steps, sizes slices by the cost per token, and lets a
slice read at least :data:`FIXED_SHARE` times the fixed part's worth of prompt.
Slices below ``prefill_step_size`` alternate a little above and below the size
aimed at (:data:`DITHER`), so that the steps always differ enough for the fit to
tell the two parts apart.

Beside an interactive request that decodes on the same model, a batch prompt's
slices are bounded in time instead (:meth:`PrefillPace.bounded`): a step takes at
most one pass over the weights plus :data:`BOUND_MARGIN` of one, so the person's
next token waits for little more than one extra pass (see :mod:`.fair_share`).

``MLX_GATEWAY_TEST_PREFILL_TPS`` (tests only) caps prefill at that many tokens per
second: each slice is stretched with a sleep, as on a slower machine;
``MLX_GATEWAY_TEST_PREFILL_FIXED`` adds that many seconds to every throttled step
(a machine whose pass over the weights costs that much).
"""

from __future__ import annotations

import os
import time
from collections import deque

SLICE_SECONDS = 0.25
"""The prompt work one prefill step aims at; cancels take effect within about this
long (plus a step's fixed cost, where that is larger)."""
FIRST_SLICE = 4
"""Tokens per prompt of a worker's first prefill step (speed not measured yet)."""
SMALLEST_SLICE = 1
"""A slow machine (7 tokens/s) reads one or two tokens per step."""
FIXED_SHARE = 3.0
"""A slice reads at least this many times the step's fixed cost in tokens: at most
a quarter of a prefill step goes to the fixed part."""
GROWTH = 4
"""A step reads at most this many times the most tokens a measured step read: the
fit is trusted only so far beyond what was measured."""
DITHER = 0.25
"""Slices alternate between this much above and below the size aimed at."""
WINDOW = 16
"""Recent steps the fit uses: a slow-down (a longer context, a busy machine) shows
within a few steps."""
BOUND_MARGIN = 0.5
"""A bounded slice's prompt work: at most this share of the step's fixed cost."""
SMALLEST_BOUND = 0.02
"""Seconds of prompt work a bounded slice may take where no fixed cost was measured."""
THROTTLE_ENV = "MLX_GATEWAY_TEST_PREFILL_TPS"
THROTTLE_FIXED_ENV = "MLX_GATEWAY_TEST_PREFILL_FIXED"


class PrefillPace:
    """The slice size for the next prefill step, learned from the previous ones."""

    def __init__(self, most: int, seconds: float = SLICE_SECONDS) -> None:
        self.most = max(most, 1)
        self.seconds = seconds
        self.rate: float | None = None
        """Measured prompt tokens per second beyond the fixed part (``None``:
        nothing measured yet)."""
        self.fixed = 0.0
        """Measured seconds a prefill step costs whatever its slice."""
        self._steps: deque[tuple[int, float]] = deque(maxlen=WINDOW)
        self._above = False
        """Which side of the aimed size the next slice takes (flips every step)."""
        throttle = os.environ.get(THROTTLE_ENV)
        self.throttle = float(throttle) if throttle else None
        self.throttle_fixed = float(os.environ.get(THROTTLE_FIXED_ENV) or 0.0)

    def slice(self, rows: int = 1) -> int:
        """Tokens per prompt for the next step, when ``rows`` prompts prefill together."""
        if self.rate is None:
            return min(FIRST_SLICE, self.most)
        return self._sized(max(self.seconds - self.fixed, FIXED_SHARE * self.fixed), rows)

    def bounded(self, rows: int = 1) -> int:
        """Tokens per prompt for a step bounded in time: one pass over the weights (the
        fixed cost) plus at most :data:`BOUND_MARGIN` of one in prompt work."""
        if self.rate is None:
            return min(FIRST_SLICE, self.most)
        return self._sized(max(BOUND_MARGIN * self.fixed, SMALLEST_BOUND), rows, under=True)

    def _sized(self, budget: float, rows: int, under: bool = False) -> int:
        """Tokens per prompt whose prompt work takes ``budget`` seconds (``under``: at
        most that, the dither only below it)."""
        assert self.rate is not None
        measured = max(tokens for tokens, _ in self._steps)
        size = min(self.rate * budget, GROWTH * measured) / max(rows, 1)
        if size < self.most:
            if under:
                size *= 1.0 if self._above else 1 - 2 * DITHER
            else:
                size *= 1 + DITHER if self._above else 1 - DITHER
        return max(min(round(size), self.most), min(SMALLEST_SLICE, self.most))

    def done(self, tokens: int, seconds: float) -> float:
        """A step prefilled ``tokens`` (all its prompts together) in ``seconds``:
        learn from its speed. Returns the seconds it took (the throttle's, where
        one is set)."""
        if tokens <= 0:
            return 0.0
        if self.throttle:  # a machine of exactly that speed: the tests' slow model
            slowed = self.throttle_fixed + tokens / self.throttle
            if slowed > seconds:
                time.sleep(slowed - seconds)
            # what the step would have taken there, also when this machine was slower
            # (a first step's compile under load), so the measured speed is the throttle's
            seconds = slowed
        if seconds <= 0:
            return 0.0
        self._steps.append((tokens, seconds))
        self._above = not self._above
        self.fixed, per_token = fit(self._steps)
        self.rate = 1.0 / per_token
        return seconds

    def tokens_per_second(self) -> float:
        """The measured prefill speed of a long prompt, read in slices of
        ``prefill_step_size`` tokens (each paying the fixed part once); 0.0 before
        anything was measured. Read from the worker's main thread for heartbeats."""
        rate, fixed = self.rate, self.fixed
        if rate is None or rate <= 0:
            return 0.0
        return self.most / (fixed + self.most / rate)


def fit(steps: deque[tuple[int, float]] | list[tuple[int, float]]) -> tuple[float, float]:
    """``(fixed seconds, seconds per token)`` of ``seconds = fixed + tokens *
    per_token`` over ``steps`` (least squares). Where the steps cannot tell the two
    apart (too few, all of one size, or a fit that makes either negative), the
    fixed part is 0 and the cost per token their average."""
    count = len(steps)
    total_tokens = sum(tokens for tokens, _ in steps)
    total_seconds = sum(seconds for _, seconds in steps)
    average = total_seconds / total_tokens
    if count < 3:
        return 0.0, average
    mean_tokens = total_tokens / count
    mean_seconds = total_seconds / count
    spread = sum((tokens - mean_tokens) ** 2 for tokens, _ in steps)
    if spread <= 0:
        return 0.0, average
    per_token = (
        sum((tokens - mean_tokens) * (seconds - mean_seconds) for tokens, seconds in steps) / spread
    )
    fixed = mean_seconds - per_token * mean_tokens
    if per_token <= 0 or fixed < 0:
        return 0.0, average
    return fixed, per_token
