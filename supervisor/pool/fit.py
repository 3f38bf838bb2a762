""" "Will it fit?": what a load of a model would do to the memory budget, asked
before loading it.

:func:`assess` asks the same eviction decision the placement takes when the model
starts (:func:`.eviction.decide` on the placement's own records, spares stopped
first as :meth:`.placement.Placement.make_room` does), without changing anything.
So ``GET /v1/models/{id}/fit`` names exactly the idle models a load would stop, or
the busy and pinned ones it would wait for, or says the model can never fit; and
what ``force`` would do instead (:meth:`.placement.Placement.force_room`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mlx_gateway.supervisor.pool.handle import WorkerHandle
from mlx_gateway.supervisor.pool.memory import format_size
from mlx_gateway.supervisor.pool.placement import Placement
from mlx_gateway.supervisor.pool.state import WorkerState

VERDICTS = ("resident", "fits", "evicts", "waits", "too_big")
"""``resident``: loaded (or starting) already; ``fits``: starts without evicting;
``evicts``: starts once the listed idle models are stopped; ``waits``: busy or
pinned models hold the memory (the load waits up to ``queue_timeout`` for them, a
drain after ``min_resident_seconds``, then 503); ``too_big``: more than the whole
budget (503 ``insufficient_memory`` at once)."""


@dataclass(frozen=True)
class Blocker:
    name: str
    need: int
    state: str
    inflight: int
    pinned: bool


@dataclass
class Fit:
    model: str
    verdict: str
    need: int
    need_source: str
    budget: int
    free: int
    """Budget left beside the other resident models (and spare workers) now."""
    evict: list[str] = field(default_factory=list)
    """Idle models a load stops, least recently used first."""
    blockers: list[Blocker] = field(default_factory=list)
    force_evict: list[str] = field(default_factory=list)
    """What a forced load stops: every idle model the decision would give up."""
    force_over_budget: int = 0
    """Bytes a forced load would run over the budget (0 when within)."""
    stops_spares: bool = False
    need_parts: dict[str, int] = field(default_factory=dict)
    """An estimate's parts (weights, runtime, kv, activations, vision…); empty for a
    measured or configured need."""

    @property
    def fits(self) -> bool:
        return self.verdict in ("resident", "fits", "evicts")

    def message(self) -> str:
        need = f"'{self.model}' needs about {format_size(self.need)} ({self.need_source})"
        budget = f"memory_budget {format_size(self.budget)}"
        match self.verdict:
            case "resident":
                return f"{need}; it is loaded already"
            case "fits":
                return f"{need}; {format_size(max(0, self.free))} of the {budget} are free"
            case "evicts":
                return f"{need}; loading it stops the idle models {', '.join(self.evict)}"
            case "too_big":
                return (
                    f"{need}, more than the whole {budget}: a load is refused "
                    "(503 insufficient_memory) unless forced"
                )
        held = ", ".join(
            f"{b.name} ({format_size(b.need)}, "
            + ("pinned" if b.pinned else f"{b.inflight} in flight")
            + ")"
            for b in self.blockers
        )
        return (
            f"{need}; {format_size(max(0, self.free))} of the {budget} are free and busy "
            f"or pinned models hold the rest: {held}. A load waits for them (queue_timeout), "
            "or load with force"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "object": "model.fit",
            "model": self.model,
            "fits": self.fits,
            "verdict": self.verdict,
            "need": self.need,
            "need_source": self.need_source,
            "need_parts": self.need_parts,
            "budget": self.budget,
            "free": self.free,
            "evict": self.evict,
            "blockers": [b.__dict__ for b in self.blockers],
            "stops_spares": self.stops_spares,
            "force": {"evict": self.force_evict, "over_budget": self.force_over_budget},
            "message": self.message(),
        }


def assess(placement: Placement, handle: WorkerHandle) -> Fit:
    """What loading ``handle`` now would do (changes nothing)."""
    need = placement.need(handle)
    budget = placement.budget
    free = budget - placement.used(excluding=handle)
    fit = Fit(handle.name, "fits", need.bytes, need.source, budget, free)
    fit.need_parts = dict(need.parts)
    if placement.is_resident(handle):
        fit.verdict = "resident"
        return fit
    chosen, others, fit.stops_spares = placement.decision(handle)
    names = {key: h.name for key, h in others.items()}
    fit.force_evict = [names[key] for key in chosen.evict]
    freed = sum(placement.need_of(others[key]) for key in chosen.evict)
    spares = placement.spares.nbytes() if placement.spares is not None else 0
    after = free + freed + (spares if fit.stops_spares else 0)
    fit.force_over_budget = max(0, need.bytes - after)
    if placement.never_fits(handle):
        fit.verdict = "too_big"
    elif not chosen.fits:
        fit.verdict = "waits"
        fit.blockers = [
            Blocker(
                h.name,
                placement.need_of(h),
                "starting" if h.state is WorkerState.STOPPED else h.state.public,
                h.inflight,
                h.pinned,
            )
            for h in (others[key] for key in chosen.blockers)
        ]
    elif chosen.evict:
        fit.verdict = "evicts"
        fit.evict = list(fit.force_evict)
    return fit
