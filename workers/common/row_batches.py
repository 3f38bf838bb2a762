"""The request bookkeeping of backends whose requests are cut into rows that share
forward passes (embedding inputs, rerank pairs): jobs by id, their rows in one
length-sorted queue, and the jobs of the batch under way. The embeddings and rerank
backends share it; each brings its own forward pass and answer."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import Generic, Protocol, TypeVar, cast

from mlx_gateway.protocol.messages import Done, Error, Usage
from mlx_gateway.workers.common.length_batches import take_batch
from mlx_gateway.workers.runtime.contract import Backend, Emit, drop


class Job(Protocol):
    request_id: str
    remaining: int
    """Rows not yet through a forward pass."""
    prompt_tokens: int
    batch: bool
    """Its ``priority`` is ``batch``: its rows queue behind interactive jobs' rows."""


J = TypeVar("J", bound=Job)


class Row(Protocol):
    @property
    def job(self) -> Job: ...

    @property
    def length(self) -> int:
        """Its tokens (what its padded width in a batch is)."""
        ...


R = TypeVar("R", bound=Row)


class RowBatches(Backend, Generic[J, R]):
    """Jobs whose rows wait in :attr:`_queue` (``R`` items with ``job`` and
    ``length``) for a batch of at most :attr:`max_batch_tokens` padded tokens."""

    def __init__(self, max_batch_tokens: int) -> None:
        self.max_batch_tokens = max_batch_tokens
        self._emit: Emit = drop
        self._jobs: dict[str, J] = {}
        self._queue: deque[R] = deque()
        self._batch_jobs: list[J] = []

    def _queue_rows(self, rows: Iterable[R], batch: bool) -> None:
        """Queue a job's rows: an interactive job's go ahead of every batch job's."""
        if not batch:
            at = next((i for i, row in enumerate(self._queue) if row.job.batch), None)
            if at is not None:
                for offset, row in enumerate(rows):
                    self._queue.insert(at + offset, row)
                return
        self._queue.extend(rows)

    def runs_interactive(self) -> bool:
        return any(not job.batch for job in list(self._jobs.values()))

    def _take(self) -> list[R]:
        """The next batch (see :func:`~.length_batches.take_batch`); its jobs become
        the batch's, which :meth:`fail_active` ends if the forward pass raises."""
        batch = take_batch(
            self._queue, self.max_batch_tokens, lambda row: row.job.request_id in self._jobs
        )
        jobs = (cast(J, row.job) for row in batch)
        self._batch_jobs = list({id(job): job for job in jobs}.values())
        return batch

    def _finished(self) -> Iterator[J]:
        """The batch's jobs whose last row ran, each taken out as it is yielded."""
        for job in self._batch_jobs:
            if job.remaining == 0 and self._jobs.pop(job.request_id, None) is not None:
                yield job
        self._batch_jobs = []

    def cancel(self, request_id: str) -> None:
        job = self._jobs.pop(request_id, None)
        if job is None:
            return
        # Its queued rows are skipped when batches are taken.
        usage = Usage(prompt_tokens=job.prompt_tokens)
        self._emit(Done(request_id=request_id, finish_reason="cancelled", usage=usage))

    def cancel_all(self) -> None:
        for request_id in list(self._jobs):
            self.cancel(request_id)
        self._queue.clear()

    def has_work(self) -> bool:
        return bool(self._jobs)

    def fail_active(self, message: str) -> None:
        for job in self._batch_jobs:
            if self._jobs.pop(job.request_id, None) is not None:
                self._emit(Error(message=message, request_id=job.request_id, status=500))
        self._batch_jobs = []

    def close(self) -> None:
        self._jobs.clear()
        self._queue.clear()
