"""Requests served in turn, one bounded step of one request at a time (a Whisper
window, a spoken sentence): the bookkeeping the whisper and tts backends share.

Up to ``max_concurrency`` requests are running; each step serves the next of them
(round robin), so a long request never holds back a short one for long, and a
cancel or a new request is seen between steps. Later ones wait in arrival order.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, Protocol, TypeVar

from mlx_gateway.protocol.messages import Error
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.workers.runtime.contract import Backend, Emit, drop


class Job(Protocol):
    @property
    def request_id(self) -> str: ...

    def release(self) -> None:
        """Free what the request holds (decoders, encoders)."""
        ...


J = TypeVar("J", bound=Job)


class TakingTurns(Backend, Generic[J]):
    """A backend whose accepted requests (jobs) take turns, one step each."""

    def __init__(self) -> None:
        self._spec: WorkerSpec | None = None
        self._emit: Emit = drop
        self._queue: deque[J] = deque()
        self._running: deque[J] = deque()
        self._by_id: dict[str, J] = {}
        self._current: J | None = None
        """The job of the step under way: left set if it raises (see fail_active)."""

    def _accept(self, job: J) -> None:
        self._by_id[job.request_id] = job
        self._queue.append(job)

    def _next_turn(self) -> J | None:
        """The job this step serves (then :attr:`_current`), admitting waiting ones up
        to ``max_concurrency``; ``None`` when nothing runs."""
        assert self._spec is not None
        while self._queue and len(self._running) < max(self._spec.max_concurrency, 1):
            self._running.append(self._queue.popleft())
        if not self._running:
            return None
        job = self._running[0]
        self._running.rotate(-1)  # the next step serves the next request
        self._current = job
        return job

    def _forget(self, job: J) -> None:
        self._by_id.pop(job.request_id, None)
        for line in (self._queue, self._running):
            if job in line:
                line.remove(job)
        job.release()

    def cancel_all(self) -> None:
        for request_id in list(self._by_id):
            self.cancel(request_id)

    def counts(self) -> tuple[int, int]:
        return len(self._running), len(self._queue)

    def has_work(self) -> bool:
        return bool(self._by_id)

    def fail_active(self, message: str) -> None:
        """The step raised: end only the request it was serving."""
        job, self._current = self._current, None
        if job is None:
            return
        self._forget(job)
        self._emit(Error(message=message, request_id=job.request_id, status=500))

    def close(self) -> None:
        for job in list(self._by_id.values()):
            job.release()
        self._by_id.clear()
        self._queue.clear()
        self._running.clear()
