"""Request bookkeeping shared by the continuously batched backends (lm, vlm).

Both backends keep their accepted requests the same way: a queue of those waiting
for room in the batch (arrival order), every request by id, and the running ones by
their generator id (``uid``). :class:`BatchRequests` holds these maps and what only
touches them: cancelling, counting, ending a request with ``Done`` and its usage,
failing the running ones after a failed step (the generator is then made anew), the
token-to-text path with stop strings, and closing. Each backend keeps what really
differs: how a request is admitted into its library's ``BatchGenerator``, how it
leaves it (:meth:`BatchRequests._leave_batch`), and its own extras (solo decoding,
prompt cache, log-probs, tool calls for lm; images and prefill progress for vlm).

The checks and messages both backends give a request (sampling parameters, the
completion budget) are here too, so that they answer in the same words.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from mlx_gateway.protocol.messages import (
    Batch,
    ContextOverflow,
    Done,
    Error,
    SamplingParams,
    Usage,
)
from mlx_gateway.workers.common.coalesce import Coalescer
from mlx_gateway.workers.common.stops import scan_stops
from mlx_gateway.workers.runtime.contract import Emit, RequestError, drop

log = logging.getLogger(__name__)

FALLBACK_CONTEXT_LENGTH = 4096
"""Used when neither the spec nor the model tells the context length."""


class Detokenizer(Protocol):
    """A streaming detokenizer (mlx-lm's and mlx-vlm's have the same interface)."""

    def add_token(self, token: int) -> None: ...

    def finalize(self) -> None: ...

    @property
    def last_segment(self) -> str: ...


class Generator(Protocol):
    """What this module needs of a ``BatchGenerator``."""

    def close(self) -> None: ...


@dataclass(kw_only=True)
class Active:
    """One accepted request and its streaming state (each backend adds its own)."""

    request_id: str
    max_tokens: int
    stops: list[str]
    detokenizer: Detokenizer
    uid: int | None = None
    """The generator's id once the request joined the batch."""
    cached: int = 0
    """Prompt tokens taken from a cache instead of prefilled."""
    held: str = ""
    """Text withheld because it may be the start of a stop string."""
    generated: int = 0
    unsent_tokens: int = 0
    finish: str | None = None
    """Set by the step that ends the request."""
    batch: bool = False
    """Its ``priority`` is ``batch``: it queues behind interactive requests."""

    @property
    def prompt_tokens(self) -> int:
        """The prompt's length in tokens."""
        raise NotImplementedError


A = TypeVar("A", bound=Active)
G = TypeVar("G", bound=Generator)


