"""A stuck step: the worker lives and heartbeats, but its MLX thread makes no progress.

Each heartbeat carries the worker's :class:`~mlx_gateway.protocol.messages.StepProgress`:
the step running now and for how long it has shown no progress. A READY worker
whose step has shown none for longer than its limit is stuck (a forward pass that
never returns, a deadlocked tokenizer): the housekeeping loop kills it, which fails
its requests at once, and the next request starts it again.

The limit is ``server.step_timeout``; by default (``auto``) it is ``hang_timeout``,
or :data:`AUTO_FACTOR` times the longest step this worker measured when that is
more, so no healthy step reaches it (a slow model's long prefill slices raise it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from mlx_gateway.protocol.messages import StepProgress
from mlx_gateway.supervisor.config import ServerConfig

AUTO_FACTOR = 10.0
"""``step_timeout: auto``: this many times the longest step measured (at least
``hang_timeout``)."""


@dataclass(frozen=True)
class Stall:
    """A step past its limit: what it is and how long it has shown no progress."""

    what: str
    seconds: float
    limit: float
    steps: int

    @property
    def phase(self) -> str:
        """The step's kind for a metric label: ``decode``, ``prefill``, ``checks``…"""
        return self.what.split(" ", 1)[0] or "step"

    def describe(self, inflight: int) -> str:
        return (
            f"stuck: its step '{self.what}' made no progress for {self.seconds:.0f} s "
            f"(step_timeout {self.limit:g} s; after {self.steps} steps) with {inflight} "
            "request(s) in flight; the next request starts it again (if such a step is "
            "normal for this model, raise server.step_timeout)"
        )


def step_limit(step: StepProgress, server: ServerConfig) -> float:
    """Seconds the current step may go without progress (see module doc)."""
    if server.step_timeout is not None:
        return server.step_timeout
    return max(server.hang_timeout, AUTO_FACTOR * step.longest)


def stalled(
    step: StepProgress | None, seen: float, now: float, server: ServerConfig
) -> Stall | None:
    """The stall of ``step`` (reported by a heartbeat received at ``seen``) at
    ``now``, or ``None`` while it is within its limit or no step runs."""
    if step is None or not step.current:
        return None
    seconds = step.stalled_for + max(now - seen, 0.0)
    limit = step_limit(step, server)
    if seconds <= limit:
        return None
    return Stall(step.current, seconds, limit, step.steps)


def step_now(step: StepProgress | None, seen: float) -> str | None:
    """The step running now and how long it has made no progress, for a model's
    status (``decode of 2 requests (0.1 s)``); ``None`` between steps."""
    if step is None or not step.current:
        return None
    stalled = step.stalled_for + max(time.monotonic() - seen, 0.0)
    return f"{step.current} ({stalled:.1f} s)"
