"""What the gateway tells its workers (``pool/interactive.py``): ``Pause`` only while
interactive and batch work are both in flight, the release to the workers told."""

from __future__ import annotations

from mlx_gateway.protocol.messages import BATCH, INTERACTIVE, Pause, Request
from mlx_gateway.supervisor.pool.interactive import InteractiveWork


class Worker:
    def __init__(self) -> None:
        self.told: list[bool] = []

    def post(self, msg: Request) -> None:
        assert isinstance(msg, Pause)
        self.told.append(msg.hold)


def test_workers_are_held_only_while_interactive_and_batch_work_run() -> None:
    a, b, c = Worker(), Worker(), Worker()
    work = InteractiveWork([a, b])
    work.enter(INTERACTIVE, a)  # no batch work anywhere: nothing to hold
    work.leave(INTERACTIVE)
    assert a.told == b.told == []

    work.enter(BATCH, b)
    work.enter(INTERACTIVE, a)  # now both: every worker is held
    assert work.held and a.told == b.told == [True]
    work.enter(INTERACTIVE, a)  # a second one changes nothing
    work.enter(BATCH, b)
    assert a.told == b.told == [True]
    work.joined(c)  # a worker that became ready meanwhile is held at once
    assert c.told == [True]
    work.leave(INTERACTIVE)
    assert a.told == [True]  # one interactive request still runs
    work.leave(INTERACTIVE)
    assert a.told == b.told == c.told == [True, False]
    assert not work.held
