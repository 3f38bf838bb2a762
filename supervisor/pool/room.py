"""What a worker handle needs of the memory placement, as a Protocol.

:class:`~.handle.WorkerHandle` talks to the placement only through :class:`Room`,
so the handle does not import the placement (which imports the handle), and the
placement keeps its own bookkeeping (who holds a reservation, who drains) instead
of writing fields of handles it does not own.
"""

from __future__ import annotations

from typing import Any, Protocol

from mlx_gateway.supervisor.errors import ModelUnavailable
from mlx_gateway.supervisor.pool.memory import Need


class Room(Protocol):
    async def make_room(self, handle: Any, deadline: float) -> None:
        """Return once ``handle`` may start (reserving its need); raise
        :class:`ModelUnavailable` when it never fits or ``deadline`` passes."""

    def blocked(self, handle: Any) -> ModelUnavailable:
        """The 503 for a request that waited in vain for room for ``handle``."""

    def notify(self) -> None:
        """Something changed (a state, a request ended): waiters decide again."""

    def is_reserved(self, handle: Any) -> bool:
        """``handle`` was granted room and is about to start."""

    def is_draining(self, handle: Any) -> bool:
        """``handle`` takes no new requests until it stopped (another model waits)."""

    def released(self, handle: Any) -> None:
        """``handle``'s worker stopped: its reservation and drain end."""

    def measured(self, handle: Any, need: int) -> int:
        """``handle``'s worker reported ``need`` bytes; returns its measured need
        (the largest reported, remembered across restarts)."""

    def need(self, handle: Any) -> Need:
        """``handle``'s memory need and its source (measured, configured, estimated)."""

    def kv_budget(self, handle: Any) -> int | None:
        """Bytes of KV cache the budget can ever give ``handle``'s requests: the
        budget minus the model's weights, runtime and activations (``None``: unknown)."""
