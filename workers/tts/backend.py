"""Text to speech with mlx-audio: the ``tts`` backend.

Any model family mlx-audio's own loader (``mlx_audio.tts.utils.load_model``) reads
is served: Kokoro, Kitten, Soprano, Qwen3-TTS, Sesame/CSM, Dia, OuteTTS, Spark, …;
the worker keeps no list of its own. A :class:`~mlx_gateway.protocol.messages.Synthesize`
request is checked (its voice among the model's, see :mod:`.voices`) and answered
with ``Started`` at once, then worked off in bounded steps, so that a cancel or
another request is seen between them (up to ``spec.max_concurrency`` requests take
turns, one step each; later ones wait in order):

1. The text is cut into sentences (:mod:`.text`); each is one call of the model's
   ``generate``, which yields its audio in one or more results (several with the
   model's own streaming). One step takes one result.
2. Each result's samples are encoded at once in the request's format
   (:mod:`.encode`) and sent as a ``SpeechChunk`` (payload 0: the file's next
   bytes), so the client hears the first sentence while the rest is synthesized.
3. After the last sentence, a ``SpeechChunk`` with the file's last bytes and
   ``Done(stop)`` (usage: the input's characters as prompt tokens). A request whose
   model produced no audio at all ends with ``Error(500)``, never an empty file.
"""

from __future__ import annotations

import inspect
import logging
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import numpy as np

from mlx_gateway.protocol.messages import (
    Done,
    Error,
    ModelFacts,
    Progress,
    Request,
    SpeechChunk,
    Started,
    Synthesize,
    Usage,
)
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.workers.common.turns import TakingTurns
from mlx_gateway.workers.runtime.contract import Emit, LoadError, RequestError
from mlx_gateway.workers.runtime.hub import resolve_model_path
from mlx_gateway.workers.tts.encode import FORMATS, Encoder
from mlx_gateway.workers.tts.tempo import Tempo
from mlx_gateway.workers.tts.text import split_text
from mlx_gateway.workers.tts.voices import Voices, model_voices

log = logging.getLogger(__name__)

STREAMING_INTERVAL = 1.0
"""Seconds of audio per result for models that stream inside a sentence."""


def create_backend() -> TtsBackend:
    return TtsBackend()


@dataclass
class _Job:
    """One accepted request, from its text to the file's last byte."""

    request: Synthesize
    pieces: deque[str]
    kwargs: dict[str, Any]
    results: Iterator[Any] | None = None
    encoder: Encoder | None = None
    tempo: Tempo | None = None
    """The request's speed, for a model that has no speed setting of its own."""
    seconds: float = 0.0
    sample_rate: int = 0

    @property
    def request_id(self) -> str:
        return self.request.request_id

    def release(self) -> None:
        if self.encoder is not None:
            self.encoder.close()
        self.encoder = None
        self.tempo = None
        self.results = None
        self.pieces.clear()


