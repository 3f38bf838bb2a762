"""The eviction decision, as a pure function of plain records.

Given the models resident now, the budget and a newcomer, :func:`decide` says
which idle models to stop (least recently used first) so the newcomer fits, or
which ones stand in the way (busy, starting or pinned). No asyncio, no handles:
:class:`~.placement.Placement` turns its handles into :class:`Resident` records,
asks, and carries the decision out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Resident:
    """A model that holds (or is about to hold) memory."""

    name: str
    need: int
    idle: bool
    """Loaded, nothing in flight and nobody waiting: it could be stopped now."""
    pinned: bool = False
    group: str | None = None
    last_used: float = 0.0
    """Monotonic time of its last request's end (0: never used)."""

    @property
    def evictable(self) -> bool:
        return self.idle and not self.pinned


@dataclass(frozen=True)
class Newcomer:
    name: str
    need: int
    group: str | None = None


@dataclass
class Decision:
    evict: list[str] = field(default_factory=list)
    """Idle models to stop, in this order."""
    blockers: list[str] = field(default_factory=list)
    """Models that must finish (or be drained) before the newcomer can start."""
    free_after: int = 0
    """Budget left for the newcomer once ``evict`` is gone."""

    @property
    def fits(self) -> bool:
        return not self.blockers


def never_fits(newcomer: Newcomer, budget: int) -> bool:
    """More than the whole budget: no eviction can help."""
    return newcomer.need > budget


def decide(residents: Sequence[Resident], newcomer: Newcomer, budget: int) -> Decision:
    """What must go for ``newcomer`` to start.

    Members of the newcomer's group always go (they never run together); then
    idle, unpinned models go least recently used first until the newcomer fits.
    When even that is not enough, the busy, starting and pinned models are the
    blockers; the caller evicts nothing then (``fits`` is false) and waits."""
    others = [r for r in residents if r.name != newcomer.name]
    decision = Decision()
    if newcomer.group is not None:
        for other in others:
            if other.group == newcomer.group:
                target = decision.evict if other.evictable else decision.blockers
                target.append(other.name)
    evicting = set(decision.evict)
    free = budget - sum(r.need for r in others if r.name not in evicting)
    if free < newcomer.need:
        idle = sorted(
            (r for r in others if r.name not in evicting and r.evictable),
            key=lambda r: r.last_used,
        )
        for victim in idle:
            if free >= newcomer.need:
                break
            decision.evict.append(victim.name)
            evicting.add(victim.name)
            free += victim.need
        if free < newcomer.need:
            decision.blockers += [
                r.name
                for r in others
                if r.name not in evicting and not r.evictable and r.name not in decision.blockers
            ]
    decision.free_after = free
    return decision
