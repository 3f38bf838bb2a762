"""Speech to text with mlx-whisper: the ``whisper`` backend.

A :class:`~mlx_gateway.protocol.messages.Transcribe` request carries the uploaded
file as payload 0. Its work is cut into bounded steps, so that a cancel or a new
request is seen between them and concurrent requests take turns (one step each,
round robin, up to ``spec.max_concurrency`` at once; later ones wait in order):

1. *decode*: up to :data:`DECODE_SECONDS` of audio per step, decoded by PyAV from
   the upload and turned into log-Mel frames at once (:mod:`.mel`). When the file
   is decoded the upload is dropped and ``Started`` is sent; a file that cannot be
   decoded is answered with ``Error(400)`` instead, still before ``Started``.
2. *windows*: one 30 s window per step (:mod:`.transcriber`); each window's text
   goes out as one ``Chunk``.
3. ``Transcript`` (text, language, duration, segments with their words when asked)
   and ``Done(stop)``, whose usage counts the text tokens as completion tokens.

Memory per request: the upload until it is decoded, then the log-Mel frames
(80 floats per 10 ms, 115 MB per hour of audio) and one window. The decoded
samples never exist whole: at most :data:`DECODE_SECONDS` of them at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from mlx.utils import tree_map
from mlx_whisper.load_models import load_model

from mlx_gateway.protocol.messages import (
    Chunk,
    Done,
    Error,
    ModelFacts,
    Progress,
    Request,
    Started,
    Transcribe,
    Transcript,
    Usage,
)
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.workers.common.audio import SAMPLE_RATE, AudioError, decode_audio
from mlx_gateway.workers.common.turns import TakingTurns
from mlx_gateway.workers.runtime.contract import Emit, LoadError, RequestError
from mlx_gateway.workers.runtime.hub import resolve_model_path
from mlx_gateway.workers.whisper.mel import LogMel, MelBuilder
from mlx_gateway.workers.whisper.transcriber import (
    Options,
    Transcriber,
    language_code,
    language_name,
)

log = logging.getLogger(__name__)

DECODE_SECONDS = 60.0
"""Audio decoded per step: bounds both the step's time and the samples held."""
WEIGHT_FILES = ("weights.safetensors", "weights.npz")
TASKS = ("transcribe", "translate")
_SEGMENT_KEYS = (
    "id",
    "seek",
    "start",
    "end",
    "text",
    "tokens",
    "temperature",
    "avg_logprob",
    "compression_ratio",
    "no_speech_prob",
)


def create_backend() -> WhisperBackend:
    return WhisperBackend()


@dataclass
class _Job:
    """One accepted request, from its upload to its transcript."""

    request: Transcribe
    options: Options
    upload: bytes | None
    samples: Iterator[np.ndarray] | None = None
    builder: MelBuilder | None = None
    mel: LogMel | None = None
    transcriber: Transcriber | None = None
    sent_tokens: int = 0

    @property
    def request_id(self) -> str:
        return self.request.request_id

    def release(self) -> None:
        """Drop the upload, the decoder and the frames."""
        if self.samples is not None and hasattr(self.samples, "close"):
            self.samples.close()  # closes PyAV's container
        self.upload = self.samples = self.builder = self.transcriber = None
        if self.mel is not None:
            self.mel.release()
            self.mel = None


