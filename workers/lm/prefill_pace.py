"""Prefill slices sized to the machine's measured prompt speed.

The serve loop sees a cancel or a new request only between two steps, and a step
that prefills reads one slice of each prompt. With a fixed slice of
``prefill_step_size`` tokens (2,048 by default) a slow machine spends minutes on
one step: a client that left is still prefilled, and every request behind it
waits. :class:`PrefillPace` measures prefill speed (prompt tokens per second, all
prompts of a step together) and sizes the next slice so that a step takes about
:data:`SLICE_SECONDS`, never more than ``prefill_step_size`` tokens. On a fast
machine slices stay at ``prefill_step_size`` (the speed of the fixed slice), and
only the first prompt a worker reads starts with one short slice, before any
measurement.

``MLX_GATEWAY_TEST_PREFILL_TPS`` (tests only) caps prefill at that many tokens per
second: each slice is stretched with a sleep, as on a slower machine.
"""

from __future__ import annotations

import os
import time

SLICE_SECONDS = 0.25
"""The work one prefill step aims at; cancels take effect within about this long."""
FIRST_SLICE = 4
"""Tokens per prompt of a worker's first prefill step (speed not measured yet)."""
SMALLEST_SLICE = 1
"""A slow machine (7 tokens/s) reads one or two tokens per step."""
NEW_WEIGHT = 0.5
"""Weight of a step's speed in the running estimate. A step's speed understates
the prefill speed (its fixed costs, the decoding of running requests, count in
its time), so a faster step always counts in full weight, and a slower one only
as far as it is as long as the step aimed at: short slow steps are mostly fixed
costs, long slow ones show a real slow-down (longer context, a busy machine)."""
THROTTLE_ENV = "MLX_GATEWAY_TEST_PREFILL_TPS"


class PrefillPace:
    """The slice size for the next prefill step, learned from the previous ones."""

    def __init__(self, most: int, seconds: float = SLICE_SECONDS) -> None:
        self.most = max(most, 1)
        self.seconds = seconds
        self.rate: float | None = None
        """Measured prompt tokens per second (``None``: nothing measured yet)."""
        throttle = os.environ.get(THROTTLE_ENV)
        self.throttle = float(throttle) if throttle else None

    def slice(self, rows: int = 1) -> int:
        """Tokens per prompt for the next step, when ``rows`` prompts prefill together."""
        if self.rate is None:
            return min(FIRST_SLICE, self.most)
        size = int(self.rate * self.seconds / max(rows, 1))
        return max(min(size, self.most), min(SMALLEST_SLICE, self.most))

    def done(self, tokens: int, seconds: float) -> None:
        """A step prefilled ``tokens`` (all its prompts together) in ``seconds``:
        learn from its speed."""
        if tokens <= 0:
            return
        if self.throttle:
            slower = tokens / self.throttle - seconds
            if slower > 0:
                time.sleep(slower)
                seconds += slower
        if seconds <= 0:
            return
        rate = tokens / seconds
        if self.rate is None:
            self.rate = rate
            return
        weight = NEW_WEIGHT
        if rate < self.rate:
            weight *= min(1.0, seconds / self.seconds)
        self.rate += weight * (rate - self.rate)
