"""One Wyoming connection: its events, turned into the gateway's worker requests.

* ``describe`` → ``info`` (:mod:`.info`).
* ``transcribe`` (optional: the model's name, the language), then ``audio-start``,
  ``audio-chunk``\\ s of raw PCM, ``audio-stop`` → ``transcript``. The PCM is wrapped
  in a WAV header and sent to the whisper worker like an upload.
* ``synthesize`` → ``audio-start``, ``audio-chunk``\\ s (24 kHz 16-bit mono, a
  sentence at a time, as the tts worker makes them), ``audio-stop``.
* ``synthesize-start``, ``synthesize-chunk``\\ s, ``synthesize-stop``: each complete
  sentence is spoken as above as soon as its text is in, then
  ``synthesize-stopped``. The ``synthesize`` event a client sends along for older
  servers is ignored while such a stream is open.

A request that fails is answered with an ``error`` event (its text is the HTTP
API's message); the connection stays usable. A client that disconnects cancels
the work on the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import time
import wave
from collections.abc import Iterator
from typing import Any
from uuid import uuid4

from wyoming.asr import Transcribe as WyTranscribe
from wyoming.asr import Transcript as WyTranscript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error as WyError
from wyoming.event import Event
from wyoming.info import Describe
from wyoming.ping import Ping, Pong
from wyoming.server import AsyncEventHandler
from wyoming.tts import (
    Synthesize as WySynthesize,
)
from wyoming.tts import (
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
    SynthesizeVoice,
)

from mlx_gateway.protocol.messages import Synthesize, Transcribe
from mlx_gateway.supervisor import recorder
from mlx_gateway.supervisor.api.wyoming.info import describe, offered, wyoming_caller
from mlx_gateway.supervisor.config.kinds import settings_as
from mlx_gateway.supervisor.config.kinds.tts import TtsConfig
from mlx_gateway.supervisor.config.kinds.whisper import WhisperConfig
from mlx_gateway.supervisor.config.schema import WyomingConfig
from mlx_gateway.supervisor.engine.kinds import SPEECH_KINDS, TRANSCRIPTION_KINDS, kind_of
from mlx_gateway.supervisor.engine.sentences import SentenceBuffer
from mlx_gateway.supervisor.engine.synthesis import Speech
from mlx_gateway.supervisor.engine.transcription import Transcription
from mlx_gateway.supervisor.errors import BadRequest, GatewayError
from mlx_gateway.supervisor.http.multipart import MIB
from mlx_gateway.supervisor.pool.model_handle import ModelHandle
from mlx_gateway.supervisor.pool.scope import scoped

log = logging.getLogger("mlx_gateway.wyoming")

PCM_RATE, PCM_WIDTH, PCM_CHANNELS = 24_000, 2, 1
"""What the tts worker's ``pcm`` format is."""


