"""Interactive work on this machine, and the ``Pause`` that holds batch work meanwhile.

The machine's workers share its GPU (or CPU): a batch app's prefill on one model
slows a person's request on another. While at least one interactive request holds a
session on any model (:mod:`.admission`) and batch work is in flight, every running
worker is told ``Pause(hold=True)``: with ``duty`` 0 while an interactive request
still waits for its first answer (its first token), then with ``server.batch_duty``
(:data:`BATCH_DUTY` by default)
once every one has it, so that batch work goes on at a bounded share of the time
while the person reads the answer stream in; when the last interactive one ends,
the workers told get ``Pause(hold=False)`` (without batch work nothing is sent). A
worker whose queued and running requests are all ``batch`` paces its steps to that
share while held (see ``workers/runtime/serve.py``); one with interactive work of
its own goes on (and paces its own batch prefill, ``workers/lm/fair_share.py``). A
worker that becomes ready while interactive work runs is told at once. The registry
owns one :class:`InteractiveWork` and hands it to each model's admission.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from mlx_gateway.protocol.messages import BATCH, Pause, Priority, Request

log = logging.getLogger(__name__)

BATCH_DUTY = 0.5
"""The share of the wall time a held worker's batch steps may take once every
interactive request has its first token. Beside a worker that decodes for a person
on the same CPU or GPU, a batch step slows that decode step about two-fold while
they overlap, so at half the time the person's tokens come about 1.5 times as far
apart as alone (bench/fairness.py measures it)."""


class Worker(Protocol):
    """What this module needs of a model's handle."""

    def post(self, msg: Request) -> None: ...


class InteractiveWork:
    """Counts interactive and batch sessions in flight across ``workers`` (the
    registry's list of handles, read at each change). Workers are told to hold only
    while both run: while interactive work runs, every worker when the first batch
    session is in flight anywhere, and a worker that gets a batch session later as
    it starts. The hold's duty is 0 while an interactive session waits for its first
    answer, ``duty`` once none does; the release goes to the workers told."""

    def __init__(self, workers: Sequence[Worker], duty: float = BATCH_DUTY) -> None:
        self._workers = workers
        self.duty = duty
        self.running = 0
        """Interactive sessions in flight now."""
        self.starting = 0
        """Of those, the ones still waiting for their first answer."""
        self.batch = 0
        """Batch sessions in flight now."""
        self._holding: list[Worker] = []
        """The workers told ``Pause(hold=True)`` and not yet released."""
        self._told = 0.0
        """The duty the workers held were told last."""

    @property
    def held(self) -> bool:
        """Whether batch work is held now."""
        return self.running > 0 and self.batch > 0

    @property
    def current_duty(self) -> float:
        """The share of the time held batch work may take now."""
        return 0.0 if self.starting else self.duty

    def enter(self, priority: Priority, worker: Worker) -> None:
        """A session of ``priority`` on ``worker`` was admitted."""
        if priority == BATCH:
            self.batch += 1
            if self.running:
                targets = list(self._workers) if self.batch == 1 else [worker]
                for target in targets:
                    self._hold(target)
            return
        self.running += 1
        self.starting += 1
        if self.batch:
            self._retell()
            for target in list(self._workers):
                self._hold(target)

    def answered(self, priority: Priority) -> None:
        """A session of ``priority`` got its first answer (called once per session)."""
        if priority == BATCH:
            return
        self.starting -= 1
        self._retell()

    def leave(self, priority: Priority, answered: bool = True) -> None:
        """A session of ``priority`` ended (``answered``: it had its first answer)."""
        if priority == BATCH:
            self.batch -= 1
            return
        self.running -= 1
        if not answered:
            self.starting -= 1
        if self.running == 0:
            release = Pause(hold=False)
            for worker in self._holding:
                worker.post(release)
            self._holding.clear()
            self._told = 0.0
            return
        self._retell()

    def joined(self, worker: Worker) -> None:
        """``worker`` became ready: held at once if interactive and batch work run."""
        if self.held:
            self._holding = [w for w in self._holding if w is not worker]
            self._hold(worker)

    def _hold(self, worker: Worker) -> None:
        if any(w is worker for w in self._holding):
            return
        if not self._holding:
            self._told = self.current_duty
        self._holding.append(worker)
        worker.post(Pause(hold=True, duty=self._told))

    def _retell(self) -> None:
        """Tell the workers held the current duty, where it changed."""
        duty = self.current_duty
        if duty == self._told or not self._holding:
            return
        self._told = duty
        pause = Pause(hold=True, duty=duty)
        for worker in self._holding:
            worker.post(pause)
