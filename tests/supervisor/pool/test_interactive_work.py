"""What the gateway tells its workers (``pool/interactive.py``): ``Pause`` only while
interactive and batch work are both in flight, with duty 0 until every interactive
request has its first answer and the batch duty from then on, the release to the
workers told."""

from __future__ import annotations

from mlx_gateway.protocol.messages import BATCH, INTERACTIVE, Pause, Request
from mlx_gateway.supervisor.pool.interactive import InteractiveWork

DUTY = 0.4
HELD, PACED, FREE = (True, 0.0), (True, DUTY), (False, 0.0)


class Worker:
    def __init__(self) -> None:
        self.told: list[tuple[bool, float]] = []

    def post(self, msg: Request) -> None:
        assert isinstance(msg, Pause)
        self.told.append((msg.hold, msg.duty))


def test_workers_are_held_only_while_interactive_and_batch_work_run() -> None:
    a, b, c = Worker(), Worker(), Worker()
    work = InteractiveWork([a, b], duty=DUTY)
    work.enter(INTERACTIVE, a)  # no batch work anywhere: nothing to hold
    work.answered(INTERACTIVE)
    work.leave(INTERACTIVE)
    assert a.told == b.told == []

    work.enter(BATCH, b)
    work.enter(INTERACTIVE, a)  # now both: every worker is held
    assert work.held and a.told == b.told == [HELD]
    work.enter(INTERACTIVE, a)  # a second one changes nothing
    work.enter(BATCH, b)
    assert a.told == b.told == [HELD]
    work.joined(c)  # a worker that became ready meanwhile is held at once
    assert c.told == [HELD]
    work.leave(INTERACTIVE, answered=False)
    assert a.told == [HELD]  # one interactive request still runs, without its answer
    work.leave(INTERACTIVE, answered=False)
    assert a.told == b.told == c.told == [HELD, FREE]
    assert not work.held


def test_the_hold_eases_to_its_duty_once_every_person_has_a_first_answer() -> None:
    a, b = Worker(), Worker()
    work = InteractiveWork([a, b], duty=DUTY)
    work.enter(BATCH, b)
    work.enter(INTERACTIVE, a)
    work.answered(BATCH)  # a batch answer changes nothing
    assert a.told == b.told == [HELD]
    work.answered(INTERACTIVE)  # the first token: batch work goes on at its duty
    assert a.told == b.told == [HELD, PACED]
    work.enter(INTERACTIVE, a)  # a new person waits for a first token: held again
    assert b.told == [HELD, PACED, HELD]
    work.leave(INTERACTIVE)  # the answered one ends; the new one still waits
    assert b.told == [HELD, PACED, HELD]
    work.answered(INTERACTIVE)
    assert b.told == [HELD, PACED, HELD, PACED]
    c = Worker()
    work.enter(BATCH, c)  # batch work that starts now is paced at once
    assert c.told == [PACED]
    work.leave(INTERACTIVE)
    assert a.told[-1] == b.told[-1] == c.told[-1] == FREE


def test_a_person_who_leaves_before_an_answer_no_longer_holds_the_batch_back() -> None:
    a = Worker()
    work = InteractiveWork([a], duty=DUTY)
    work.enter(BATCH, a)
    work.enter(INTERACTIVE, a)
    work.enter(INTERACTIVE, a)
    work.answered(INTERACTIVE)
    assert a.told == [HELD]  # one still waits
    work.leave(INTERACTIVE, answered=False)  # it left without a token
    assert a.told == [HELD, PACED]
    assert work.starting == 0 and work.running == 1
