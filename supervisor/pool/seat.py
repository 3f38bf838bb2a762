"""The placement part of a model's handle: its seat in the memory budget.

The registry gives each handle the :class:`~.room.Room` of its placement (none in a
bare handle, as some tests build); the seat asks it for room before a start, tells
it what the workers measured and when something changed, and keeps the largest need
this model's workers reported (kept after a stop). The room knows the model by its
handle (``owner``), which it reads through the handle's public interface.
"""

from __future__ import annotations

from mlx_gateway.protocol.messages import Memory
from mlx_gateway.supervisor.config import ModelConfig
from mlx_gateway.supervisor.errors import ModelUnavailable
from mlx_gateway.supervisor.pool.memory import Need, local_ranks, measured_need
from mlx_gateway.supervisor.pool.room import Room


class Seat:
    """One model's place in the memory budget (see module doc)."""

    def __init__(self, owner: object, config: ModelConfig) -> None:
        self.owner = owner
        self.config = config
        self.room: Room | None = None  # set by the registry
        self.measured_bytes = 0  # the most its workers reported (kept after a stop)

    @property
    def reserved(self) -> bool:
        """The placement granted it room; it is about to start."""
        return self.room is not None and self.room.is_reserved(self.owner)

    @property
    def draining(self) -> bool:
        """It takes no new requests until stopped: another model waits for room."""
        return self.room is not None and self.room.is_draining(self.owner)

    def notify(self) -> None:
        """Something changed (a state, a request ended): waiters for room decide again."""
        if self.room is not None:
            self.room.notify()

    def release(self) -> None:
        """Its reservation and drain end (it stopped, or will not start now)."""
        if self.room is not None:
            self.room.released(self.owner)

    async def make_room(self, deadline: float) -> None:
        if self.room is not None:
            await self.room.make_room(self.owner, deadline)

    def blocked(self) -> ModelUnavailable | None:
        """The 503 naming the busy models, when a placement held the start back."""
        return self.room.blocked(self.owner) if self.room is not None else None

    def kv_budget(self) -> int | None:
        return self.room.kv_budget(self.owner) if self.room is not None else None

    def measured(self, memory: Memory) -> None:
        """A worker reported its memory: remember its need."""
        # rank 0 of a sharded model measures itself: its peers on this machine hold as much
        need = measured_need(memory) * local_ranks(self.config)
        if need <= 0:
            return
        if self.room is not None:
            need = self.room.measured(self.owner, need)
        self.measured_bytes = max(self.measured_bytes, need)

    def need(self) -> Need:
        if self.room is not None:
            return self.room.need(self.owner)
        if self.measured_bytes:
            return Need(self.measured_bytes, "measured")
        return Need(0, "unknown")
