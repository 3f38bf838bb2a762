"""The speech request as OpenAI defines it, and its stream events."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta, Struct

ResponseFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]

MEDIA_TYPES: dict[str, str] = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}
"""The media type of each ``response_format`` (the worker encodes the file)."""


class VoiceId(Struct, kw_only=True):
    """A voice given as an object (``{"id": "af_heart"}``)."""

    id: Annotated[str, Meta(min_length=1)]


class SpeechRequest(Struct, kw_only=True):
    """``POST /v1/audio/speech``. Unknown fields are ignored."""

    model: str
    input: str
    voice: Annotated[str, Meta(min_length=1)] | VoiceId | None = None
    """A voice name, or ``{"id": …}``; left out: the model's default voice."""
    instructions: str | None = None
    """How to speak (tone, emotion), for models that take instructions; others
    ignore it."""
    response_format: ResponseFormat = "mp3"
    speed: Annotated[float, Meta(ge=0.25, le=4.0)] = 1.0
    stream_format: Literal["audio", "sse"] = "audio"
    language: str | None = None
    """An extension: the language code for models that take one (Kokoro's
    ``lang_code``: ``a`` American English, ``b`` British, ``j`` Japanese …)."""

    @property
    def voice_name(self) -> str | None:
        voice = self.voice
        return voice.id if isinstance(voice, VoiceId) else voice


class SpeechUsage(Struct):
    input_tokens: int
    output_tokens: int
    total_tokens: int


class AudioDelta(Struct, tag="speech.audio.delta", tag_field="type"):
    """A piece of the audio file, base64-encoded (``stream_format: sse``)."""

    audio: str


class AudioDone(Struct, tag="speech.audio.done", tag_field="type"):
    """The end of the audio (``stream_format: sse``): input characters as input
    tokens, milliseconds of audio as output tokens."""

    usage: SpeechUsage


class Voice(Struct, kw_only=True):
    id: str
    name: str
    model: str
    object: str = "voice"


class VoiceList(Struct, kw_only=True):
    data: list[Voice]
    object: str = "list"
