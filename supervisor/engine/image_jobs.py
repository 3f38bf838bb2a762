"""One image request on an image worker, from the prompt to the last picture.

Like :class:`~.generation.Generation`, the job's worker call (the model's session,
``Cancel`` when left early, which stops the diffusion loop at its next step) is
opened in :meth:`ImageJob.start` and closed by :meth:`ImageJob.aclose`, so it spans
the worker's checks, which decide between an HTTP error and a result, and every
picture after them.

While it runs, :attr:`ImageJob.progress` says how far it got; the job registers
itself in :data:`RUNNING` under its model's name so that ``/v1/models`` can show it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from mlx_gateway.protocol.messages import Done, GenerateImage, Image, ImageStep, Started
from mlx_gateway.supervisor import recorder
from mlx_gateway.supervisor.errors import ModelUnavailable
from mlx_gateway.supervisor.pool.model_handle import ModelHandle
from mlx_gateway.supervisor.pool.worker_call import WorkerCall, unwrap


@dataclass(frozen=True)
class Picture:
    """A finished picture (``partial`` is None) or a preview of one."""

    index: int
    width: int
    height: int
    seed: int
    data: bytes
    partial: int | None = None


RUNNING: dict[str, dict[str, ImageJob]] = {}
"""Model name → request id → the jobs in flight, for ``/v1/models``."""


def progress_of(model: str) -> list[dict[str, Any]]:
    """The progress of the image requests in flight on ``model``, oldest first."""
    return [job.progress for job in RUNNING.get(model, {}).values()]


class ImageJob:
    """An image request the worker accepted (it sent ``Started``).

    Iterate :meth:`updates` for progress, previews and finished pictures as they
    come, or await :meth:`collect`; both raise :class:`~..errors.GatewayError`
    when the request fails on the worker. Always :meth:`aclose` it: leaving early
    cancels the work."""

    def __init__(self, call: WorkerCall[GenerateImage], model: str) -> None:
        self._call = call
        msg = call.msg
        self._model = model
        self.request_id = msg.request_id
        self.started = time.time()
        self.progress: dict[str, Any] = {
            "id": msg.request_id,
            "images": msg.n,
            "image": 0,
            "step": 0,
            "steps": None,
        }
        self.finish_reason: str | None = None
        self._closed = False
        RUNNING.setdefault(model, {})[self.request_id] = self

    @classmethod
    async def start(
        cls, handle: ModelHandle, model: str, msg: GenerateImage, files: list[bytes]
    ) -> ImageJob:
        """Enter ``handle``'s session (waiting for the model), send ``msg`` with its
        input ``files`` and wait until the worker accepted it.

        Raises the request's error (400 bad size for this model, 503 the model
        failed to load, …) with nothing left open."""
        recorder.note_handle(handle)
        call = WorkerCall(handle, msg, files, what="image request")
        await call.first(until=Started)
        return cls(call, model)

    async def updates(self) -> AsyncIterator[Picture | ImageStep]:
        """Step progress, previews and finished pictures, in the order the worker
        sent them; ends after the worker's ``Done``, with :attr:`finish_reason` set."""
        while True:
            reply, payloads = unwrap(await self._call.next())
            match reply:
                case ImageStep(index=index, step=step, steps=steps):
                    self.progress.update(image=index + 1, step=step, steps=steps)
                    yield reply
                case Image() if payloads:
                    if reply.partial is None:
                        recorder.note_images(1)
                    yield Picture(
                        reply.index,
                        reply.width,
                        reply.height,
                        reply.seed,
                        payloads[0],
                        reply.partial,
                    )
                case Done(finish_reason=reason):
                    self.finish_reason = reason
                    self._check_finished()
                    return

    async def collect(self) -> list[Picture]:
        """Run to the end; the finished pictures in index order."""
        done = [u async for u in self.updates() if isinstance(u, Picture) and u.partial is None]
        return sorted(done, key=lambda p: p.index)

    def _check_finished(self) -> None:
        if self.finish_reason == "cancelled":
            # Only the worker's own stop cancels a request whose client is still here.
            raise ModelUnavailable(
                "The image request was stopped on the worker (it is shutting down).",
                code="cancelled",
            )

    async def aclose(self) -> None:
        """Leave the session (idempotent); cancels the work if it did not finish.
        Shielded, so that it completes inside a cancelled task too."""
        if self._closed:
            return
        self._closed = True
        jobs = RUNNING.get(self._model, {})
        jobs.pop(self.request_id, None)
        if not jobs:
            RUNNING.pop(self._model, None)
        await self._call.aclose()
