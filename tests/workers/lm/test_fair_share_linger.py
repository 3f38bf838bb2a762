"""The linger of :class:`~mlx_gateway.workers.lm.fair_share.FairShare` on a fake clock:
after a person's answer on the model ends, a batch prompt's slices stay bounded for
``linger`` seconds, at full duty (no answer is decoding to keep apart), then are
efficient again; without a linger they are efficient at once."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from mlx_gateway.workers.lm.fair_share import FairShare, linger_option
from mlx_gateway.workers.lm.prefill_pace import BOUND_MARGIN, THROTTLE_ENV, PrefillPace
from mlx_gateway.workers.runtime.contract import LoadError

FIXED = 0.05
TOKENS_PER_SECOND = 2000.0
PERSON = [SimpleNamespace(batch=False, generated=3, finish=None)]
"""A person's answer decoding."""
TICK = 0.125
"""Seconds between two steps (exact in binary, so the clock adds up exactly)."""
NOBODY = [SimpleNamespace(batch=True, generated=0, finish=None)]
"""The batch prompt alone."""
BOUND = round(BOUND_MARGIN * FIXED * TOKENS_PER_SECOND) + 1
"""The largest bounded slice on that machine (half a pass's time of prompt, and one
token for the fit's rounding)."""


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def measured_pace(monkeypatch: pytest.MonkeyPatch) -> PrefillPace:
    """A pace that measured a machine of FIXED seconds a pass and TOKENS_PER_SECOND."""
    monkeypatch.delenv(THROTTLE_ENV, raising=False)
    pace = PrefillPace(4096)
    for tokens in (100, 400, 200, 800, 300, 600):
        pace.done(tokens, FIXED + tokens / TOKENS_PER_SECOND)
    return pace


def step(fair: FairShare, running: list[Any], clock: Clock) -> tuple[int, bool]:
    """One step's slice (reported done at once, in the time it would take)."""
    tokens = fair.slice(1, running)
    if tokens:
        fair.done(tokens, FIXED + tokens / TOKENS_PER_SECOND)
    clock.now += TICK
    last = fair.slices[-1]
    return last.tokens, last.bounded


def test_slices_stay_bounded_for_the_linger_then_are_efficient(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    pace = measured_pace(monkeypatch)
    fair = FairShare(pace, linger=2.0, clock=clock)

    tokens, bounded = step(fair, NOBODY, clock)
    assert not bounded and tokens > 2 * BOUND, "nobody came yet: efficient slices"
    for _ in range(5):  # the person's answer decodes
        step(fair, PERSON, clock)
    ended = clock.now - TICK  # the last step beside the answer
    lingering = []
    while clock.now - ended < 2.0:
        lingering.append(step(fair, NOBODY, clock))
    assert len(lingering) == 2.0 / TICK - 1
    assert all(bounded and 0 < tokens <= BOUND for tokens, bounded in lingering), lingering
    tokens, bounded = step(fair, NOBODY, clock)  # the linger is over
    assert not bounded and tokens > 2 * BOUND


def test_without_a_linger_slices_are_efficient_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    pace = measured_pace(monkeypatch)
    fair = FairShare(pace, clock=clock)
    step(fair, PERSON, clock)
    assert fair.slices[-1].bounded
    tokens, bounded = step(fair, NOBODY, clock)
    assert not bounded and tokens > 2 * BOUND


def test_the_option_is_seconds() -> None:
    assert linger_option({}) == 0.0
    assert linger_option({"batch_slice_linger": 3}) == 3.0
    for bad in (-1, True, "2s"):
        with pytest.raises(LoadError, match="batch_slice_linger"):
            linger_option({"batch_slice_linger": bad})
