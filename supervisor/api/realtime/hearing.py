"""The user's side of a Realtime session: the input audio buffer, the VAD on it, and
the transcription of each committed turn on the whisper worker.

A committed buffer becomes a user item whose ``input_audio`` part waits for its
transcript (what the language model reads). The transcript's windows are sent as
``conversation.item.input_audio_transcription.delta`` as the worker makes them, then
``…completed`` (or ``…failed``) when the session asked for transcripts
(``input_audio_transcription``, always in a transcription session).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from uuid import uuid4

from mlx_gateway.protocol.messages import Transcribe, Transcript
from mlx_gateway.supervisor.api.realtime.audio import AudioFormat, wav_file
from mlx_gateway.supervisor.api.realtime.conversation import Item
from mlx_gateway.supervisor.api.realtime.outbox import ClientGone, Outbox
from mlx_gateway.supervisor.api.realtime.settings import Transcription as TranscriptionSettings
from mlx_gateway.supervisor.api.realtime.vad import (
    ServerVad,
    TurnDetection,
    VadEvent,
    load_detector,
)
from mlx_gateway.supervisor.config.kinds.whisper import WhisperConfig
from mlx_gateway.supervisor.engine.transcription import Transcription
from mlx_gateway.supervisor.errors import BadRequest, GatewayError
from mlx_gateway.supervisor.http import MIB
from mlx_gateway.supervisor.pool.model_handle import ModelHandle

log = logging.getLogger("mlx_gateway.realtime")

MIN_COMMIT_MS = 100
"""OpenAI's smallest committable buffer."""