class TtsBackend(TakingTurns[_Job]):
    """The ``tts`` backend (see the module docstring for the reply sequence)."""

    def __init__(self) -> None:
        super().__init__()
        self.model: Any = None
        self.voices: Voices | None = None
        self._params: dict[str, inspect.Parameter] = {}
        self._generate_kwargs: dict[str, Any] = {}

    # ------------------------------------------------------------ loading

    def load(self, spec: WorkerSpec, emit: Emit) -> ModelFacts:
        from mlx_audio.tts.utils import load_model
        from mlx_audio.utils import DEFAULT_ALLOW_PATTERNS

        self._spec = spec
        self._emit = emit

        def downloading(repo: str) -> None:
            emit(Progress(stage="download", detail=repo))

        path = resolve_model_path(
            spec.model_path, downloading, allow_patterns=list(DEFAULT_ALLOW_PATTERNS)
        )
        emit(Progress(stage="load", detail=str(path)))
        try:
            model = load_model(path)
        except ValueError as exc:  # mlx-audio's words for an unknown model type
            raise LoadError(f"mlx-audio cannot load {spec.model_path}: {exc}") from None
        if not callable(getattr(model, "generate", None)):
            raise LoadError(f"{spec.model_path} is not a text-to-speech model of mlx-audio")
        self.model = model
        self._params = dict(inspect.signature(model.generate).parameters)
        options = spec.options
        self._generate_kwargs = dict(options.get("generate_kwargs") or {})
        try:
            self.voices = Voices(
                model_voices(model, path),
                dict(options.get("voice_aliases") or {}),
                options.get("voice"),
                spec.served_model_name,
            )
        except ValueError as exc:
            raise LoadError(f"{spec.served_model_name}: {exc}") from None
        family = getattr(model, "model_type", None) or type(model).__module__.split(".")[-2]
        return ModelFacts(
            model_type="tts",
            extra={
                "sample_rate": str(self.sample_rate),
                "voices": ",".join(self.voices.names()),
                "family": str(family),
                "instructions": str(self._takes("instruct")).lower(),
            },
        )

    @property
    def sample_rate(self) -> int:
        return int(getattr(self.model, "sample_rate", 24_000))

    def _takes(self, name: str) -> bool:
        """Whether the model's ``generate`` names the keyword ``name``."""
        return name in self._params

    # ------------------------------------------------------------ requests

    def submit(self, request: Request, payloads: Sequence[bytes]) -> None:
        if not isinstance(request, Synthesize):
            raise RequestError(
                f"a tts worker serves speech synthesis, not '{type(request).__name__}' requests"
            )
        if request.request_id in self._by_id:
            log.warning("duplicate request_id %s ignored", request.request_id)
            return
        if request.response_format not in FORMATS:
            known = ", ".join(FORMATS)
            raise RequestError(
                f"unknown response_format {request.response_format!r} (one of {known})",
                param="response_format",
            )
        if not 0.25 <= request.speed <= 4.0:
            raise RequestError("speed must be between 0.25 and 4", param="speed")
        pieces = split_text(request.input)
        if not pieces:
            raise RequestError("the input has no text to speak", param="input")
        assert self.voices is not None
        voice = self.voices.resolve(request.voice)
        job = _Job(request, deque(pieces), self._kwargs(request, voice))
        self._accept(job)
        self._emit(Started(request_id=job.request_id, prompt_tokens=len(request.input)))

    def _kwargs(self, request: Synthesize, voice: str | None) -> dict[str, Any]:
        """The keyword arguments of the model's ``generate`` for ``request``."""
        kwargs: dict[str, Any] = {}
        if voice is not None:
            kwargs["voice"] = voice
        if request.speed != 1.0 and self._takes("speed"):
            kwargs["speed"] = request.speed  # else applied to the samples (Tempo)
        if request.instructions and self._takes("instruct"):
            kwargs["instruct"] = request.instructions
        if request.language and self._takes("lang_code"):
            kwargs["lang_code"] = request.language
        if self._takes("stream"):
            kwargs["stream"] = True
            if self._takes("streaming_interval"):
                kwargs["streaming_interval"] = STREAMING_INTERVAL
        if self._takes("verbose"):
            kwargs["verbose"] = False
        kwargs.update(self._generate_kwargs)
        return kwargs

    def cancel(self, request_id: str) -> None:
        job = self._by_id.get(request_id)
        if job is None:
            return
        self._forget(job)
        log.info("speech %s cancelled after %.2f s of audio", request_id, job.seconds)
        self._emit(Done(request_id=request_id, finish_reason="cancelled", usage=_usage(job)))

    # ------------------------------------------------------------ work

    def step(self) -> None:
        job = self._next_turn()
        if job is None:
            return
        if job.results is None:
            if not job.pieces:
                self._finish(job)
                self._current = None
                return
            text = job.pieces.popleft()
            job.results = iter(self.model.generate(text=text, **job.kwargs))
        result = next(job.results, None)
        if result is None:
            job.results = None
            if not job.pieces:
                self._finish(job)
        else:
            self._send(job, result)
        self._current = None

    def _send(self, job: _Job, result: Any) -> None:
        audio = result.audio
        if isinstance(audio, mx.array):
            audio = audio.astype(mx.float32)
        samples = np.asarray(audio, dtype=np.float32).reshape(-1)
        if samples.size == 0:
            return
        if job.encoder is None:
            rate = int(getattr(result, "sample_rate", 0) or self.sample_rate)
            job.encoder = Encoder(job.request.response_format, rate)
            job.sample_rate = job.encoder.rate
            if job.request.speed != 1.0 and not self._takes("speed"):
                job.tempo = Tempo(rate, job.request.speed)
        if job.tempo is not None:
            samples = job.tempo.feed(samples)
        seconds = samples.size / job.encoder.model_rate
        job.seconds += seconds
        data = job.encoder.add(samples)
        self._emit(
            SpeechChunk(
                request_id=job.request_id, seconds=round(seconds, 4), sample_rate=job.sample_rate
            ),
            [data],
        )

    def _finish(self, job: _Job) -> None:
        if job.encoder is None:
            self._forget(job)
            self._emit(
                Error(
                    message="the model produced no audio for this input",
                    request_id=job.request_id,
                    status=500,
                    code="no_audio",
                )
            )
            return
        tail = b""
        if job.tempo is not None:
            rest = job.tempo.flush()
            job.seconds += rest.size / job.encoder.model_rate
            tail = job.encoder.add(rest)
        tail += job.encoder.finish()
        usage = _usage(job)
        self._emit(SpeechChunk(request_id=job.request_id, sample_rate=job.sample_rate), [tail])
        self._forget(job)
        self._emit(Done(request_id=job.request_id, finish_reason="stop", usage=usage))
        mx.clear_cache()


def _usage(job: _Job) -> Usage:
    """Characters of input as prompt tokens; milliseconds of audio as completion
    tokens (a figure the gateway's metrics read)."""
    return Usage(prompt_tokens=len(job.request.input), completion_tokens=round(job.seconds * 1000))
