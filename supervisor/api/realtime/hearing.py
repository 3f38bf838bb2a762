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
from uuid import uuid4

from mlx_gateway.protocol.messages import Transcribe
from mlx_gateway.supervisor.api.realtime.audio import AudioFormat, wav_file
from mlx_gateway.supervisor.api.realtime.conversation import Item
from mlx_gateway.supervisor.api.realtime.outbox import ClientGone, Outbox
from mlx_gateway.supervisor.api.realtime.settings import Transcription as TranscriptionSettings
from mlx_gateway.supervisor.api.realtime.vad import (
    ServerVad,
    SpeechStarted,
    SpeechStopped,
    TurnDetection,
    load_detector,
)
from mlx_gateway.supervisor.config.kinds import settings_as
from mlx_gateway.supervisor.config.kinds.whisper import WhisperConfig
from mlx_gateway.supervisor.engine.transcription import Transcription
from mlx_gateway.supervisor.errors import BadRequest, GatewayError
from mlx_gateway.supervisor.http.multipart import MIB
from mlx_gateway.supervisor.pool.model_handle import ModelHandle

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

    def append(self, data: bytes) -> list[SpeechStarted | SpeechStopped]:
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

    def take(self, end_ms: int | None = None) -> bytes:
        """The buffer's audio (up to ``end_ms``); the buffer starts over after it."""
        size = len(self.data)
        if end_ms is not None:
            size = min(size, int((end_ms - self.start_ms) * self.fmt.bytes_per_ms))
            size = max(0, size // self.fmt.width * self.fmt.width)
        if self.fmt.ms(size) < MIN_COMMIT_MS:
            raise BadRequest(
                "Error committing input audio buffer: buffer too small. Expected at least "
                f"{MIN_COMMIT_MS}ms of audio, but buffer only has {self.fmt.ms(size)}ms of audio.",
                code="input_audio_buffer_commit_empty",
            )
        audio = bytes(self.data[:size])
        del self.data[:size]
        self.start_ms += self.fmt.ms(size)
        return audio

    def clear(self) -> None:
        self.data.clear()
        self.start_ms = self.total_ms
        if self.vad is not None:
            self.vad.reset()


async def transcribe(
    out: Outbox,
    handle: ModelHandle,
    item: Item,
    fmt: AudioFormat,
    settings: TranscriptionSettings | None,
    report: bool,
) -> None:
    """Fill ``item``'s ``input_audio`` transcript from the whisper worker; with
    ``report`` send the transcription events. A failure leaves the transcript empty
    (``…failed`` event), never the session broken."""
    part = next(p for p in item.content if p["type"] == "input_audio")
    audio, item.audio = item.audio, b""  # the gateway keeps no copy past this
    text = ""
    try:
        limit_mb = settings_as(handle.config, WhisperConfig).max_upload_mb
        if len(audio) > limit_mb * MIB:
            raise BadRequest(
                f"The turn's audio is over the model's max_upload_mb ({limit_mb}).",
                code="audio_too_long",
            )
        msg = Transcribe(
            request_id=f"rt-{uuid4().hex}",
            filename="realtime.wav",
            language=settings.language if settings else None,
            prompt=settings.prompt if settings else None,
        )
        transcription = await Transcription.start(handle, msg, wav_file(fmt, audio))
        del audio
        try:
            async for delta in transcription.deltas():
                text += delta
                if report:
                    await out.send(
                        "conversation.item.input_audio_transcription.delta",
                        item_id=item.id,
                        content_index=0,
                        delta=delta,
                    )
            transcript = transcription.transcript
        finally:
            await transcription.aclose()
        text = transcript.text.strip() if transcript else text.strip()
        part["transcript"] = text
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
        part["transcript"] = ""
        if report:
            with contextlib.suppress(ClientGone):
                await out.send(
                    "conversation.item.input_audio_transcription.failed",
                    item_id=item.id,
                    content_index=0,
                    error=exc.body()["error"],
                )
    finally:
        if item.transcribed is not None and not item.transcribed.done():
            item.transcribed.set_result(None)
        item.transcribed = None


def pending(item: Item) -> asyncio.Future[None]:
    """Mark ``item`` as waiting for its transcript."""
    item.transcribed = asyncio.get_running_loop().create_future()
    return item.transcribed
