"""Image generation and editing with mflux.

One pipeline per worker (see :mod:`.image_families`): ``options["mode"]`` is
``generate`` (text to image) or ``edit`` (input images, maybe a mask). Requests
wait in arrival order; each :meth:`ImageBackend.step` makes one picture of the
request at the head (its whole diffusion loop and VAE decode), so other requests
and cancels are taken between pictures. Inside a picture an mflux in-loop callback
reports every denoising step and peeks at the serve loop's inbox (see
:func:`.base.serve`): a ``Cancel`` for the request, or the worker being stopped,
ends the loop at the next step (:mod:`.loop`). A request's checks and its input
files are :mod:`.job`'s.

Replies per request::

    Started                       the request passed the checks (size, steps, inputs)
    ImageStep(index, step, steps) after every denoising step
    Image(index, …, partial=k)    optional previews; payload 0 is the encoded file
    Image(index, width, height, seed)   each finished picture; payload 0 the file
    Done("stop" | "cancelled")

or one ``Error`` (400, before ``Started``) when a check fails. Picture ``i`` uses
seed ``seed + i``; without a seed one is drawn at random per request.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from mlx_gateway.protocol.messages import (
    Done,
    Error,
    GenerateImage,
    Image,
    ModelFacts,
    Progress,
    Request,
    Started,
)
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.workers.image.families import (
    Preset,
    import_object,
    pipeline_class,
    resolve_preset,
)
from mlx_gateway.workers.image.files import encode
from mlx_gateway.workers.image.job import ImageOptions, Job, accept
from mlx_gateway.workers.image.loop import Interrupted, LoopWatch
from mlx_gateway.workers.runtime.contract import (
    Backend,
    Emit,
    Inbox,
    LoadError,
    RequestError,
    drop,
)

# mflux draws a tqdm bar per picture on stderr; the gateway logs our step lines instead.
os.environ.setdefault("TQDM_DISABLE", "1")

log = logging.getLogger(__name__)


def create_backend() -> ImageBackend:
    return ImageBackend()


class ImageBackend(Backend):
    """The ``image`` backend (see the module docstring for the reply sequence)."""

    def __init__(self) -> None:
        self.model: Any = None
        self.preset: Preset | None = None
        self.options = ImageOptions()
        self._emit: Emit = drop
        self._queue: deque[Job] = deque()
        self._loop = LoopWatch()
        self._tmp: Path | None = None
        """Made for the first edit's input files (generations need none)."""

    @property
    def scratch_dir(self) -> Path | None:
        """Where edit inputs are stored while their request runs (made at the first)."""
        return self._tmp

    # ------------------------------------------------------------ loading

    def load(self, spec: WorkerSpec, emit: Emit) -> ModelFacts:
        self._emit = self._loop.emit = emit
        try:
            self.options = msgspec.convert(spec.options, ImageOptions)
        except msgspec.ValidationError as exc:
            raise LoadError(f"invalid image options: {exc}") from None
        options = self.options
        self.preset = preset = resolve_preset(
            options.config_name, spec.model_path, options.model_config
        )
        cls = pipeline_class(preset, options.mode)
        if options.lora_scales and len(options.lora_scales) != len(options.lora_paths):
            raise LoadError("lora_scales must give one scale per entry of lora_paths")
        path = _local_or_repo(spec.model_path)
        emit(Progress(stage="load", detail=f"{path} ({preset.key}, {cls.__name__})"))
        try:
            self.model = cls(
                quantize=options.quantize,
                model_path=path,
                lora_paths=options.lora_paths or None,
                lora_scales=options.lora_scales or None,
                model_config=preset.model_config,
            )
        except Exception as exc:
            raise LoadError(_load_failure(spec.model_path, exc)) from None
        self.model.callbacks.register(self._loop)
        self._loop.model = self.model
        self._loop.latents = import_object(preset.family.latent_creator)
        bits = getattr(self.model, "bits", None)
        return ModelFacts(
            model_type=preset.key,
            extra={
                "family": preset.family.name,
                "mode": options.mode,
                "pipeline": cls.__name__,
                "quantize": "" if bits is None else str(bits),
                "multiple_of": str(preset.family.multiple_of),
                "default_steps": str(self._default_steps()),
            },
        )

    def _default_steps(self) -> int:
        if self.options.steps is not None:
            return self.options.steps
        from mflux.cli.defaults.defaults import model_inference_steps

        assert self.preset is not None
        return model_inference_steps(self.preset.key)

    # ------------------------------------------------------------ requests

    def watch_inbox(self, inbox: Inbox) -> None:
        self._loop.inbox = inbox

    def submit(self, request: Request, payloads: Sequence[bytes]) -> None:
        if not isinstance(request, GenerateImage):
            raise RequestError(
                f"an image worker does not serve '{type(request).__name__}' requests"
            )
        if any(job.request_id == request.request_id for job in self._queue):
            log.warning("duplicate request_id %s ignored", request.request_id)
            return
        assert self.preset is not None
        job = accept(
            request,
            payloads,
            preset=self.preset,
            options=self.options,
            default_steps=self._default_steps(),
            scratch=self._scratch,
        )
        self._queue.append(job)
        self._emit(Started(request_id=job.request_id))

    def _scratch(self) -> Path:
        if self._tmp is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="mlx-gateway-image-"))
        return self._tmp

    def cancel(self, request_id: str) -> None:
        job = next((j for j in self._queue if j.request_id == request_id), None)
        if job is not None:
            self._queue.remove(job)
            self._finish(job, "cancelled")

    def cancel_all(self) -> None:
        for job in list(self._queue):
            self.cancel(job.request_id)

    def counts(self) -> tuple[int, int]:
        queued = len(self._queue)
        return min(queued, 1), max(queued - 1, 0)

    def has_work(self) -> bool:
        return bool(self._queue)

    # ------------------------------------------------------------ generation

    def step(self) -> None:
        job = self._queue[0]
        index = job.done
        seed = job.seed_of(index)
        self._loop.begin(job, index)
        log.info(
            "%s: picture %d/%d, %dx%d, %d steps, seed %d",
            job.request_id,
            index + 1,
            job.request.n,
            job.width,
            job.height,
            job.steps,
            seed,
        )
        try:
            result = self.model.generate_image(**self._arguments(job, seed))
        except Interrupted:
            log.info("%s: stopped at step %d/%d", job.request_id, self._loop.step, job.steps)
            self._queue.popleft()
            self._finish(job, "cancelled")
            return
        finally:
            self._loop.end()
        picture = result.image
        data = encode(picture, job.request.output_format, job.request.output_compression)
        width, height = picture.size
        self._emit(
            Image(request_id=job.request_id, index=index, width=width, height=height, seed=seed),
            [data],
        )
        log.info(
            "%s: picture %d/%d done in %.2f s (%d bytes)",
            job.request_id,
            index + 1,
            job.request.n,
            time.monotonic() - self._loop.started,
            len(data),
        )
        job.done += 1
        if job.done == job.request.n:
            self._queue.popleft()
            self._finish(job, "stop")

    def _arguments(self, job: Job, seed: int) -> dict[str, Any]:
        assert self.preset is not None
        family = self.preset.family
        request = job.request
        kwargs: dict[str, Any] = {
            "seed": seed,
            "prompt": request.prompt,
            "num_inference_steps": job.steps,
            "width": job.width,
            "height": job.height,
        }
        if job.guidance is not None:
            kwargs["guidance"] = job.guidance
        if request.negative_prompt:
            kwargs["negative_prompt"] = request.negative_prompt
        if job.inputs:
            paths = [str(p) for p in job.inputs]
            if family.edit_inputs == "image_paths":
                kwargs["image_paths"] = paths
            else:
                kwargs["image_path"] = paths[0]
            if job.mask is not None:
                kwargs["masked_image_path"] = str(job.mask)
        return kwargs

    def _finish(self, job: Job, reason: str) -> None:
        self._emit(Done(request_id=job.request_id, finish_reason=reason))
        job.discard_files()

    def fail_active(self, message: str) -> None:
        if self._queue:
            job = self._queue.popleft()
            self._emit(Error(message=message, request_id=job.request_id, status=500))
            job.discard_files()

    def close(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)


# ---------------------------------------------------------------- helpers


def _local_or_repo(model_path: str) -> str:
    """A local directory as an absolute path; a repo id as it is (mflux resolves it)."""
    local = Path(model_path).expanduser()
    if local.exists():
        if not local.is_dir():
            raise LoadError(f"model path '{local}' is not a directory")
        return str(local.resolve())
    return model_path


def _load_failure(model_path: str, exc: Exception) -> str:
    from huggingface_hub import constants

    text = f"{type(exc).__name__}: {exc}"
    if not Path(model_path).expanduser().exists() and constants.HF_HUB_OFFLINE:
        return (
            f"download failed: model '{model_path}' could not be loaded from the local "
            f"Hugging Face cache and the hub cannot be reached (offline: HF_HUB_OFFLINE "
            f"is set); {text}"
        )
    return f"load failed: {model_path}: {text}"
