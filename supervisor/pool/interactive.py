"""Interactive work on this machine, and the ``Pause`` that holds batch work meanwhile.

The machine's workers share its GPU (or CPU): a batch app's prefill on one model
slows a person's request on another. While at least one interactive request holds a
session on any model (:mod:`.admission`), every running worker is told
``Pause(hold=True)``; when the last one ends, ``Pause(hold=False)``. A worker whose
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
    """Counts interactive sessions in flight across ``workers`` (the registry's
    list of handles, read at each change) and tells the workers when that count
    leaves or reaches zero."""

    def __init__(self, workers: Sequence[Worker]) -> None:
        self._workers = workers
        self.running = 0
        """Interactive sessions in flight now."""

    @property
    def held(self) -> bool:
        """Whether batch work is held now."""
        return self.running > 0

    def enter(self, priority: Priority) -> None:
        """A session of ``priority`` was admitted."""
        if priority == BATCH:
            return
        self.running += 1
        if self.running == 1:
            self._tell(True)

    def leave(self, priority: Priority) -> None:
        """A session of ``priority`` ended."""
        if priority == BATCH:
            return
        self.running -= 1
        if self.running == 0:
            self._tell(False)

    def joined(self, worker: Worker) -> None:
        """``worker`` became ready: held at once if interactive work runs."""
        if self.held:
            worker.post(Pause(hold=True))

    def _tell(self, hold: bool) -> None:
        message = Pause(hold=hold)
        for worker in list(self._workers):
            worker.post(message)
