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

from mlx_gateway.protocol.messages import Limits
from mlx_gateway.supervisor.config import GatewayConfig, ServerConfig
from mlx_gateway.supervisor.errors import ModelUnavailable
from mlx_gateway.supervisor.pool.budget import resolve_budget
from mlx_gateway.supervisor.pool.eviction import (
    Decision,
    Newcomer,
    Resident,
    decide,
    never_fits,
)
from mlx_gateway.supervisor.pool.handle import WorkerHandle
from mlx_gateway.supervisor.pool.memory import KV_KINDS, Need, estimate, format_size
from mlx_gateway.supervisor.pool.needs import NeedBook, key_of
from mlx_gateway.supervisor.pool.spares import SparePool
from mlx_gateway.supervisor.pool.state import WorkerState

log = logging.getLogger("mlx_gateway.placement")

RESIDENT = frozenset({WorkerState.STARTING, WorkerState.READY, WorkerState.STOPPING})


@dataclass
class Plan:
    evict: list[WorkerHandle] = field(default_factory=list)
    blockers: list[WorkerHandle] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return not self.blockers


class Placement:
    """The memory budget of one registry (implements :class:`~.room.Room`)."""

    def __init__(
        self,
        handles: Sequence[WorkerHandle],
        server: ServerConfig,
        needs: NeedBook | None = None,
    ) -> None:
        self.handles = handles
        self.server = server
        self.budget = resolve_budget(server)
        self.needs = needs if needs is not None else NeedBook()
        self._reserved: set[WorkerHandle] = set()
        self._draining: set[WorkerHandle] = set()
        self._waiting: dict[WorkerHandle, int] = {}
        """Models whose start waits in :meth:`make_room`, and how many starts of each."""
        self._estimates: dict[str, Need] = {}
        self._limits_sent: dict[WorkerHandle, int] = {}
        self._lock = asyncio.Lock()
        self._changed = asyncio.Event()
        self.spares: SparePool | None = None
        """The spare workers (``server.spare_workers``): their memory counts as used,
        and they go before any model is evicted."""

    def attach_spares(self, spares: SparePool) -> None:
        self.spares = spares
        spares.fits = lambda nbytes: self.used() + nbytes <= self.budget

    # ------------------------------------------------------------ Room

    def notify(self) -> None:
        """Something changed (a state, a request ended): waiters re-plan, and the
        running language models hear what the budget leaves them now."""
        self._changed.set()
        self._changed = asyncio.Event()
        self._send_limits()

    def waiting_for_room(self) -> list[str]:
        """The models whose start waits for room now (their requests or an admin load)."""
        return sorted(handle.name for handle in self._waiting)

    def is_reserved(self, handle: WorkerHandle) -> bool:
        return handle in self._reserved

    def is_draining(self, handle: WorkerHandle) -> bool:
        return handle in self._draining

    def released(self, handle: WorkerHandle) -> None:
        self._reserved.discard(handle)
        self._draining.discard(handle)
        self._limits_sent.pop(handle, None)

    def measured(self, handle: WorkerHandle, need: int) -> int:
        return self.needs.record(handle.config, need)

    # ------------------------------------------------------------ needs

    def need(self, handle: WorkerHandle) -> Need:
        """Measured (this run or an earlier one) when known, else the estimate."""
        if handle.measured_bytes > 0:
            return Need(handle.measured_bytes, "measured")
        if remembered := self.needs.remembered(handle.config):
            return Need(remembered, "measured")
        return self._estimate(handle)

    def _estimate(self, handle: WorkerHandle) -> Need:
        key = f"{handle.name}|{key_of(handle.config)}|{handle.config.memory_estimate}"
        if key not in self._estimates or self._estimates[key].source == "unknown":
            self._estimates[key] = estimate(handle.config)
        return self._estimates[key]

    def _own_without_kv(self, handle: WorkerHandle) -> int | None:
        """The model's need beside its requests' KV cache (``None``: unknown)."""
        estimated = self._estimate(handle)
        if estimated.source == "estimated":
            return estimated.bytes - estimated.parts.get("kv", 0)
        if estimated.source == "configured":
            return estimated.bytes
        return None

    def kv_budget(self, handle: WorkerHandle) -> int | None:
        own = self._own_without_kv(handle)
        return None if own is None else max(0, self.budget - own)

    def kv_free(self, handle: WorkerHandle) -> int | None:
        """What the budget leaves ``handle``'s requests now: the budget minus the
        other resident models' needs and its own weights and runtime."""
        own = self._own_without_kv(handle)
        if own is None:
            return None
        return max(0, self.budget - self.used(excluding=handle) - own)

    def _send_limits(self) -> None:
        for handle in self.handles:
            if handle.state is not WorkerState.READY or handle.config.worker_kind not in KV_KINDS:
                continue
            free = self.kv_free(handle)
            if free is not None and self._limits_sent.get(handle) != free:
                self._limits_sent[handle] = free
                handle.post(Limits(kv_free=free))

    def need_of(self, handle: WorkerHandle) -> int:
        return self.need(handle).bytes

    def is_resident(self, handle: WorkerHandle) -> bool:
        return handle in self._reserved or handle.state in RESIDENT

    def used(self, excluding: WorkerHandle | None = None) -> int:
        spares = self.spares.nbytes() if self.spares is not None else 0
        return spares + sum(
            self.need_of(h) for h in self.handles if h is not excluding and self.is_resident(h)
        )

    def summary(self) -> dict[str, int]:
        """The budget as /health, /v1/models, /metrics and ``status`` show it:
        ``reserved`` is the sum of the needs of the models resident (or about to
        start), ``free`` what is left of the budget (negative when over it)."""
        reserved = self.used()
        return {"budget": self.budget, "reserved": reserved, "free": self.budget - reserved}

    def never_fits(self, handle: WorkerHandle) -> str | None:
        need = self.need_of(handle)
        if never_fits(Newcomer(handle.name, need), self.budget):
            return (
                f"model '{handle.name}' needs about {format_size(need)}, more than the whole "
                f"memory_budget of {format_size(self.budget)}; raise server.memory_budget or "
                "serve a smaller (quantized) model"
            )
        return None

    def resident_record(self, handle: WorkerHandle) -> Resident:
        return Resident(
            name=str(id(handle)),
            need=self.need_of(handle),
            idle=handle.state is WorkerState.READY and handle.idle,
            pinned=handle.pinned,
            group=handle.config.group,
            last_used=handle.last_used or 0.0,
        )

    def plan(self, handle: WorkerHandle) -> Plan:
        """What must go for ``handle`` to start: idle workers to evict (LRU first), or
        the busy ones that stand in the way (see :func:`.eviction.decide`)."""
        others = {str(id(h)): h for h in self.handles if h is not handle and self.is_resident(h)}
        newcomer = Newcomer(str(id(handle)), self.need_of(handle), handle.config.group)
        spares = self.spares.nbytes() if self.spares is not None else 0
        decision: Decision = decide(
            [self.resident_record(h) for h in others.values()], newcomer, self.budget - spares
        )
        return Plan(
            evict=[others[name] for name in decision.evict],
            blockers=[others[name] for name in decision.blockers],
        )

    async def make_room(self, handle: WorkerHandle, deadline: float) -> None:
        """Return once ``handle`` may start (it is then *reserved*); raise
        :class:`ModelUnavailable` when it can never fit or ``deadline`` passes."""
        if not self.is_resident(handle) and (reason := self.never_fits(handle)):
            raise ModelUnavailable(reason, code="insufficient_memory")
        while True:
            changed = self._changed
            async with self._lock:
                if self.is_resident(handle):
                    return
                plan = self.plan(handle)
                if (plan.evict or not plan.fits) and self.spares and self.spares.nbytes():
                    # Spares are cheap to make again: they go before any model.
                    await self.spares.discard_all(f"room for '{handle.name}'")
                    plan = self.plan(handle)
                if plan.fits:
                    if await self._evict(plan.evict, handle):
                        self._reserved.add(handle)
                        return
                    continue  # a request reached a victim meanwhile: plan again
                self._drain_long_residents(plan.blockers)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self.blocked(handle)
            # Wake up on any change, or when a blocker becomes old enough to drain.
            wait = min(remaining, self._until_drainable(plan.blockers))
            self._waiting[handle] = self._waiting.get(handle, 0) + 1
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), wait)
            finally:
                if self._waiting[handle] > 1:
                    self._waiting[handle] -= 1
                else:
                    del self._waiting[handle]

    def decision(self, handle: WorkerHandle) -> tuple[Decision, dict[str, WorkerHandle], bool]:
        """The eviction decision for starting ``handle`` now, the resident handles by
        record name, and whether the spare workers go first (as :meth:`make_room`
        discards them when the newcomer would evict or wait). Changes nothing."""
        others = {str(id(h)): h for h in self.handles if h is not handle and self.is_resident(h)}
        records = [self.resident_record(h) for h in others.values()]
        newcomer = Newcomer(str(id(handle)), self.need_of(handle), handle.config.group)
        spares = self.spares.nbytes() if self.spares is not None else 0
        chosen = decide(records, newcomer, self.budget - spares)
        if spares and (chosen.evict or not chosen.fits):
            return decide(records, newcomer, self.budget), others, True
        return chosen, others, False

    async def force_room(self, handle: WorkerHandle) -> list[WorkerHandle]:
        """An admin ``load`` with ``force``: reserve room for ``handle`` past the
        budget's refusal. The idle models the decision gives up are stopped (as
        ``GET …/fit`` lists them under ``force``); busy and pinned ones stay, and the
        model runs over the budget when it must. Returns the models stopped."""
        async with self._lock:
            if self.is_resident(handle):
                return []
            chosen, others, stops_spares = self.decision(handle)
            if stops_spares and self.spares is not None:
                await self.spares.discard_all(f"room for '{handle.name}' (forced)")
            victims = [others[key] for key in chosen.evict]
            over = self.need_of(handle) - (
                self.budget - self.used(excluding=handle) + sum(map(self.need_of, victims))
            )
            log.warning(
                "[%s] loading past the memory budget by an admin request (force): needs %s, "
                "%s; stopping idle %s",
                handle.name,
                format_size(self.need_of(handle)),
                f"over the budget by {format_size(over)}" if over > 0 else "within the budget",
                ", ".join(f"'{v.name}'" for v in victims) or "none",
            )
            await self._evict(victims, handle)
            self._reserved.add(handle)
            return [v for v in victims if v.state is WorkerState.STOPPED]

    async def _evict(self, victims: list[WorkerHandle], newcomer: WorkerHandle) -> bool:
        for victim in victims:
            log.info(
                "[%s] evicting (idle, %s) to make room for '%s'",
                victim.name,
                format_size(self.need_of(victim)),
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
            if b not in self._draining and not b.pinned and b.state is WorkerState.READY
        ]
        return max(0.05, min(waits)) if waits else float("inf")

    def _drain_long_residents(self, blockers: list[WorkerHandle]) -> None:
        now = time.monotonic()
        for blocker in blockers:
            resident_for = now - (blocker.ready_since or now)
            if (
                blocker not in self._draining
                and not blocker.pinned
                and blocker.state is WorkerState.READY
                and resident_for >= self.server.min_resident_seconds
            ):
                log.info(
                    "[%s] resident %.0f s and another model waits: draining",
                    blocker.name,
                    resident_for,
                )
                self._draining.add(blocker)

    def blocked(self, handle: WorkerHandle) -> ModelUnavailable:
        """The 503 for a request that waited in vain for room for ``handle``."""
        plan = self.plan(handle)
        busy = ", ".join(
            f"'{h.name}' ({format_size(self.need_of(h))}, {h.inflight} in flight"
            + (", pinned" if h.pinned else "")
            + ")"
            for h in plan.blockers
        )
        return ModelUnavailable(
            f"model '{handle.name}' (about {format_size(self.need_of(handle))}) could not be "
            f"started within its queue_timeout: the memory_budget of "
            f"{format_size(self.budget)} is held by busy models: {busy or 'none'}",
            code="no_capacity",
        )