class WyomingHandler(AsyncEventHandler):
    def __init__(
        self,
        reader: Any,
        writer: Any,
        *,
        registry: Any,
        config: WyomingConfig,
        metrics: recorder.Recorder,
    ) -> None:
        super().__init__(reader, writer)
        self.registry = registry
        self.config = config
        self.metrics = metrics
        self._transcribe = WyTranscribe()
        self._audio: bytearray | None = None
        self._format = (16_000, 2, 1)
        self._stream: SynthesizeStart | None = None
        self._sentences = SentenceBuffer()
        self.caller = wyoming_caller(registry.config.server.keys, config)
        """The app Wyoming acts as (``server.wyoming.key``): its models only."""

    async def run(self) -> None:
        """Serve the connection; a client that resets it (one that closes with our
        answer unread does) ends it quietly, not as a task exception nobody reads."""
        try:
            await super().run()
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            log.debug("a Wyoming connection ended: %s", exc or type(exc).__name__)

    async def handle_event(self, event: Event) -> bool:
        try:
            with scoped(self.caller.models):  # as the app's own requests are
                await self._handle(event)
        except (ConnectionError, BrokenPipeError):
            log.info("a Wyoming client left during %s", event.type)
            return False
        return True

    async def _handle(self, event: Event) -> None:
        if Describe.is_type(event.type):
            await self.write_event(describe(self.registry.visible(), self.config).event())
        elif Ping.is_type(event.type):
            await self.write_event(Pong(text=Ping.from_event(event).text).event())
        elif WyTranscribe.is_type(event.type):
            self._transcribe = WyTranscribe.from_event(event)
        elif AudioStart.is_type(event.type):
            start = AudioStart.from_event(event)
            self._audio = bytearray()
            self._format = (start.rate, start.width, start.channels)
        elif AudioChunk.is_type(event.type):
            chunk = AudioChunk.from_event(event)
            if self._audio is None:  # no audio-start: take the chunk's format
                self._audio = bytearray()
                self._format = (chunk.rate, chunk.width, chunk.channels)
            self._audio += chunk.audio
        elif AudioStop.is_type(event.type):
            await self._answer(self._transcribe_audio())
        elif SynthesizeStart.is_type(event.type):
            self._stream = SynthesizeStart.from_event(event)
            self._sentences = SentenceBuffer()
        elif SynthesizeChunk.is_type(event.type) and self._stream is not None:
            for sentence in self._sentences.add(SynthesizeChunk.from_event(event).text):
                await self._answer(self._speak(sentence, self._stream.voice))
        elif SynthesizeStop.is_type(event.type) and self._stream is not None:
            rest = self._sentences.finish()
            if rest:
                await self._answer(self._speak(rest, self._stream.voice))
            self._stream = None
            await self.write_event(SynthesizeStopped().event())
        elif WySynthesize.is_type(event.type) and self._stream is None:
            synthesize = WySynthesize.from_event(event)
            await self._answer(self._speak(synthesize.text, synthesize.voice))

    async def _answer(self, work: Any) -> None:
        """Run ``work``; a request error becomes an ``error`` event."""
        try:
            await work
        except GatewayError as exc:
            log.info("Wyoming request failed: %s", exc.message)
            await self.write_event(WyError(text=exc.message, code=exc.code or exc.type).event())

    # ------------------------------------------------------------ speech to text

    def _asr_model(self) -> ModelHandle:
        models = [
            h
            for h in offered(self.registry.visible(), self.config)
            if kind_of(h) in TRANSCRIPTION_KINDS
        ]
        name = self._transcribe.name
        if name:
            for handle in models:
                if name in handle.config.names:
                    return handle
        if not models:
            raise _none_offered("speech-to-text")
        return models[0]

    async def _transcribe_audio(self) -> None:
        audio, (rate, width, channels) = self._audio, self._format
        self._audio = None
        if not audio:
            raise BadRequest("No audio came between audio-start and audio-stop.")
        with self._recorded("wyoming transcribe"):
            handle = self._asr_model()
            limit_mb = settings_as(handle.config, WhisperConfig).max_upload_mb
            if len(audio) > limit_mb * MIB:
                raise BadRequest(f"The audio is over the model's max_upload_mb ({limit_mb}).")
            msg = Transcribe(
                request_id=f"wyo-{uuid4().hex}",
                filename="wyoming.wav",
                language=self._transcribe.language,
            )
            transcription = await Transcription.start(
                handle, msg, wav_file(bytes(audio), rate, width, channels)
            )
            try:
                transcript = await transcription.result()
            finally:
                await transcription.aclose()
        text = transcript.text.strip()
        await self.write_event(WyTranscript(text=text, language=self._transcribe.language).event())

    # ------------------------------------------------------------ text to speech

    def _tts_model(self, voice: SynthesizeVoice | None) -> tuple[ModelHandle, str | None]:
        """The model and voice a ``synthesize`` asks for: the voice's ``name`` is a
        model, its ``speaker`` one of the model's voices; a name that is no model's is
        taken as a voice of the first one."""
        models = [
            h for h in offered(self.registry.visible(), self.config) if kind_of(h) in SPEECH_KINDS
        ]
        if not models:
            raise _none_offered("text-to-speech")
        if voice is None or voice.name is None:
            return models[0], voice.speaker if voice else None
        for handle in models:
            if voice.name in handle.config.names:
                return handle, voice.speaker
        return models[0], voice.name

    async def _speak(self, text: str, voice: SynthesizeVoice | None) -> None:
        if not text.strip():
            raise BadRequest("There is no text to speak.")
        with self._recorded("wyoming synthesize"):
            handle, voice_name = self._tts_model(voice)
            limit = settings_as(handle.config, TtsConfig).max_input_chars
            if len(text) > limit:
                raise BadRequest(
                    f"The text is {len(text)} characters; the model '{handle.name}' takes at "
                    f"most {limit} (its max_input_chars)."
                )
            msg = Synthesize(
                request_id=f"wyo-{uuid4().hex}",
                input=text,
                voice=voice_name,
                response_format="pcm",
            )
            speech = await Speech.start(handle, msg)
            try:
                audio = {"rate": PCM_RATE, "width": PCM_WIDTH, "channels": PCM_CHANNELS}
                await self.write_event(AudioStart(**audio).event())
                async for data in speech.chunks():
                    await self.write_event(AudioChunk(audio=data, **audio).event())
                await self.write_event(AudioStop().event())
            finally:
                await speech.aclose()

    # ------------------------------------------------------------ metrics

    @contextlib.contextmanager
    def _recorded(self, route: str) -> Iterator[None]:
        """Count the request in ``/metrics`` as the HTTP middleware would."""
        record, token = recorder.open_record()
        record.key = self.caller.name  # the app server.wyoming.key names
        status = 200
        try:
            yield
        except GatewayError as exc:
            status = exc.status
            raise
        except BaseException:
            status = 500
            raise
        finally:
            recorder.close_record(token)
            self.metrics.commit(record, route, status, time.monotonic())


def _none_offered(what: str) -> GatewayError:
    return GatewayError(
        f"This Wyoming server offers no {what} model (server.wyoming.models).",
        status=404,
        code="model_not_found",
    )


def wav_file(pcm: bytes, rate: int, width: int, channels: int) -> bytes:
    """Raw little-endian PCM in a WAV file, for the whisper worker's decoder."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(channels)
        out.setsampwidth(width)
        out.setframerate(rate)
        out.writeframes(pcm)
    return buffer.getvalue()
