"""A model sharded over the ranks of an ``mlx.launch`` group: rank 0 leads, the
others follow it step by step.

Rank 0 is an ordinary worker (it speaks the protocol to the gateway); its backend
is wrapped in :class:`Leader`, which sends every call the serve loop makes that
changes the backend's state (submit, cancel, cancel_all, fail_active, the
gateway's KV limits, step, and the final exit) to every other rank just before
making it: a broadcast, as ``mlx_lm.server`` shares its requests (an ``all_sum``
of the size, then of the bytes). The other ranks run :func:`follow`: no sockets;
they load their shard, then replay each call on their own backend, so each rank's
batch holds the same requests in the same order and every collective operation
inside the model's forward pass meets its peers on the other ranks.

While idle, rank 0 shares an ``idle`` call every :data:`IDLE_TICK` seconds and the
others sleep through most of the tick instead of waiting inside a collective.

What a follower emits is dropped: rank 0 answers the gateway. Decisions that
depend on time (shutdown grace, when to stop) are rank 0's alone: the followers
only ever see their outcome.
"""

from __future__ import annotations

import logging
import os
import pickle
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mlx_gateway.protocol.messages import Limits, ModelFacts, Request
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.workers.runtime.contract import (
    EXIT_CRASH,
    EXIT_LOAD_FAILED,
    EXIT_OK,
    Backend,
    Emit,
    LoadError,
    drop,
)
from mlx_gateway.workers.runtime.extras import create_backend

if TYPE_CHECKING:
    import mlx.core as mx

log = logging.getLogger(__name__)

Call = tuple[Any, ...]
"""``("submit", request, payloads)``, ``("cancel", id)``, ``("cancel_all",)``,
``("fail_active", message)``, ``("set_limits", limits)``, ``("step",)``,
``("idle",)`` or ``("exit",)``."""

IDLE_TICK = 0.1
"""Seconds rank 0 waits for a request, while idle, before telling the others so."""
IDLE_SLEEP = 0.9
"""The part of a tick the other ranks sleep after an idle share. Waiting in a
collective costs CPU (MLX's ring polls its sockets: about half a core), so an idle
group would burn that on every rank but 0; sleeping costs a request that arrives
while idle at most ``IDLE_TICK * IDLE_SLEEP`` seconds more before its first step."""


def rank() -> int:
    """This process's rank, as ``mlx.launch`` set it (0 outside a group)."""
    return int(os.environ.get("MLX_RANK", "0") or 0)


