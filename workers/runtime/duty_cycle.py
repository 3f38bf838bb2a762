"""A bounded share of the wall time for batch work while a person waits.

Batch work beside an interactive request is let run in steps, each followed by a
rest long enough that the steps take at most ``share`` of the wall time: after a
step of ``s`` seconds the next may start ``s * (1 - share) / share`` seconds after
it ended. ``share`` 0 lets no step run; 1 lets every step run at once. The serve
loop (:mod:`.serve`) paces a held worker's batch steps with one (the share the
gateway's ``Pause.duty`` names), and the lm worker paces a batch prompt's prefill
slices beside an interactive request that decodes on the same model
(:mod:`~..lm.fair_share`).

Each step taken is recorded (:attr:`DutyCycle.steps`: start and end, on the clock
given), so tests read the schedule that was kept rather than time it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

RECORDED = 256
"""Steps kept in :attr:`DutyCycle.steps` (the most recent)."""


class DutyCycle:
    """When the next batch step may start, given the ones already taken."""

    def __init__(self, share: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.share = clamped(share)
        self._clock = clock
        self._next = 0.0
        """The clock's time before which no step may start."""
        self.steps: deque[tuple[float, float]] = deque(maxlen=RECORDED)
        """The steps taken, ``(start, end)``, oldest first."""

    def wait(self) -> float | None:
        """Seconds until the next step may start: 0.0 for now, ``None`` for never
        (``share`` 0)."""
        if self.share <= 0.0:
            return None
        return max(self._next - self._clock(), 0.0)

    def ready(self) -> bool:
        """Whether a step may start now."""
        return self.wait() == 0.0

    def took(self, started: float, ended: float) -> None:
        """A step ran from ``started`` to ``ended`` (the clock's times): the next one
        rests for its share."""
        self.steps.append((started, ended))
        if self.share <= 0.0:
            return
        self._next = ended + rest_after(max(ended - started, 0.0), self.share)

    def now(self) -> float:
        """The clock's time (to mark a step's start and end)."""
        return self._clock()


def rest_after(seconds: float, share: float) -> float:
    """The rest a step of ``seconds`` needs so that steps take ``share`` of the time."""
    if share <= 0.0:
        return float("inf")
    return seconds * (1.0 - share) / share


def clamped(share: float) -> float:
    """``share`` within 0 and 1 (what a :class:`DutyCycle` keeps of it)."""
    return min(max(share, 0.0), 1.0)
