"""The worker lifecycle as a pure state machine (no I/O).

::

    STOPPED → STARTING → READY → STOPPING → STOPPED
                 │          │
                 └──────────┴──▶ FAILED (load failed / crash-looped; retried after a backoff)

A crash of a READY worker goes straight back to STOPPED: the next request starts
it again; the third crash within a minute makes it FAILED (a crash loop). Only
:class:`WorkerHandle`'s owner task changes a state, through :func:`check_transition`.
"""

from __future__ import annotations

from enum import StrEnum


class WorkerState(StrEnum):
    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"
    FAILED = "failed"

    @property
    def public(self) -> str:
        """The name clients see in /v1/models and /health."""
        return _PUBLIC[self]


_PUBLIC = {
    WorkerState.STOPPED: "unloaded",
    WorkerState.STARTING: "loading",
    WorkerState.READY: "ready",
    WorkerState.STOPPING: "stopping",
    WorkerState.FAILED: "failed",
}

ALLOWED: dict[WorkerState, frozenset[WorkerState]] = {
    WorkerState.STOPPED: frozenset({WorkerState.STARTING}),
    # STARTING → STOPPED is not allowed: a worker that dies while loading is FAILED.
    WorkerState.STARTING: frozenset({WorkerState.READY, WorkerState.STOPPING, WorkerState.FAILED}),
    # READY → FAILED: it crashed again and again (a crash loop).
    WorkerState.READY: frozenset({WorkerState.STOPPING, WorkerState.STOPPED, WorkerState.FAILED}),
    WorkerState.STOPPING: frozenset({WorkerState.STOPPED}),
    WorkerState.FAILED: frozenset({WorkerState.STARTING}),
}


class InvalidTransition(RuntimeError):
    pass


def check_transition(old: WorkerState, new: WorkerState) -> None:
    """Raise :class:`InvalidTransition` unless ``old → new`` is in :data:`ALLOWED`."""
    if new not in ALLOWED[old]:
        raise InvalidTransition(f"worker state {old} cannot become {new}")


def failure_backoff(consecutive_failures: int) -> float:
    """Seconds before a FAILED worker is tried again: 1, 2, 4 … capped at 60."""
    if consecutive_failures <= 0:
        return 0.0
    return float(min(2 ** (consecutive_failures - 1), 60))
