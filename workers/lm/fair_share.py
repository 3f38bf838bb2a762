"""A batch prompt's prefill beside a person's answer on the same model.

Once an interactive request has its first token (before that, batch prefills yield
altogether: :mod:`.yielding`), a batch request goes on reading its prompt in the
same batch. Left alone, each of its slices would sit between two of the person's
tokens: a slice sized for efficiency (:meth:`.prefill_pace.PrefillPace.slice`, at
least four passes over the weights on a CPU) makes the answer crawl. So while an
interactive request decodes here, :class:`FairShare` bounds each batch slice in
time (:meth:`~.prefill_pace.PrefillPace.bounded`: one pass over the weights and a
small margin) and lets slices take at most :data:`SHARE` of the wall time
(:class:`~..runtime.duty_cycle.DutyCycle`); in the steps between, the batch decodes
without prefilling. Once no interactive request decodes, slices are back to their
efficient size at once, or after ``linger`` seconds (the model's
``batch_slice_linger``): the slice under way when a person's request arrives still
finishes, so a person who comes while slices are efficient waits for most of one
(several passes), and one who comes within the linger for at most one bounded slice.
A linger trades the batch prompt's throughput for that wait: a bounded slice reads
about a third of its time's worth of prompt, an efficient one about three quarters.

Each step's choice is recorded (:attr:`FairShare.slices`), so tests read the
schedule that was kept.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from mlx_gateway.workers.common.options import seconds_option
from mlx_gateway.workers.lm.active import LmActive
from mlx_gateway.workers.lm.prefill_pace import PrefillPace
from mlx_gateway.workers.runtime.duty_cycle import DutyCycle

SHARE = 1 / 3
"""The share of the wall time batch prefill slices may take while a person's answer
decodes: the person's tokens then come at most 1.5 times as far apart as alone, on
average (a slice's time added to one step in three)."""
RECORDED = 512
"""Steps kept in :attr:`FairShare.slices`."""


@dataclasses.dataclass(slots=True)
class Slice:
    """One step's prefill as scheduled: ``tokens`` per prompt (0: skipped, the batch
    only decoded), whether it was ``bounded`` (beside a person's answer, or in the
    linger after one), when it was
    chosen (``at``, on the share's clock) and the ``seconds`` its prompt work took."""

    tokens: int
    bounded: bool
    at: float
    seconds: float = 0.0


def linger_option(options: Mapping[str, Any]) -> float:
    """The ``batch_slice_linger`` of a worker's ``WorkerSpec.options`` (seconds)."""
    return seconds_option(options, "batch_slice_linger", 0.0)


def beside_a_person(running: Iterable[LmActive]) -> bool:
    """Whether an interactive request among ``running`` decodes (has its first token
    and is not finished)."""
    return any(not a.batch and a.generated > 0 and a.finish is None for a in running)


class FairShare:
    """The prefill slice of each step, given who runs (made by the scheduler)."""

    def __init__(
        self,
        pace: PrefillPace,
        share: float = SHARE,
        linger: float = 0.0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.pace = pace
        self.share = share
        self.linger = linger
        """Seconds after a person's answer ends that slices stay bounded (at full duty)."""
        self._clock = clock
        self._person_at = -math.inf
        """When a step last ran beside a person's answer."""
        self.cycle: DutyCycle | None = None
        """The duty cycle kept while a person's answer decodes (``None``: none does)."""
        self.slices: deque[Slice] = deque(maxlen=RECORDED)

    def slice(self, rows: int, running: Iterable[LmActive]) -> int:
        """Tokens per prompt for this step's prefill of ``rows`` prompts; 0: this step
        decodes only."""
        now = self._clock()
        if beside_a_person(running):
            self._person_at = now
            if self.cycle is None:
                self.cycle = DutyCycle(self.share, self._clock)
            size = self.pace.bounded(rows) if self.cycle.ready() else 0
            bounded = True
        else:
            self.cycle = None
            if now - self._person_at < self.linger:  # the next person may come soon
                size, bounded = self.pace.bounded(rows), True
            else:
                size, bounded = self.pace.slice(rows), False
        self.slices.append(Slice(size, bounded, now))
        return size

    def done(self, tokens: int, seconds: float) -> None:
        """The step's prefill read ``tokens`` (all prompts) in ``seconds``."""
        taken = self.pace.done(tokens, seconds)
        last = self.slices[-1] if self.slices else None
        if last is None or tokens <= 0:
            return
        last.seconds = taken
        if self.cycle is not None:
            self.cycle.took(last.at, last.at + taken)
