"""Which workers may be resident together: the memory budget, groups, eviction.

One :class:`Placement` serves the whole registry. Starting a model goes through
:meth:`Placement.make_room`, one start decision at a time (an asyncio lock), so two
models cannot both claim the last free gigabytes. A model that does not fit evicts
idle workers, least recently used first; busy and pinned workers are never
evicted: the newcomer waits for them (bounded by its queue timeout). To keep one
model's steady traffic from starving another forever, a busy blocker that has been
resident for ``min_resident_seconds`` is *drained*: it finishes what it has but
takes no new requests until it was evicted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from mlx_gateway.supervisor.config import ConfigError, GatewayConfig, ServerConfig
from mlx_gateway.supervisor.config.sizes import budget_bytes
from mlx_gateway.supervisor.errors import ModelUnavailable
from mlx_gateway.supervisor.pool.handle import WorkerHandle
from mlx_gateway.supervisor.pool.memory import estimate_need, format_size
from mlx_gateway.supervisor.pool.state import WorkerState

log = logging.getLogger("mlx_gateway.placement")

RESIDENT = frozenset({WorkerState.STARTING, WorkerState.READY, WorkerState.STOPPING})


def is_resident(handle: WorkerHandle) -> bool:
    return handle.reserved or handle.state in RESIDENT


def need_of(handle: WorkerHandle) -> int:
    """Measured once the worker reported, else the estimate (0 when unknown)."""
    if handle.measured_bytes > 0:
        return handle.measured_bytes
    if handle.estimated_bytes is None:
        handle.estimated_bytes = estimate_need(handle.config)
    return handle.estimated_bytes or 0


def evictable(handle: WorkerHandle) -> bool:
    return handle.state is WorkerState.READY and handle.idle and not handle.config.pinned


@dataclass
class Plan:
    evict: list[WorkerHandle] = field(default_factory=list)
    blockers: list[WorkerHandle] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return not self.blockers


class Placement:
    def __init__(self, handles: Sequence[WorkerHandle], server: ServerConfig) -> None:
        self.handles = handles
        self.server = server
        self.budget = budget_bytes(server.memory_budget)
        self._lock = asyncio.Lock()
        self._changed = asyncio.Event()

    def notify(self) -> None:
        """Something changed (a state, a request ended): waiters re-plan."""
        self._changed.set()
        self._changed = asyncio.Event()

    def used(self, excluding: WorkerHandle | None = None) -> int:
        return sum(need_of(h) for h in self.handles if h is not excluding and is_resident(h))

    def never_fits(self, handle: WorkerHandle) -> str | None:
        need = need_of(handle)
        if need > self.budget:
            return (
                f"model '{handle.name}' needs about {format_size(need)}, more than the whole "
                f"memory_budget of {format_size(self.budget)}; raise server.memory_budget or "
                "serve a smaller (quantized) model"
            )
        return None

    def plan(self, handle: WorkerHandle) -> Plan:
        """What must go for ``handle`` to start: idle workers to evict (LRU first), or
        the busy ones that stand in the way."""
        plan = Plan()
        others = [h for h in self.handles if h is not handle and is_resident(h)]
        group = handle.config.group
        for other in others:
            if group is not None and other.config.group == group:
                (plan.evict if evictable(other) else plan.blockers).append(other)
        free = self.budget - sum(need_of(h) for h in others if h not in plan.evict)
        need = need_of(handle)
        if free < need:
            idle = sorted(
                (h for h in others if h not in plan.evict and evictable(h)),
                key=lambda h: h.last_used or 0.0,
            )
            for victim in idle:
                if free >= need:
                    break
                plan.evict.append(victim)
                free += need_of(victim)
            if free < need:
                plan.blockers += [h for h in others if h not in plan.evict and h not in idle]
        return plan

    async def make_room(self, handle: WorkerHandle, deadline: float) -> None:
        """Return once ``handle`` may start (it is then *reserved*); raise
        :class:`ModelUnavailable` when it can never fit or ``deadline`` passes."""
        if reason := self.never_fits(handle):
            raise ModelUnavailable(reason, code="insufficient_memory")
        while True:
            changed = self._changed
            async with self._lock:
                if is_resident(handle):
                    return
                plan = self.plan(handle)
                if plan.fits:
                    if await self._evict(plan.evict, handle):
                        handle.reserved = True
                        return
                    continue  # a request reached a victim meanwhile: plan again
                self._drain_long_residents(plan.blockers)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self.blocked(handle)
            # Wake up on any change, or when a blocker becomes old enough to drain.
            wait = min(remaining, self._until_drainable(plan.blockers))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), wait)

    async def _evict(self, victims: list[WorkerHandle], newcomer: WorkerHandle) -> bool:
        for victim in victims:
            log.info(
                "[%s] evicting (idle, %s) to make room for '%s'",
                victim.name,
                format_size(need_of(victim)),
                newcomer.name,
            )
        results = await asyncio.gather(
            *(v.stop(f"evicted for '{newcomer.name}'", if_idle=True) for v in victims)
        )
        del results
        stopped = [v for v in victims if v.state is WorkerState.STOPPED]
        for victim in stopped:
            victim.evictions += 1
        return len(stopped) == len(victims)

    def _until_drainable(self, blockers: list[WorkerHandle]) -> float:
        now = time.monotonic()
        waits = [
            (b.ready_since or now) + self.server.min_resident_seconds - now
            for b in blockers
            if not b.draining and not b.config.pinned and b.state is WorkerState.READY
        ]
        return max(0.05, min(waits)) if waits else float("inf")

    def _drain_long_residents(self, blockers: list[WorkerHandle]) -> None:
        now = time.monotonic()
        for blocker in blockers:
            resident_for = now - (blocker.ready_since or now)
            if (
                not blocker.draining
                and not blocker.config.pinned
                and blocker.state is WorkerState.READY
                and resident_for >= self.server.min_resident_seconds
            ):
                log.info(
                    "[%s] resident %.0f s and another model waits: draining",
                    blocker.name,
                    resident_for,
                )
                blocker.draining = True

    def blocked(self, handle: WorkerHandle) -> ModelUnavailable:
        """The 503 for a request that waited in vain for room for ``handle``."""
        plan = self.plan(handle)
        busy = ", ".join(
            f"'{h.name}' ({format_size(need_of(h))}, {h.inflight} in flight"
            + (", pinned" if h.config.pinned else "")
            + ")"
            for h in plan.blockers
        )
        return ModelUnavailable(
            f"model '{handle.name}' (about {format_size(need_of(handle))}) could not be "
            f"started within its queue_timeout: the memory_budget of "
            f"{format_size(self.budget)} is held by busy models: {busy or 'none'}",
            code="no_capacity",
        )


def check_fits(config: GatewayConfig) -> None:
    """At launch: refuse a model whose known need exceeds the whole budget."""
    budget = budget_bytes(config.server.memory_budget)
    for i, model in enumerate(config.models):
        need = estimate_need(model)
        if need is not None and need > budget:
            raise ConfigError(
                f"models[{i}] ('{model.served_model_name}') needs about {format_size(need)} "
                f"(weights on disk and KV cache for {model.max_concurrency} full contexts), "
                f"more than server.memory_budget ({format_size(budget)}); raise the budget, "
                "lower context_length or max_concurrency, or set memory_estimate",
                key=f"models[{i}]",
                model_index=i,
            )
