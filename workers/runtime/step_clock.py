"""The MLX thread's progress, as the main thread reports it in heartbeats.

The MLX thread marks each step it takes (a ``Backend.step``, a request's checks,
the load): :meth:`StepClock.begin` before, :meth:`StepClock.end` after, and
:meth:`StepClock.progressed` whenever it sends a reply inside one (a long step such
as a whole diffusion sends its intermediate steps). The main thread reads
:meth:`StepClock.snapshot` for each heartbeat, so a step that blocks (a forward pass
that never returns, the process alive) shows as a growing ``stalled_for`` while the
heartbeats go on; the gateway decides when that is too long.

Plain attribute writes and reads only (atomic under the GIL): no lock, so the main
thread never waits on the MLX thread.
"""

from __future__ import annotations

import time

from mlx_gateway.protocol.messages import StepProgress


class StepClock:
    """Steps finished, the one running now and its last sign of progress, and the
    longest a finished step went without progress."""

    def __init__(self) -> None:
        self.steps = 0
        self.longest = 0.0
        self._current = ""
        self._since: float | None = None
        self._measured = True

    def begin(self, what: str, *, measured: bool = True) -> None:
        """A step starts; one not ``measured`` (the load, which has its own limit)
        does not count towards :attr:`longest`."""
        self._since = time.monotonic()
        self._current = what
        self._measured = measured

    def progressed(self) -> None:
        """A reply went out: the step is alive (its stall clock restarts)."""
        since = self._since
        if since is not None:
            now = time.monotonic()
            if self._measured:
                self.longest = max(self.longest, now - since)
            self._since = now

    def end(self) -> None:
        since = self._since
        if since is not None and self._measured:
            self.longest = max(self.longest, time.monotonic() - since)
        self._since = None
        self._current = ""
        self.steps += 1

    def snapshot(self) -> StepProgress:
        since, current = self._since, self._current
        if since is None:
            return StepProgress(steps=self.steps, longest=round(self.longest, 3))
        return StepProgress(
            steps=self.steps,
            current=current or "step",
            stalled_for=round(max(time.monotonic() - since, 0.0), 3),
            longest=round(self.longest, 3),
        )
