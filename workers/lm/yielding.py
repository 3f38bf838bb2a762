"""A batch request's prefill yields to an interactive request's.

A request of ``priority: batch`` (:attr:`~.active.LmActive.batch`) waits in the
queue behind every interactive one (:meth:`~..common.batch_requests.BatchRequests._enqueue`).
Once it reads its prompt it would share each prefill step with an interactive prompt
that arrives later, or hold the batch's prompt rows, so before every step the
:class:`~.scheduling.Scheduler` asks :func:`must_yield`: while an interactive request
waits in the queue or reads its prompt, each batch request still reading its prompt
leaves the batch at the end of the slice it read (its KV cache so far kept on it as
:attr:`~.active.LmActive.resume`) and goes back to the head of the queued batch
requests (:func:`requeue`). It is admitted again, from the token where it stopped,
once no interactive request waits for its first token (:func:`holds_batch`). A
batch request that already decodes stays: a decode step reads one token per request.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from mlx_lm.generate import BatchGenerator

from mlx_gateway.workers.lm.active import LmActive
from mlx_gateway.workers.lm.solo import SoloDecode


def prefilling(active: LmActive) -> bool:
    """Whether ``active`` (running, alone or in the batch) still reads its prompt."""
    if active.solo is not None:
        return active.solo.prefilling
    return not active.decoding


def holds_batch(running: Iterable[LmActive]) -> bool:
    """Whether an interactive request among ``running`` still waits for its first
    token: a batch request does not start or go on with its prefill meanwhile (the
    step that makes that token would read a slice of the batch prompt too)."""
    return any(not a.batch and a.generated == 0 for a in running)


def must_yield(queue: Iterable[LmActive], running: list[LmActive]) -> list[LmActive]:
    """The running batch requests that leave the batch before the next step: those
    still reading their prompt, while an interactive request waits in the queue or
    for its first token."""
    if not (any(not a.batch for a in queue) or holds_batch(running)):
        return []
    return [a for a in running if a.batch and prefilling(a)]


def alone(queue: deque[LmActive]) -> bool:
    """Whether the head of the queue may start alone (solo decoding) in an empty
    batch: it is the only request queued, or an interactive one before batch
    requests only (they wait for its first token anyway)."""
    if len(queue) == 1:
        return True
    return not queue[0].batch and all(a.batch for a in list(queue)[1:])


def requeue(queue: deque[LmActive], active: LmActive) -> None:
    """Put a batch request that yielded back at the head of the queued batch requests
    (behind the interactive ones)."""
    for i, queued in enumerate(queue):
        if queued.batch:
            queue.insert(i, active)
            return
    queue.append(active)


def batch_cache(generator: BatchGenerator, uid: int) -> tuple[int, list[Any]] | None:
    """Take request ``uid`` out of ``generator``: the prompt tokens its cache holds
    and the cache (``None``: nothing to go on from, it starts over)."""
    caches = generator.remove([uid], return_prompt_caches=True)
    cache, tokens = caches.get(uid, (None, None))
    return (len(tokens), cache) if cache and tokens is not None else None


def solo_cache(solo: SoloDecode) -> tuple[int, list[Any]]:
    """Stop a prefill that runs alone: the prompt tokens its cache holds and the cache."""
    handover, _ = solo.handover()  # still reading its prompt: nothing sampled yet
    return len(handover.cached), handover.cache
