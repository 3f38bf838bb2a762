"""The lifecycle part of a model's handle: its :class:`~.state.WorkerState`, since
when it has been ready, and a wake-up for whoever waits on a change.

Only the handle's owner task changes the state (:meth:`Lifecycle.enter`, through
:func:`~.state.check_transition`); admission waits on :meth:`Lifecycle.changed`.
"""

from __future__ import annotations

import asyncio
import logging
import time

from mlx_gateway.supervisor.pool.state import WorkerState, check_transition

log = logging.getLogger("mlx_gateway.worker")


class Lifecycle:
    """One model's state, as its owner task moves it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.state = WorkerState.STOPPED
        self.ready_since: float | None = None  # time.monotonic() it became READY
        self._changed = asyncio.Event()

    @property
    def ready(self) -> bool:
        return self.state is WorkerState.READY

    @property
    def down(self) -> bool:
        """No process and none coming (STOPPED or FAILED)."""
        return self.state in (WorkerState.STOPPED, WorkerState.FAILED)

    def enter(self, new: WorkerState) -> WorkerState:
        """Move to ``new`` (raises :class:`~.state.InvalidTransition` when not
        allowed) and wake the waiters; returns the state it left."""
        old = self.state
        check_transition(old, new)
        self.state = new
        log.info("[%s] %s → %s", self.name, old.public, new.public)
        if new is WorkerState.READY:
            self.ready_since = time.monotonic()
        elif new in (WorkerState.STOPPED, WorkerState.FAILED):
            self.ready_since = None
        self._changed.set()
        self._changed = asyncio.Event()
        return old

    async def changed(self) -> None:
        """Return at the next change of state."""
        await self._changed.wait()
