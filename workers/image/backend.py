"""Image generation and editing with mflux.

One pipeline per worker (see :mod:`.image_families`): ``options["mode"]`` is
``generate`` (text to image) or ``edit`` (input images, maybe a mask). Requests
wait in arrival order; each :meth:`ImageBackend.step` makes one picture of the
request at the head (its whole diffusion loop and VAE decode), so other requests
and cancels are taken between pictures. Inside a picture an mflux in-loop callback
reports every denoising step and peeks at the serve loop's inbox (see
:func:`.base.serve`): a ``Cancel`` for the request, or the worker being stopped,
ends the loop at the next step.

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
import math
import os
import queue
import random
import shutil
import tempfile
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from mlx_gateway.protocol.messages import (
    Cancel,
    Done,
    Error,
    GenerateImage,
    Image,
    ImageStep,
    ModelFacts,
    Progress,
    Request,
    Shutdown,
    Started,
)
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.workers.image.families import (
    Mode,
    Preset,
    import_object,
    pipeline_class,
    resolve_preset,
)
from mlx_gateway.workers.image.files import (
    OUTPUT_FORMATS,
    encode,
    fill_mask,
    open_upload,
    save_input,
)
from mlx_gateway.workers.runtime.contract import (
    Abort,
    Backend,
    Emit,
    Inbox,
    InboxItem,
    LoadError,
    RequestError,
    drop,
)

# mflux draws a tqdm bar per picture on stderr; the gateway logs our step lines instead.
os.environ.setdefault("TQDM_DISABLE", "1")

log = logging.getLogger(__name__)

"""``emit(reply, payloads=())``: the MLX thread's sender."""

MAX_IMAGES = 10
MAX_STEPS = 500
MAX_PARTIAL_IMAGES = 3
SEED_RANGE = 2**32


class ImageOptions(msgspec.Struct, kw_only=True):
    """The model entry's image settings, as the gateway puts them in ``spec.options``
    (other kinds' options, if any, are ignored)."""

    mode: Mode = "generate"
    config_name: str | None = None
    quantize: int | None = None
    lora_paths: list[str] = []
    lora_scales: list[float] = []
    model_config: dict[str, Any] = {}
    steps: int | None = None
    guidance: float | None = None
    width: int = 1024
    height: int = 1024
    max_pixels: int = 2048 * 2048


class _Interrupted(Exception):
    """Raised inside mflux's loop: the request was cancelled or the worker stops."""


@dataclass
class _Job:
    """One accepted request."""

    request: GenerateImage
    width: int | None
    """``None`` for an edit whose size follows its input image (the pipeline decides)."""
    height: int | None
    steps: int
    guidance: float | None
    seed: int
    inputs: list[Path] = field(default_factory=list)
    mask: Path | None = None
    partial_at: frozenset[int] = frozenset()
    """Denoising steps (1-based) after which a preview is sent."""
    done: int = 0
    """Finished pictures."""

    @property
    def request_id(self) -> str:
        return self.request.request_id

    def seed_of(self, index: int) -> int:
        return (self.seed + index) % SEED_RANGE


def create_backend() -> ImageBackend:
    return ImageBackend()


