from __future__ import annotations

import pytest

from mlx_gateway.supervisor.pool.state import (
    ALLOWED,
    InvalidTransition,
    WorkerState,
    check_transition,
    failure_backoff,
)


def test_every_state_has_transitions_and_a_public_name() -> None:
    assert set(ALLOWED) == set(WorkerState)
    assert {s.public for s in WorkerState} == {
        "unloaded",
        "loading",
        "ready",
        "stopping",
        "failed",
    }


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (WorkerState.STOPPED, WorkerState.STARTING),
        (WorkerState.STARTING, WorkerState.READY),
        (WorkerState.STARTING, WorkerState.FAILED),
        (WorkerState.READY, WorkerState.STOPPING),
        (WorkerState.READY, WorkerState.STOPPED),
        (WorkerState.READY, WorkerState.FAILED),
        (WorkerState.STOPPING, WorkerState.STOPPED),
        (WorkerState.FAILED, WorkerState.STARTING),
    ],
)
def test_allowed(old: WorkerState, new: WorkerState) -> None:
    check_transition(old, new)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (WorkerState.STOPPED, WorkerState.READY),
        (WorkerState.STARTING, WorkerState.STOPPED),
        (WorkerState.STOPPING, WorkerState.READY),
        (WorkerState.FAILED, WorkerState.READY),
        (WorkerState.READY, WorkerState.STARTING),
    ],
)
def test_refused(old: WorkerState, new: WorkerState) -> None:
    with pytest.raises(InvalidTransition):
        check_transition(old, new)


def test_backoff_grows_and_caps() -> None:
    assert failure_backoff(0) == 0
    assert [failure_backoff(n) for n in (1, 2, 3)] == [1, 2, 4]
    assert failure_backoff(50) == 60