class BatchRequests(ABC, Generic[A, G]):
    """The request maps of a continuously batched backend and what only touches them
    (its ``cancel``, ``counts``, ``fail_active``… are those of the runtime's
    ``Backend``: the vlm backend is one and a ``Backend``, the lm backend's
    :class:`~..lm.scheduling.Scheduler` one it owns)."""

    def __init__(self) -> None:
        self._emit: Emit = drop
        self._generator: G | None = None
        self._queue: deque[A] = deque()
        self._by_id: dict[str, A] = {}
        self._by_uid: dict[int, A] = {}
        self._out = Coalescer(self._emit_batch, 0.0)

    def _emit_batch(self, batch: Batch) -> None:
        self._emit(batch)  # late-bound: load() sets _emit after __init__ made the Coalescer

    @abstractmethod
    def _new_generator(self) -> G:
        """A fresh generator for the loaded model."""

    @abstractmethod
    def _leave_batch(self, active: A) -> None:
        """Take a running request out of the batch."""

    def _queued(self, active: A) -> bool:
        """Whether the request still waits in the queue."""
        return active.uid is None

    # ------------------------------------------------------------ requests

    def _enqueue(self, active: A) -> None:
        """Queue ``active``: an interactive request goes ahead of every queued batch
        request (in arrival order among its own priority)."""
        self._by_id[active.request_id] = active
        if not active.batch:
            for i, queued in enumerate(self._queue):
                if queued.batch:
                    self._queue.insert(i, active)
                    return
        self._queue.append(active)

    def runs_interactive(self) -> bool:
        """Whether a queued or running request is interactive."""
        return any(not active.batch for active in list(self._by_id.values()))

    def cancel(self, request_id: str) -> None:
        active = self._by_id.get(request_id)
        if active is None:
            return
        if self._queued(active):
            self._queue.remove(active)
        else:
            self._leave_batch(active)
        log.info("generation %s cancelled after %d tokens", request_id, active.generated)
        self._finish(active, "cancelled")

    def cancel_all(self) -> None:
        for request_id in list(self._by_id):
            self.cancel(request_id)

    def counts(self) -> tuple[int, int]:
        return len(self._by_uid), len(self._queue)

    def has_work(self) -> bool:
        return bool(self._by_id)

    # ------------------------------------------------------------ generation

    def _take_token(self, active: A, token: int, finish: str | None) -> str:
        """Count one generated token and return the text it completed."""
        active.generated += 1
        active.unsent_tokens += 1
        # The generator's only stop sequences are the EOS tokens, whose text is not sent.
        if finish != "stop":
            active.detokenizer.add_token(token)
        if finish is not None:
            active.detokenizer.finalize()
        return active.detokenizer.last_segment

    def _apply_stops(self, active: A, segment: str, finish: str | None) -> str:
        """The part of ``segment`` that can be sent now; sets ``active.finish`` (a
        stop string ends the request, which then leaves the batch)."""
        text, stopped = segment, False
        if active.stops:
            text, active.held, stopped = scan_stops(
                active.held, segment, active.stops, final=finish is not None
            )
        if stopped and finish is None:
            self._leave_batch(active)
        if stopped:
            finish = "stop"
        active.finish = finish
        return text

    def _finish(self, active: A, reason: str) -> None:
        self._out.end(active.request_id)
        self._by_id.pop(active.request_id, None)
        if active.uid is not None:
            self._by_uid.pop(active.uid, None)
        usage = self._usage(active)
        self._emit(Done(request_id=active.request_id, finish_reason=reason, usage=usage))

    def _usage(self, active: A) -> Usage:
        return Usage(
            prompt_tokens=active.prompt_tokens,
            completion_tokens=active.generated,
            cached_tokens=active.cached,
        )

    def fail_active(self, message: str) -> None:
        # Every request that left the queue: running, or caught between the queue
        # and the batch by the failure (an insert that raised).
        queued = {id(active) for active in self._queue}
        self._fail([a for a in self._by_id.values() if id(a) not in queued], message)

    def _fail(self, failed: list[A], message: str) -> None:
        """End the running requests with a 500 ``Error`` and start a new generator."""
        for active in failed:
            self._out.end(active.request_id)
            self._by_id.pop(active.request_id, None)
            self._emit(Error(message=message, request_id=active.request_id, status=500))
        self._by_uid.clear()
        # The failed step may have left the shared batch state half-updated.
        if self._generator is not None:
            self._generator.close()
        self._generator = self._new_generator()

    def close(self) -> None:
        if self._generator is not None:
            self._generator.close()
            self._generator = None


# ---------------------------------------------------------------- request checks


def check_sampling(params: SamplingParams) -> None:
    if params.temperature < 0:
        raise RequestError("temperature must be at least 0", param="temperature")
    if not 0 < params.top_p <= 1:
        raise RequestError("top_p must be greater than 0 and at most 1", param="top_p")
    if params.top_k < 0:
        raise RequestError("top_k must be at least 0", param="top_k")
    if not 0 <= params.min_p <= 1:
        raise RequestError("min_p must be between 0 and 1", param="min_p")
    if params.repetition_penalty is not None and params.repetition_penalty <= 0:
        raise RequestError("repetition_penalty must be greater than 0", param="repetition_penalty")


def completion_budget(
    limit: int | None,
    prompt_tokens: int,
    max_tokens: int | None,
    where: str,
    too_long: Callable[[int], str],
    fit: bool = False,
) -> int:
    """The completion budget in a context of ``limit`` tokens; raises OpenAI's
    context_length_exceeded error. ``too_long(limit)`` words the error for a prompt
    that alone fills the context. ``fit``: a ``max_tokens`` beyond what the prompt
    leaves is cut to that instead of the error."""
    if max_tokens is not None and max_tokens < 1:
        raise RequestError("max_tokens must be at least 1", param="max_tokens")
    if limit is None:
        return max_tokens or FALLBACK_CONTEXT_LENGTH
    overflow = ContextOverflow(prompt_tokens, max_tokens, limit)
    if prompt_tokens >= limit:
        raise RequestError(
            too_long(limit), param=where, code="context_length_exceeded", overflow=overflow
        )
    if max_tokens is None:
        return limit - prompt_tokens
    if fit and prompt_tokens + max_tokens > limit:
        log.info(
            "max_tokens %d cut to %d: the %d-token %s leaves that much of the %d-token "
            "context (max_tokens_overflow: clamp)",
            max_tokens,
            limit - prompt_tokens,
            prompt_tokens,
            where,
            limit,
        )
        return limit - prompt_tokens
    if prompt_tokens + max_tokens > limit:
        raise RequestError(
            overflow_message(limit, prompt_tokens, max_tokens, where),
            param="max_tokens",
            code="context_length_exceeded",
            overflow=overflow,
        )
    return max_tokens


def overflow_message(limit: int, prompt_tokens: int, max_tokens: int, where: str) -> str:
    return (
        f"This model's maximum context length is {limit} tokens. However, you requested "
        f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the {where}, {max_tokens} "
        f"in the completion). Please reduce the length of the {where} or completion."
    )
