"""What the API surfaces and the engine may use of a model's handle.

:class:`~.handle.WorkerHandle` is the implementation; the API tests' in-process fake
(tests/supervisor/api/fakes.py) is another. Both carry a real :class:`ModelConfig`.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from mlx_gateway.protocol.messages import INTERACTIVE, Generate, ModelFacts, Priority
from mlx_gateway.supervisor.config import ModelConfig
from mlx_gateway.supervisor.pool.adapters import AdapterSet
from mlx_gateway.supervisor.pool.status import ModelStatus


class Replies(Protocol):
    """A worker's replies to one request; closing it early cancels the request."""

    def __aiter__(self) -> Replies: ...

    async def __anext__(self) -> Any: ...

    async def aclose(self) -> None: ...


class WorkerSession(Protocol):
    """One request's access to a ready worker."""

    def generate(self, msg: Generate) -> Replies:
        """Send ``msg``; yield the worker's replies up to and including ``Done``."""
        ...

    def call(self, msg: Any, request_id: str, payloads: Sequence[Any] = ()) -> Replies:
        """Send any request message with binary ``payloads``; yield its replies."""
        ...


class ModelHandle(Protocol):
    """A served model: its name, its config entry, what its worker reported, and a
    way in (:meth:`session` waits until the model is ready and counts the request)."""

    name: str
    config: ModelConfig
    facts: ModelFacts | None
    adapters: AdapterSet

    def status(self) -> ModelStatus: ...

    def session(
        self, priority: Priority = INTERACTIVE
    ) -> AbstractAsyncContextManager[WorkerSession]: ...
