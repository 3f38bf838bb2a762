"""The contract between the serve loop (:mod:`.serve`) and a model backend.

A backend is one kind of model (``mlx_gateway.workers.<kind>.backend``), made by that
module's ``create_backend()``. It subclasses :class:`Backend`: the abstract methods
are what every kind must do, the others are optional hooks with their defaults here,
so the serve loop calls every hook directly and never probes for one.

Every method runs on the MLX thread, except :meth:`Backend.counts` and
:meth:`Backend.kv_bytes` and :meth:`Backend.prefill_rate`, which the main thread reads
for heartbeats. A backend only
sees decoded requests and answers through an :class:`Emit`. It must end every
request it accepted with exactly one ``Done`` or ``Error``.
"""

from __future__ import annotations

import queue
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from mlx_gateway.protocol.messages import (
    ContextOverflow,
    Error,
    Limits,
    ModelFacts,
    Reply,
    Request,
)
from mlx_gateway.protocol.spec import WorkerSpec

if TYPE_CHECKING:
    import mlx.core as mx

EXIT_OK = 0
"""Asked to stop (Shutdown, SIGTERM) or the gateway is gone."""
EXIT_CRASH = 1
"""The serve loop itself failed (a bug); the gateway treats it as a crash."""
EXIT_LOAD_FAILED = 3
"""The model could not be loaded; the reason went out as ``Error(request_id="")``."""


class Emit(Protocol):
    """Send one reply to the gateway, followed by binary ``payloads`` (an embedding
    matrix, an encoded picture). Only valid on the MLX thread."""

    def __call__(self, msg: Reply, payloads: Sequence[bytes | memoryview] = ()) -> None: ...


def drop(msg: Reply, payloads: Sequence[bytes | memoryview] = ()) -> None:
    """An :class:`Emit` that sends nothing (before ``load``, and on follower ranks)."""


class LoadError(Exception):
    """The model cannot be loaded; the message is the reason shown to people."""


class RequestError(Exception):
    """A request cannot be served; becomes an ``Error`` reply, not a crash."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        overflow: ContextOverflow | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type
        self.param = param
        self.code = code
        self.overflow = overflow

    def to_error(self, request_id: str) -> Error:
        return Error(
            message=self.message,
            request_id=request_id,
            status=self.status,
            type=self.type,
            param=self.param,
            code=self.code,
            overflow=self.overflow,
        )


class Abort:
    """Inbox item: stop now (SIGTERM), cancelling everything."""


InboxItem = tuple[Request, list[bytes]] | Abort
Inbox = queue.Queue[InboxItem]


class Backend(ABC):
    """One kind of model (lm, vlm, embeddings, …)."""

    @abstractmethod
    def load(self, spec: WorkerSpec, emit: Emit) -> ModelFacts:
        """Load the model (``Progress`` may be emitted). Raise :class:`LoadError`
        with a reason a person can act on."""

    @abstractmethod
    def submit(self, request: Request, payloads: Sequence[bytes]) -> None:
        """Check and accept a request (emitting ``Started`` when it is accepted), or
        raise :class:`RequestError` to reject it before ``Started``."""

    @abstractmethod
    def cancel(self, request_id: str) -> None:
        """Stop a queued or running request: it ends with ``Done(finish_reason="cancelled")``.
        Unknown and finished ids are ignored."""

    @abstractmethod
    def has_work(self) -> bool:
        """Whether :meth:`step` has anything to do."""

    @abstractmethod
    def step(self) -> None:
        """One bounded unit of work (one generation step), emitting its replies."""

    @abstractmethod
    def fail_active(self, message: str) -> None:
        """A step raised: end the requests it was working on with ``Error(500)`` and
        reset whatever state they shared. Queued requests stay queued."""

    @abstractmethod
    def cancel_all(self) -> None:
        """End every queued and running request with ``Done("cancelled")``."""

    @abstractmethod
    def counts(self) -> tuple[int, int]:
        """``(running, queued)`` requests. Called from the main thread."""

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Release what the backend holds. The process is about to exit."""

    # Optional hooks.

    def set_limits(self, limits: Limits) -> None:  # noqa: B027 (optional hook)
        """The gateway's memory budget for this model's requests changed (KV kinds)."""

    def kv_bytes(self) -> tuple[int, int, int]:
        """KV cache bytes: running requests, prompt cache, admission limit (KV kinds).
        Called from the main thread: plain reads only."""
        return 0, 0, 0

    def prefill_rate(self) -> float:
        """Measured prompt tokens per second of a long prefill (0.0: not measured, or
        a kind without prompts). Called from the main thread: plain reads only."""
        return 0.0

    def watch_inbox(self, inbox: Inbox) -> None:  # noqa: B027 (optional hook)
        """Given once, before serving: a backend whose one step is long (a whole
        diffusion) may peek at the inbox to stop inside a step for a ``Cancel``; the
        items stay there for the serve loop."""

    idle_interval: float | None = None
    """When set, :meth:`idle_tick` is called every that many seconds while idle."""

    def idle_tick(self) -> None:  # noqa: B027 (optional hook)
        """Called while idle, every :attr:`idle_interval` seconds (rank 0 of a
        sharded model tells the other ranks it is alive)."""

    def runs_interactive(self) -> bool:
        """Whether a queued or running request is interactive (not ``batch``). While
        the gateway holds batch work (:class:`~...protocol.messages.Pause`), a worker
        whose backend says False waits between steps. A backend that does not tell
        priorities apart says True: it never pauses."""
        return True

    def step_label(self) -> str:
        """What the next :meth:`step` does, in a few words for a stall report
        (``decode of 2 requests``); read on the MLX thread before each step."""
        running, queued = self.counts()
        return f"step ({running} running, {queued} queued)"

    def generation_stream(self) -> mx.Stream | None:
        """The MLX stream the backend generates on, where it made its own (collective
        operations of a sharded model are queued behind its work)."""
        return None