def refusals(config: GatewayConfig, needs: NeedBook | None = None) -> list[str]:
    """The models that can never start under ``config``'s budget (their need, measured
    in an earlier run or estimated, exceeds the whole budget), one message each."""
    budget = resolve_budget(config.server)
    book = needs if needs is not None else NeedBook()
    out = []
    for i, model in enumerate(config.models):
        remembered = book.remembered(model)
        need = Need(remembered, "measured") if remembered else estimate(model)
        if need.bytes > budget:
            why = {
                "measured": "as its worker measured it",
                "configured": "its memory_estimate",
            }.get(need.source, _estimate_words(need))
            out.append(
                f"models[{i}] ('{model.served_model_name}') needs about "
                f"{format_size(need.bytes)} ({why}), more than server.memory_budget "
                f"({format_size(budget)}); it will answer 503 insufficient_memory. Raise the "
                "budget, serve a smaller (quantized) model, or lower its memory_estimate"
            )
    return out


def _estimate_words(need: Need) -> str:
    return ", ".join(f"{name} {format_size(size)}" for name, size in need.parts.items() if size)


def check_fits(config: GatewayConfig, needs: NeedBook | None = None) -> None:
    """At launch and reload: warn about each model that can never start. The others
    are served: one model too big for this machine does not stop the gateway."""
    for message in refusals(config, needs):
        log.warning("%s", message)