def _share(calls: list[Call] | None, backend: Backend) -> list[Call]:
    """Rank 0 passes its calls; every other rank passes ``None`` and gets them.

    The sums run on the backend's generation stream (when it has one of its own),
    behind whatever a step left queued there (mlx-lm evaluates the next token
    asynchronously, collectives included), so every rank's collectives come in
    the same order."""
    import mlx.core as mx
    import numpy as np

    stream = backend.generation_stream()
    if stream is not None:
        mx.synchronize(stream)

    def total(x: Any) -> Any:
        return mx.distributed.all_sum(x, stream=stream)

    if calls is not None:
        data = np.frombuffer(pickle.dumps(calls, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
        mx.eval(total(mx.array(data.size, dtype=mx.int64)))
        mx.eval(total(mx.array(data)))
        return calls
    size = int(total(mx.array(0, dtype=mx.int64)).item())
    shared = total(mx.zeros((size,), dtype=mx.uint8))
    # Bytes from rank 0 of this group, over the ring's own links (which MLX does not
    # authenticate anyway: keep them on a private network, docs/cluster.md).
    return list(pickle.loads(bytes(np.array(shared, copy=False))))


class Leader(Backend):
    """Rank 0's backend: the real one, each state change sent to the other ranks
    just before it is made here (``submit`` may already run the model, e.g. a
    prompt's prefill, so the others must make the same call at the same point)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._closed = False

    def load(self, spec: WorkerSpec, emit: Emit) -> ModelFacts:
        facts = self.backend.load(spec, emit)
        facts.extra["distributed_ranks"] = str(_group_size())
        return facts

    def submit(self, request: Request, payloads: Sequence[bytes]) -> None:
        _share([("submit", request, [bytes(p) for p in payloads])], self.backend)
        self.backend.submit(request, payloads)

    def cancel(self, request_id: str) -> None:
        _share([("cancel", request_id)], self.backend)
        self.backend.cancel(request_id)

    def cancel_all(self) -> None:
        try:
            _share([("cancel_all",)], self.backend)
        finally:  # a broken ring still ends this rank's requests, then the worker
            self.backend.cancel_all()

    def fail_active(self, message: str) -> None:
        try:
            _share([("fail_active", message)], self.backend)
        finally:  # the usual cause is the ring itself: answer the requests anyway
            self.backend.fail_active(message)

    def set_limits(self, limits: Limits) -> None:
        """The gateway's KV cache room: it decides which queued requests start, so
        every rank must know it."""
        _share([("set_limits", limits)], self.backend)
        self.backend.set_limits(limits)

    def has_work(self) -> bool:
        return self.backend.has_work()

    def step(self) -> None:
        _share([("step",)], self.backend)
        self.backend.step()

    def counts(self) -> tuple[int, int]:
        return self.backend.counts()

    def kv_bytes(self) -> tuple[int, int, int]:
        return self.backend.kv_bytes()

    def prefill_rate(self) -> float:
        return self.backend.prefill_rate()

    def generation_stream(self) -> mx.Stream | None:
        return self.backend.generation_stream()

    idle_interval = IDLE_TICK
    """The serve loop ticks :meth:`idle_tick` this often while nothing happens."""

    def idle_tick(self) -> None:
        _share([("idle",)], self.backend)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                _share([("exit",)], self.backend)
            except Exception:  # the ring is already broken: the others are going too
                log.warning("could not tell the other ranks to stop", exc_info=True)
        self.backend.close()


def _group_size() -> int:
    import mlx.core as mx

    return int(mx.distributed.init().size())


def follow(spec: WorkerSpec) -> int:
    """A rank other than 0: load this rank's shard, then replay rank 0's calls until
    it says ``exit``. Returns the exit code."""

    backend = create_backend(spec.kind)
    try:
        backend.load(spec, drop)
    except LoadError as exc:
        log.error("rank %d: %s", rank(), exc)
        return EXIT_LOAD_FAILED
    log.info("rank %d: %s loaded, following rank 0", rank(), spec.model_path)
    try:
        while True:
            for call in _share(None, backend):
                if _apply(backend, call):
                    return EXIT_OK
    except Exception:
        log.exception("rank %d: following rank 0 failed", rank())
        return EXIT_CRASH
    finally:
        backend.close()


def _apply(backend: Backend, call: Call) -> bool:
    """Replay one call; ``True`` at ``exit``."""
    match call:
        case ("submit", request, payloads):
            try:
                backend.submit(request, payloads)
            except Exception as exc:  # rank 0 rejected it too: it answered the gateway
                log.debug("rank %d: request not accepted: %s", rank(), exc)
        case ("cancel", request_id):
            backend.cancel(request_id)
        case ("cancel_all",):
            backend.cancel_all()
        case ("fail_active", message):
            backend.fail_active(message)
        case ("set_limits", limits):
            backend.set_limits(limits)
        case ("step",):
            try:
                backend.step()
            except Exception:
                # The same inputs fail on rank 0 too, which then sends fail_active;
                # a broken ring fails the next share instead, and ends this rank.
                log.exception("rank %d: step failed", rank())
        case ("idle",):
            # Rank 0 waits IDLE_TICK for a request before its next share: sleep
            # through most of that instead of spinning in the collective (the ring
            # backend polls its sockets while it waits).
            time.sleep(IDLE_TICK * IDLE_SLEEP)
        case ("exit",):
            return True
    return False
