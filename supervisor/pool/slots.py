"""A model's ``max_concurrency`` slots, handed to interactive requests first.

A request waits here for one of the model's slots (see :mod:`.admission`). When a
slot frees, it goes to the longest-waiting interactive request; a ``batch``
request (an app's background work, see :class:`~...http.caller.Caller`) gets one
only while no interactive request waits. Within a priority the order is arrival.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

from mlx_gateway.protocol.messages import BATCH, Priority


class Slots:
    """``count`` slots; :meth:`acquire` waits for one, :meth:`release` hands it on."""

    def __init__(self, count: int) -> None:
        self._free = count
        self._waiting: dict[bool, deque[asyncio.Future[None]]] = {False: deque(), True: deque()}
        """Waiters by whether they are batch."""

    def waiting(self, priority: Priority) -> int:
        """How many requests of ``priority`` wait for a slot."""
        return sum(not f.done() for f in self._waiting[priority == BATCH])

    async def acquire(self, priority: Priority) -> None:
        """Take a slot, waiting behind every interactive request (and, for a batch
        request, behind the batch requests that came first)."""
        batch = priority == BATCH
        if self._free > 0 and not self._queued(batch):
            self._free -= 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[batch].append(future)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release()  # handed over as the waiter was cancelled: pass it on
            else:
                with contextlib.suppress(ValueError):  # release() may have dropped it
                    self._waiting[batch].remove(future)
            raise

    def _queued(self, batch: bool) -> bool:
        """Whether a request that may not be passed waits (for a batch request, any)."""
        if self.waiting("interactive"):
            return True
        return batch and bool(self.waiting(BATCH))

    def release(self) -> None:
        """Free a slot: the first interactive waiter takes it, else the first batch one."""
        for batch in (False, True):
            waiters = self._waiting[batch]
            while waiters:
                future = waiters.popleft()
                if not future.done():
                    future.set_result(None)
                    return
        self._free += 1