class InputBuffer:
    """The audio appended since the last commit (or clear), and where it starts in
    the session's input audio."""

    def __init__(self, fmt: AudioFormat) -> None:
        self.fmt = fmt
        self.data = bytearray()
        self.start_ms = 0
        self.total_ms = 0
        """Input audio appended in the whole session."""
        self._bytes = 0
        self.vad: ServerVad | None = None

    def configure(self, fmt: AudioFormat, turn_detection: TurnDetection | None) -> None:
        """Apply a session's (new) format and turn detection; the buffer and the VAD
        state start over when either changed."""
        settings = self.vad.settings if self.vad else None
        if fmt == self.fmt and settings == turn_detection:
            return
        self.fmt = fmt
        self.clear()
        self.vad = (
            None if turn_detection is None else ServerVad(turn_detection, fmt, load_detector())
        )

    def append(self, data: bytes) -> list[VadEvent]:
        self.data += data
        self._bytes += len(data)
        self.total_ms = self.fmt.ms(self._bytes)
        if self.vad is None:
            return []
        events = self.vad.feed(data)
        if not self.vad.speaking and not events:
            # nothing said yet: keep only what a start could still need
            self.drop_before(self.total_ms - self.vad.settings.prefix_padding_ms - 100)
        return events

    def drop_before(self, ms: int) -> None:
        cut = int((ms - self.start_ms) * self.fmt.bytes_per_ms) // self.fmt.width * self.fmt.width
        if cut > 0:
            del self.data[:cut]
            self.start_ms += self.fmt.ms(cut)

    def peek(self, end_ms: int | None = None) -> bytes:
        """The audio :meth:`take` would return now, left in the buffer."""
        size = len(self.data)
        if end_ms is not None:
            size = min(size, int((end_ms - self.start_ms) * self.fmt.bytes_per_ms))
            size = max(0, size // self.fmt.width * self.fmt.width)
        return bytes(self.data[:size])

    def take(self, end_ms: int | None = None) -> bytes:
        """The buffer's audio (up to ``end_ms``); the buffer starts over after it."""
        audio = self.peek(end_ms)
        if self.fmt.ms(len(audio)) < MIN_COMMIT_MS:
            raise BadRequest(
                "Error committing input audio buffer: buffer too small. Expected at least "
                f"{MIN_COMMIT_MS}ms of audio, but buffer only has {self.fmt.ms(len(audio))}ms "
                "of audio.",
                code="input_audio_buffer_commit_empty",
            )
        del self.data[: len(audio)]
        self.start_ms += self.fmt.ms(len(audio))
        return audio

    def clear(self) -> None:
        self.data.clear()
        self.start_ms = self.total_ms
        if self.vad is not None:
            self.vad.reset()


class Listening:
    """One transcription on the whisper worker, run beside the session: its text is
    kept as it comes until :func:`transcribe` reads it into an item, so it can start
    before the item exists (early transcription, at the VAD's :class:`~.vad.SpeechPaused`)
    and be dropped (:meth:`cancel`: the worker's request is cancelled) when the
    speech goes on."""

    def __init__(
        self,
        handle: ModelHandle,
        fmt: AudioFormat,
        settings: TranscriptionSettings | None,
        audio: bytes,
    ) -> None:
        self.handle = handle
        self.fmt = fmt
        self.settings = settings
        self.audio_ms = fmt.ms(len(audio))
        self.request_id = f"rt-{uuid4().hex}"
        self.started = time.monotonic()
        self.transcript: Transcript | None = None
        self._deltas: list[str] = []
        self._failure: BaseException | None = None
        self._done = False
        self._changed = asyncio.Event()
        self._task = asyncio.ensure_future(self._run(audio))

    def serves(
        self, handle: ModelHandle, fmt: AudioFormat, settings: TranscriptionSettings | None
    ) -> bool:
        """It transcribes as a new transcription of the same audio would now."""
        return handle is self.handle and fmt == self.fmt and settings == self.settings

    async def _run(self, audio: bytes) -> None:
        try:
            config = self.handle.config
            assert isinstance(config, WhisperConfig), "the route checked its kind"
            limit_mb = config.max_upload_mb
            if len(audio) > limit_mb * MIB:
                raise BadRequest(
                    f"The turn's audio is over the model's max_upload_mb ({limit_mb}).",
                    code="audio_too_long",
                )
            settings = self.settings
            msg = Transcribe(
                request_id=self.request_id,
                filename="realtime.wav",
                language=settings.language if settings else None,
                prompt=settings.prompt if settings else None,
            )
            transcription = await Transcription.start(self.handle, msg, wav_file(self.fmt, audio))
            del audio
            try:
                async for delta in transcription.deltas():
                    self._deltas.append(delta)
                    self._changed.set()
                self.transcript = transcription.transcript
            finally:
                await transcription.aclose()
        except Exception as exc:  # handed to the reader: GatewayError or a bug
            self._failure = exc
        finally:
            self._done = True
            self._changed.set()

    async def deltas(self) -> AsyncIterator[str]:
        """The text of each transcribed window (those already made first); raises the
        transcription's failure at the end."""
        seen = 0
        while True:
            while seen < len(self._deltas):
                seen += 1
                yield self._deltas[seen - 1]
            if self._done:
                break
            self._changed.clear()
            await self._changed.wait()
        if self._failure is not None:
            raise self._failure

    def cancel(self) -> None:
        """Stop it (the worker's request is cancelled); nothing when it ended."""
        self._task.cancel()


class EarlyTranscription:
    """A session's turn transcribed before it ends (a VAD and the gateway's
    ``realtime.early_transcription``): started at the VAD's first silent window on
    the audio the commit will take if the turn ends there, so that the commit finds
    it running or done. The commit adopts it when it takes exactly that audio to be
    transcribed the same way; speech that goes on (or a clear, a session update, a
    commit of other audio, the end of the session) drops it, and the whisper
    worker's request is cancelled."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.run: Listening | None = None
        self._audio = b""

    def start(
        self,
        item_id: str,
        handle: ModelHandle,
        fmt: AudioFormat,
        settings: TranscriptionSettings | None,
        audio: bytes,
    ) -> None:
        self.drop("a later pause")
        if fmt.ms(len(audio)) < MIN_COMMIT_MS:
            return
        self.run, self._audio = Listening(handle, fmt, settings, audio), audio
        log.info(
            "realtime session %s: item %s transcribed early (%s, %d ms of audio)",
            self.session_id,
            item_id,
            self.run.request_id,
            self.run.audio_ms,
        )

    def drop(self, why: str) -> None:
        run, self.run, self._audio = self.run, None, b""
        if run is not None:
            run.cancel()
            log.info(
                "realtime session %s: early transcription %s dropped (%s)",
                self.session_id,
                run.request_id,
                why,
            )

    def take(
        self,
        item_id: str,
        audio: bytes,
        handle: ModelHandle,
        fmt: AudioFormat,
        settings: TranscriptionSettings | None,
    ) -> Listening | None:
        """The transcription of the committed ``audio`` if it started early."""
        run = self.run
        if run is None or audio != self._audio or not run.serves(handle, fmt, settings):
            self.drop("other audio committed")
            return None
        self.run, self._audio = None, b""
        log.info(
            "realtime session %s: item %s committed, its transcription %s started early "
            "(%d ms before)",
            self.session_id,
            item_id,
            run.request_id,
            round((time.monotonic() - run.started) * 1000),
        )
        return run


async def transcribe(out: Outbox, item: Item, run: Listening, report: bool) -> None:
    """Fill ``item``'s ``input_audio`` transcript from ``run`` (the transcription of
    its audio); with ``report`` send the transcription events. A failure leaves the
    transcript empty (``…failed`` event), never the session broken."""
    part = next(p for p in item.content if p.type == "input_audio")
    item.audio = b""  # the gateway keeps no copy past this
    text = ""
    try:
        async for delta in run.deltas():
            text += delta
            if report:
                await out.send(
                    "conversation.item.input_audio_transcription.delta",
                    item_id=item.id,
                    content_index=0,
                    delta=delta,
                )
        transcript = run.transcript
        text = transcript.text.strip() if transcript else text.strip()
        part.text = text
        if report:
            seconds = transcript.duration if transcript else 0.0
            await out.send(
                "conversation.item.input_audio_transcription.completed",
                item_id=item.id,
                content_index=0,
                transcript=text,
                usage={"type": "duration", "seconds": round(seconds, 3)},
            )
    except GatewayError as exc:
        part.text = ""
        if report:
            with contextlib.suppress(ClientGone):
                await out.send(
                    "conversation.item.input_audio_transcription.failed",
                    item_id=item.id,
                    content_index=0,
                    error=exc.body()["error"],
                )
    finally:
        run.cancel()
        if item.transcribed is not None and not item.transcribed.done():
            item.transcribed.set_result(None)
        item.transcribed = None


def pending(item: Item) -> asyncio.Future[None]:
    """Mark ``item`` as waiting for its transcript."""
    item.transcribed = asyncio.get_running_loop().create_future()
    return item.transcribed