class ImageBackend(Backend):
    """The ``image`` backend (see the module docstring for the reply sequence)."""

    def __init__(self) -> None:
        self.model: Any = None
        self.preset: Preset | None = None
        self.options = ImageOptions()
        self._emit: Emit = drop
        self._queue: deque[_Job] = deque()
        self._inbox: queue.Queue[InboxItem] | None = None
        self._latents: Any = None
        self._tmp: Path | None = None
        """Made for the first edit's input files (generations need none)."""
        # Set while a picture is being made: what the in-loop callback reports on.
        self._current: _Job | None = None
        self._index = 0
        self._step = 0
        self._started = 0.0
        self._stop_by: float | None = None

    # ------------------------------------------------------------ loading

    def load(self, spec: WorkerSpec, emit: Emit) -> ModelFacts:
        self._emit = emit
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
        self.model.callbacks.register(_LoopHook(self))
        self._latents = import_object(preset.family.latent_creator)
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
        self._inbox = inbox

    def submit(self, request: Request, payloads: Sequence[bytes]) -> None:
        if not isinstance(request, GenerateImage):
            raise RequestError(
                f"an image worker does not serve '{type(request).__name__}' requests"
            )
        if any(job.request_id == request.request_id for job in self._queue):
            log.warning("duplicate request_id %s ignored", request.request_id)
            return
        job = self._check(request, payloads)
        self._queue.append(job)
        self._emit(Started(request_id=job.request_id))

    def _check(self, request: GenerateImage, payloads: Sequence[bytes]) -> _Job:
        assert self.preset is not None
        family = self.preset.family
        if not request.prompt.strip():
            raise RequestError("The prompt is empty.", param="prompt")
        if not 1 <= request.n <= MAX_IMAGES:
            raise RequestError(f"n must be between 1 and {MAX_IMAGES}.", param="n")
        steps = self._default_steps() if request.steps is None else request.steps
        if not 1 <= steps <= MAX_STEPS:
            raise RequestError(f"steps must be between 1 and {MAX_STEPS}.", param="steps")
        guidance = request.guidance
        if guidance is None:
            guidance = self.options.guidance
        if guidance is None:
            guidance = family.default_guidance
        if guidance is not None and not (math.isfinite(guidance) and guidance >= 0):
            raise RequestError("guidance must be a number of at least 0.", param="guidance")
        if request.negative_prompt and not family.negative_prompt:
            raise RequestError(
                f"This model ({self.preset.key}) does not take a negative_prompt.",
                param="negative_prompt",
            )
        if request.output_format not in OUTPUT_FORMATS:
            raise RequestError(
                f"output_format must be one of {', '.join(OUTPUT_FORMATS)}.",
                param="output_format",
            )
        compression = request.output_compression
        if compression is not None and not 0 <= compression <= 100:
            raise RequestError(
                "output_compression must be between 0 and 100.", param="output_compression"
            )
        if not 0 <= request.partial_images <= MAX_PARTIAL_IMAGES:
            raise RequestError(
                f"partial_images must be between 0 and {MAX_PARTIAL_IMAGES}.",
                param="partial_images",
            )
        job = _Job(
            request=request,
            width=request.width,
            height=request.height,
            steps=steps,
            guidance=guidance,
            seed=random.randrange(SEED_RANGE) if request.seed is None else request.seed,
            partial_at=_partial_steps(steps, request.partial_images),
        )
        inputs = self._inputs(request, payloads, job)
        try:
            if job.width is None or job.height is None:
                job.width, job.height = self._default_size(inputs)
            self._check_size(job.width, job.height)
        except RequestError:
            _discard_files(job)
            raise
        return job

    def _inputs(self, request: GenerateImage, payloads: Sequence[bytes], job: _Job) -> list[Any]:
        """Decode and store the edit inputs; returns the decoded images."""
        assert self.preset is not None
        family = self.preset.family
        expected = request.images + (1 if request.mask else 0)
        if len(payloads) != expected:
            raise RequestError(
                f"the request announced {expected} file(s) but carried {len(payloads)}",
                status=500,
                type="server_error",
            )
        if self.options.mode == "generate":
            if request.images or request.mask:
                raise RequestError(
                    "This model generates images from text; it does not take input images "
                    "(use a model of model_type image-edit with /v1/images/edits).",
                    param="image",
                )
            return []
        if request.images < 1:
            raise RequestError("An edit needs at least one input image.", param="image")
        if request.images > family.max_images:
            raise RequestError(
                f"This model takes at most {family.max_images} input image(s); "
                f"got {request.images}.",
                param="image",
            )
        if request.mask and family.edit_inputs != "fill":
            raise RequestError(
                f"This model ({self.preset.key}) edits the whole image and takes no mask.",
                param="mask",
            )
        if family.edit_inputs == "fill" and not request.mask:
            raise RequestError(
                f"This model ({self.preset.key}) paints inside a mask: send a 'mask'.",
                param="mask",
            )
        multiple = family.multiple_of
        images = [open_upload(data, "image", multiple) for data in payloads[: request.images]]
        mask = None
        if request.mask:
            mask = fill_mask(open_upload(payloads[-1], "mask", multiple), images[0].size)
        # Files only once every input is known good: a rejected request leaves none.
        if self._tmp is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="mlx-gateway-image-"))
        folder = Path(tempfile.mkdtemp(dir=self._tmp))
        job.inputs = [save_input(img, folder / f"input-{i}.png") for i, img in enumerate(images)]
        if mask is not None:
            job.mask = save_input(mask, folder / "mask.png")
        return images

    def _default_size(self, inputs: list[Any]) -> tuple[int, int]:
        """The configured size; for an edit, its first input's size within the limits."""
        options = self.options
        if not inputs:
            return options.width, options.height
        assert self.preset is not None
        width, height = inputs[0].size
        scale = min(1.0, math.sqrt(options.max_pixels / (width * height)))
        multiple = self.preset.family.multiple_of
        snap = lambda side: max(multiple, int(side * scale) // multiple * multiple)  # noqa: E731
        return snap(width), snap(height)

    def _check_size(self, width: int, height: int) -> None:
        assert self.preset is not None
        multiple = self.preset.family.multiple_of
        given = f"{width}x{height}"
        if width < multiple or height < multiple or width % multiple or height % multiple:
            low = lambda side: max(multiple, side // multiple * multiple)  # noqa: E731
            raise RequestError(
                f"size {given} is not valid for this model: width and height must be "
                f"positive multiples of {multiple} (e.g. {low(width)}x{low(height)}).",
                param="size",
            )
        if width * height > self.options.max_pixels:
            raise RequestError(
                f"size {given} is too large for this model: at most "
                f"{self.options.max_pixels:,} pixels (max_output_pixels).",
                param="size",
            )

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
        self._current, self._index, self._step = job, index, 0
        self._started = time.monotonic()
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
        except _Interrupted:
            log.info("%s: stopped at step %d/%d", job.request_id, self._step, job.steps)
            self._queue.popleft()
            self._finish(job, "cancelled")
            return
        finally:
            self._current = None
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
            time.monotonic() - self._started,
            len(data),
        )
        job.done += 1
        if job.done == job.request.n:
            self._queue.popleft()
            self._finish(job, "stop")

    def _arguments(self, job: _Job, seed: int) -> dict[str, Any]:
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

    def on_step(self, t: int, latents: Any, config: Any) -> None:
        """mflux's in-loop callback: report the step, send a preview, honour a stop."""
        job = self._current
        if job is None:
            return
        self._step += 1
        self._emit(
            ImageStep(
                request_id=job.request_id, index=self._index, step=self._step, steps=job.steps
            )
        )
        log.info(
            "%s: picture %d/%d step %d/%d (%.1f s)",
            job.request_id,
            self._index + 1,
            job.request.n,
            self._step,
            job.steps,
            time.monotonic() - self._started,
        )
        if self._must_stop(job):
            raise _Interrupted
        if self._step in job.partial_at:
            self._preview(job, latents, config)

    def _must_stop(self, job: _Job) -> bool:
        """A Cancel for ``job`` or an Abort waits in the inbox, or a Shutdown's grace
        period ran out."""
        inbox = self._inbox
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

    def _preview(self, job: _Job, latents: Any, config: Any) -> None:
        """Decode the loop's current latents into a picture and send it as a partial."""
        from mflux.utils.image_util import ImageUtil

        unpacked = self._latents.unpack_latents(
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
        number = sorted(job.partial_at).index(self._step)
        data = encode(picture, job.request.output_format, job.request.output_compression)
        width, height = picture.size
        self._emit(
            Image(
                request_id=job.request_id,
                index=self._index,
                width=width,
                height=height,
                seed=job.seed_of(self._index),
                partial=number,
            ),
            [data],
        )

    def _finish(self, job: _Job, reason: str) -> None:
        self._emit(Done(request_id=job.request_id, finish_reason=reason))
        _discard_files(job)

    def fail_active(self, message: str) -> None:
        if self._queue:
            job = self._queue.popleft()
            self._emit(Error(message=message, request_id=job.request_id, status=500))
            _discard_files(job)

    def close(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)


class _LoopHook:
    """Registered with the pipeline's callbacks; mflux calls it after every step."""

    def __init__(self, backend: ImageBackend) -> None:
        self._backend = backend

    def call_in_loop(
        self, t: int, seed: int, prompt: str, latents: Any, config: Any, time_steps: Any
    ) -> None:
        self._backend.on_step(t, latents, config)


# ---------------------------------------------------------------- helpers


def _partial_steps(steps: int, partial_images: int) -> frozenset[int]:
    """Steps after which previews go out: spread evenly, never the last step."""
    if partial_images <= 0 or steps < 2:
        return frozenset()
    count = min(partial_images, steps - 1)
    return frozenset(max(1, round(steps * (k + 1) / (count + 1))) for k in range(count))


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


def _discard_files(job: _Job) -> None:
    if job.inputs:
        shutil.rmtree(job.inputs[0].parent, ignore_errors=True)
