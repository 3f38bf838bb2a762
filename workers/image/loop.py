"""Inside mflux's diffusion loop: the picture being made, reported step by step.

:class:`LoopWatch` is registered with the pipeline's callbacks; mflux calls its
:meth:`LoopWatch.call_in_loop` after every denoising step. It sends ``ImageStep``,
decodes a preview at the request's ``partial_at`` steps, and peeks at the serve
loop's inbox (see :func:`~mlx_gateway.workers.runtime.serve.serve`): a ``Cancel``
for the request, an ``Abort``, or a ``Shutdown`` whose grace ran out raises
:class:`Interrupted` out of the loop.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from mlx_gateway.protocol.messages import Cancel, Image, ImageStep, Shutdown
from mlx_gateway.workers.image.files import encode
from mlx_gateway.workers.image.job import Job
from mlx_gateway.workers.runtime.contract import Abort, Emit, Inbox, drop

log = logging.getLogger("mlx_gateway.workers.image.backend")


class Interrupted(Exception):
    """Raised inside mflux's loop: the request was cancelled or the worker stops."""


class LoopWatch:
    """The picture being made (set by :meth:`begin`, cleared by :meth:`end`)."""

    def __init__(self) -> None:
        self.emit: Emit = drop
        self.inbox: Inbox | None = None
        self.model: Any = None  # the pipeline (its VAE decodes previews)
        self.latents: Any = None  # the family's latent creator (unpacks them)
        self.job: Job | None = None
        self.index = 0
        self.step = 0
        self.started = 0.0
        self._stop_by: float | None = None

    def begin(self, job: Job, index: int) -> None:
        self.job, self.index, self.step = job, index, 0
        self.started = time.monotonic()

    def end(self) -> None:
        self.job = None

    def call_in_loop(
        self, t: int, seed: int, prompt: str, latents: Any, config: Any, time_steps: Any
    ) -> None:
        """mflux's in-loop callback: report the step, send a preview, honour a stop."""
        job = self.job
        if job is None:
            return
        self.step += 1
        self.emit(
            ImageStep(request_id=job.request_id, index=self.index, step=self.step, steps=job.steps)
        )
        log.info(
            "%s: picture %d/%d step %d/%d (%.1f s)",
            job.request_id,
            self.index + 1,
            job.request.n,
            self.step,
            job.steps,
            time.monotonic() - self.started,
        )
        if self._must_stop(job):
            raise Interrupted
        if self.step in job.partial_at:
            self._preview(job, latents, config)

    def _must_stop(self, job: Job) -> bool:
        """A Cancel for ``job`` or an Abort waits in the inbox, or a Shutdown's grace
        period ran out."""
        inbox = self.inbox
        if inbox is None:
            return False
        with inbox.mutex:  # a peek: the serve loop still takes every item itself
            pending = list(inbox.queue)
        now = time.monotonic()
        for item in pending:
            if isinstance(item, Abort):
                return True
            message = item[0]
            if isinstance(message, Cancel) and message.request_id == job.request_id:
                return True
            if isinstance(message, Shutdown) and self._stop_by is None:
                self._stop_by = now + max(message.grace, 0.0)
        return self._stop_by is not None and now >= self._stop_by

    def _preview(self, job: Job, latents: Any, config: Any) -> None:
        """Decode the loop's current latents into a picture and send it as a partial."""
        from mflux.utils.image_util import ImageUtil

        unpacked = self.latents.unpack_latents(
            latents=latents, height=config.height, width=config.width
        )
        vae = self.model.vae
        if hasattr(vae, "decode_packed_latents") and unpacked.shape[1] > getattr(
            vae, "latent_channels", 32
        ):
            decoded = vae.decode_packed_latents(unpacked)
        else:
            decoded = vae.decode(unpacked)
        picture = ImageUtil.to_pil(decoded)
        number = sorted(job.partial_at).index(self.step)
        data = encode(picture, job.request.output_format, job.request.output_compression)
        width, height = picture.size
        self.emit(
            Image(
                request_id=job.request_id,
                index=self.index,
                width=width,
                height=height,
                seed=job.seed_of(self.index),
                partial=number,
            ),
            [data],
        )