class WhisperBackend(TakingTurns[_Job]):
    """The ``whisper`` backend (see the module docstring for the reply sequence)."""

    def __init__(self) -> None:
        super().__init__()
        self.model: Any = None
        self.dtype: mx.Dtype = mx.float32

    # ------------------------------------------------------------ loading

    def load(self, spec: WorkerSpec, emit: Emit) -> ModelFacts:
        self._spec = spec
        self._emit = emit

        def downloading(repo: str) -> None:
            emit(Progress(stage="download", detail=repo))

        path = _model_dir(spec.model_path, downloading)
        self.dtype = _compute_dtype()
        emit(Progress(stage="load", detail=str(path)))
        model = load_model(str(path), dtype=self.dtype)
        # load_model keeps the stored dtype (mlx-community ships float16); on a CPU
        # float32 is several times faster, and decoding checks the dtype it expects.
        dtype = self.dtype
        model.update(
            tree_map(
                lambda a: a.astype(dtype) if mx.issubdtype(a.dtype, mx.floating) else a,
                model.parameters(),
            )
        )
        mx.eval(model.parameters())
        self.model = model
        dims = model.dims
        return ModelFacts(
            context_length=dims.n_text_ctx,
            model_type="whisper",
            extra={
                "multilingual": str(model.is_multilingual).lower(),
                "dtype": str(dtype).removeprefix("mlx.core."),
                "n_mels": str(dims.n_mels),
            },
        )

    # ------------------------------------------------------------ requests

    def submit(self, request: Request, payloads: Sequence[bytes]) -> None:
        if not isinstance(request, Transcribe):
            raise RequestError(
                f"a whisper worker serves audio transcriptions, not '{type(request).__name__}' "
                "requests"
            )
        if request.request_id in self._by_id:
            log.warning("duplicate request_id %s ignored", request.request_id)
            return
        if not payloads or not payloads[0]:
            raise RequestError("the audio file is missing or empty", param="file")
        if request.task not in TASKS:
            raise RequestError(f"unknown task {request.task!r}", param="task")
        if not 0.0 <= request.temperature <= 1.0:
            raise RequestError("temperature must be between 0 and 1", param="temperature")
        try:
            language = language_code(self.model, request.language)
        except ValueError as exc:
            raise RequestError(str(exc), param="language") from None
        options = Options(
            task=request.task,
            language=language,
            prompt=request.prompt,
            temperature=request.temperature,
            word_timestamps=request.word_timestamps,
        )
        job = _Job(request, options, upload=bytes(payloads[0]))
        self._accept(job)

    def cancel(self, request_id: str) -> None:
        job = self._by_id.get(request_id)
        if job is None:
            return
        usage = _usage(job)
        self._forget(job)
        log.info("transcription %s cancelled", request_id)
        self._emit(Done(request_id=request_id, finish_reason="cancelled", usage=usage))

    # ------------------------------------------------------------ work

    def step(self) -> None:
        job = self._next_turn()
        if job is None:
            return
        if job.transcriber is None:
            self._decode_step(job)
        else:
            self._window_step(job, job.transcriber)
        self._current = None

    def _decode_step(self, job: _Job) -> None:
        if job.samples is None:
            assert job.upload is not None
            job.samples = decode_audio(job.upload)
            job.builder = MelBuilder(self.model.dims.n_mels)
        builder = job.builder
        assert builder is not None
        goal = builder.samples + int(DECODE_SECONDS * SAMPLE_RATE)
        try:
            while builder.samples < goal:
                block = next(job.samples, None)
                if block is None:
                    break
                builder.add(block)
            else:
                return  # more to decode at the next step
        except AudioError as exc:
            self._reject(job, str(exc))
            return
        mel = builder.finish()
        job.upload = job.samples = job.builder = None  # decoded: free the upload
        if mel.frames == 0:
            self._reject(job, "the file holds no audio samples")
            return
        job.mel = mel
        job.transcriber = Transcriber(self.model, mel, job.options, self.dtype)
        self._emit(Started(request_id=job.request_id))

    def _window_step(self, job: _Job, transcriber: Transcriber) -> None:
        segments = transcriber.step()
        text = "".join(segment["text"] for segment in segments)
        if text:
            tokens = transcriber.text_tokens - job.sent_tokens
            job.sent_tokens = transcriber.text_tokens
            self._emit(Chunk(request_id=job.request_id, text=text, tokens=tokens))
        if not transcriber.done:
            return
        assert job.mel is not None
        self._emit(
            Transcript(
                request_id=job.request_id,
                text=transcriber.text(),
                language=language_name(transcriber.language),
                duration=round(job.mel.duration, 3),
                segments=[_segment_out(s) for s in transcriber.segments],
            )
        )
        usage = _usage(job)
        self._forget(job)
        self._emit(Done(request_id=job.request_id, finish_reason="stop", usage=usage))

    def _reject(self, job: _Job, reason: str) -> None:
        self._forget(job)
        self._emit(
            Error(
                message=f"the audio file cannot be used: {reason}",
                request_id=job.request_id,
                status=400,
                type="invalid_request_error",
                param="file",
            )
        )


# ---------------------------------------------------------------- helpers


def _model_dir(model_path: str, downloading: Any) -> Path:
    """The model's local folder: mlx-whisper's ``config.json`` and
    ``weights.safetensors`` (or the older ``weights.npz`` of many mlx-community repos)."""
    local = Path(model_path).expanduser()
    weighed = any((local / name).is_file() for name in WEIGHT_FILES)
    if (local / "config.json").is_file() and not weighed:
        raise LoadError(
            f"model directory '{local}' has no weights.safetensors (mlx-whisper's format); "
            "convert a faster-whisper model with `mlx-gateway convert-whisper SRC DST`"
        )
    patterns = ["config.json", *WEIGHT_FILES]
    return resolve_model_path(model_path, downloading, allow_patterns=patterns, weights="weights.*")


def _compute_dtype() -> mx.Dtype:
    """float16 on a GPU (Metal, CUDA), where it is fast; float32 on a CPU, where
    float16 matmuls have no BLAS and run several times slower."""
    return mx.float16 if mx.default_device() == mx.gpu else mx.float32


def _finite(value: Any) -> Any:
    # A degenerate window can score NaN; JSON has no NaN and clients expect numbers.
    if isinstance(value, float) and not np.isfinite(value):
        return 0.0
    return value


def _segment_out(segment: dict[str, Any]) -> dict[str, Any]:
    """A segment with the OpenAI fields only (and ``words`` when they were asked)."""
    out = {key: _finite(segment[key]) for key in _SEGMENT_KEYS}
    out["start"] = round(float(out["start"]), 3)
    out["end"] = round(float(out["end"]), 3)
    if "words" in segment:
        out["words"] = [
            {
                "word": word["word"],
                "start": float(word["start"]),
                "end": float(word["end"]),
                "probability": _finite(float(word["probability"])),
            }
            for word in segment["words"]
        ]
    return out


def _usage(job: _Job) -> Usage:
    transcriber = job.transcriber
    return Usage(completion_tokens=transcriber.text_tokens if transcriber else 0)
