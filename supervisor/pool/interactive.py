"""Interactive work on this machine, and the ``Pause`` that holds batch work meanwhile.

The machine's workers share its GPU (or CPU): a batch app's prefill on one model
slows a person's request on another. While at least one interactive request holds a
session on any model (:mod:`.admission`) and batch work is in flight, every running
worker is told ``Pause(hold=True)``; when the last interactive one ends, the workers
told get ``Pause(hold=False)`` (without batch work nothing is sent). A worker whose
queued and running requests are all ``batch`` takes no step while held (it waits
between two steps, see ``workers/runtime/serve.py``); one with interactive work of its
own goes on. A worker that becomes ready while interactive work runs is told at once.
The registry owns one :class:`InteractiveWork` and hands it to each model's admission.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from mlx_gateway.protocol.messages import BATCH, Pause, Priority, Request

log = logging.getLogger(__name__)


class Worker(Protocol):
    """What this module needs of a model's handle."""

    def post(self, msg: Request) -> None: ...


class InteractiveWork:
    """Counts interactive and batch sessions in flight across ``workers`` (the
    registry's list of handles, read at each change). Workers are told to hold only
    while both run: while interactive work runs, every worker when the first batch
    session is in flight anywhere, and a worker that gets a batch session later as
    it starts; the release goes to the workers told."""

    def __init__(self, workers: Sequence[Worker]) -> None:
        self._workers = workers
        self.running = 0
        """Interactive sessions in flight now."""
        self.batch = 0
        """Batch sessions in flight now."""
        self._holding: list[Worker] = []
        """The workers told ``Pause(hold=True)`` and not yet released."""

    @property
    def held(self) -> bool:
        """Whether batch work is held now."""
        return self.running > 0 and self.batch > 0

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
        if self.running == 1 and self.batch:
            for target in list(self._workers):
                self._hold(target)

    def leave(self, priority: Priority) -> None:
        """A session of ``priority`` ended."""
        if priority == BATCH:
            self.batch -= 1
            return
        self.running -= 1
        if self.running == 0:
            release = Pause(hold=False)
            for worker in self._holding:
                worker.post(release)
            self._holding.clear()

    def joined(self, worker: Worker) -> None:
        """``worker`` became ready: held at once if interactive and batch work run."""
        if self.held:
            self._holding = [w for w in self._holding if w is not worker]
            self._hold(worker)

    def _hold(self, worker: Worker) -> None:
        if any(w is worker for w in self._holding):
            return
        self._holding.append(worker)
        worker.post(Pause(hold=True))
