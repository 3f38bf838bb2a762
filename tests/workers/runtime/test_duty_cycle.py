"""Batch work held at a duty cycle (``workers/runtime/duty_cycle.py``) and the serve
loop that keeps it for ``Pause(hold=True, duty=…)``: read on the schedule of steps
that ran (each step's start and end), never on timings.

The serve loop runs the real embeddings backend on a tiny random BERT, one or two
inputs a step, wrapped only to record when each step ran and whether the worker's
work was all batch then."""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import pytest

from mlx_gateway.protocol.messages import (
    BATCH,
    Done,
    Embed,
    Pause,
    Reply,
    Shutdown,
)
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.workers.embeddings.backend import EmbeddingsBackend
from mlx_gateway.workers.runtime.contract import EXIT_OK, Backend, InboxItem
from mlx_gateway.workers.runtime.duty_cycle import DutyCycle, rest_after
from mlx_gateway.workers.runtime.serve import serve

WAIT = 60.0
"""Seconds: the failure bound of every wait (a busy 2-core machine)."""


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_step_rests_for_its_share_before_the_next() -> None:
    clock = Clock()
    half = DutyCycle(0.5, clock)
    assert half.ready()  # the first step runs at once
    half.took(0.0, 2.0)
    clock.now = 2.0
    assert half.wait() == pytest.approx(2.0)  # as long again: half of the time
    clock.now = 3.9
    assert not half.ready()
    clock.now = 4.0
    assert half.ready()
    third = DutyCycle(1 / 3, clock)
    third.took(4.0, 5.0)
    clock.now = 5.0
    assert third.wait() == pytest.approx(2.0)  # twice its time: a third of the time
    assert rest_after(1.0, 1 / 3) == pytest.approx(2.0)
    assert list(third.steps) == [(4.0, 5.0)]


def test_a_share_of_0_lets_no_step_run_and_1_every_step() -> None:
    clock = Clock()
    none, every = DutyCycle(0.0, clock), DutyCycle(1.0, clock)
    assert none.wait() is None and not none.ready()
    every.took(0.0, 5.0)
    clock.now = 5.0
    assert every.ready()  # no rest at all


class TimedBackend:
    """The real backend, each step's start and end recorded, with whether all the
    work was batch when it started."""

    def __init__(self, backend: EmbeddingsBackend) -> None:
        self._backend = backend
        self.steps: list[tuple[float, float, bool]] = []
        self.stepped = threading.Condition()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def step(self) -> None:
        batch_only = not self._backend.runs_interactive()
        started = time.monotonic()
        self._backend.step()
        with self.stepped:
            self.steps.append((started, time.monotonic(), batch_only))
            self.stepped.notify_all()

    def wait_steps(self, count: int, since: float) -> None:
        with self.stepped:
            ok = self.stepped.wait_for(
                lambda: sum(start >= since for start, _, _ in self.steps) >= count, timeout=WAIT
            )
        assert ok, f"fewer than {count} steps since the hold eased: {self.steps[-5:]}"


class Replies:
    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.changed = threading.Condition()

    def __call__(self, msg: Reply, payloads: Sequence[Any] = ()) -> None:
        with self.changed:
            self.replies.append(msg)
            self.changed.notify_all()

    def wait_done(self, request_id: str) -> None:
        def done() -> bool:
            return any(isinstance(r, Done) and r.request_id == request_id for r in self.replies)

        with self.changed:
            assert self.changed.wait_for(done, timeout=WAIT), f"{request_id} never ended"


@pytest.mark.slow
def test_a_held_embeddings_worker_steps_at_its_duty(tiny_bert_path: Path) -> None:
    spec = WorkerSpec(
        worker_id="w",
        kind="embeddings",
        model_path=str(tiny_bert_path),
        served_model_name="tiny",
        options={"max_batch_tokens": 16},  # one or two inputs a step: a flood takes many
    )
    replies = Replies()
    real = EmbeddingsBackend()
    real.load(spec, replies)
    backend = TimedBackend(real)
    inbox: queue.Queue[InboxItem] = queue.Queue()
    flood = [f"input number {i} of the flood" for i in range(120)]
    inbox.put((Pause(hold=True, duty=0.0), []))
    inbox.put((Embed(request_id="flood", texts=flood, priority=BATCH), []))
    inbox.put((Embed(request_id="person", texts=["what time is it"]), []))
    code: list[int] = []
    loop = threading.Thread(
        target=lambda: code.append(serve(cast(Backend, backend), inbox, replies)), daemon=True
    )
    loop.start()
    try:
        replies.wait_done("person")  # interactive work here: not held
        eased = time.monotonic()
        inbox.put((Pause(hold=True, duty=0.5), []))
        backend.wait_steps(6, since=eased)
        released = time.monotonic()
        inbox.put((Pause(hold=False), []))
        replies.wait_done("flood")
    finally:
        inbox.put((Shutdown(grace=0.0), []))
        loop.join(WAIT)
    assert code == [EXIT_OK]

    person_end = max(end for _, end, only in backend.steps if not only)
    held = [s for s in backend.steps if s[2] and person_end <= s[0] < eased]
    assert held == [], "a batch step ran while held with duty 0"
    paced = [(start, end) for start, end, only in backend.steps if only and eased <= start]
    paced_before_release = [(s, e) for s, e in paced if e <= released]
    assert len(paced_before_release) >= 5
    for (s1, e1), (s2, _) in itertools.pairwise(paced_before_release):
        assert s2 >= e1 + rest_after(e1 - s1, 0.5), "a held step came before its rest ended"
    free = [(s, e) for s, e in paced if s > released]
    assert free, "the flood must go on after the release"
