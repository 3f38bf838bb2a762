"""The audio endpoints' form fields, and a worker's transcript in each response format.

Form values arrive as strings; they are converted to the types below by msgspec
(``"0.2"`` → float, ``"true"`` → bool), so a wrong value is a 400 that names the
field, as for JSON bodies. Unknown fields are ignored.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

from mlx_gateway.protocol.messages import Transcript
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.http.body import validation_error

ResponseFormat = Literal["json", "text", "srt", "verbose_json", "vtt"]
Granularity = Literal["word", "segment"]
Temperature = Annotated[float, Meta(ge=0.0, le=1.0)]

TEXT_FORMATS = {
    "text": "text/plain; charset=utf-8",
    "srt": "text/plain; charset=utf-8",
    "vtt": "text/vtt; charset=utf-8",
}
"""The media type of each plain-text response format."""


class TranslationForm(Struct, kw_only=True):
    """``POST /v1/audio/translations`` (besides ``file``): speech in any language
    to English text."""

    model: str
    prompt: str | None = None
    response_format: ResponseFormat = "json"
    temperature: Temperature = 0.0
    """0 lets the model retry a window at higher temperatures when its text is
    repetitive or improbable; above 0, that one temperature is used."""


class TranscriptionForm(TranslationForm, kw_only=True):
    """``POST /v1/audio/transcriptions`` (besides ``file``)."""

    language: str | None = None
    timestamp_granularities: list[Granularity] = []
    stream: bool = False


_LIST_FIELDS = {"timestamp_granularities"}


def parse_form(fields: dict[str, list[str]], type_: type[TranslationForm]) -> Any:
    """The form's text ``fields`` as ``type_``. ``name[]`` and repeated names make
    lists (the OpenAI SDK sends ``timestamp_granularities[]``); a scalar field given
    twice keeps its first value. Raises :class:`BadRequest` naming the field."""
    data: dict[str, Any] = {}
    for raw_name, values in fields.items():
        name = raw_name.removesuffix("[]")
        if name in _LIST_FIELDS:
            data.setdefault(name, []).extend(values)
        elif name not in data:
            data[name] = values[0]
    try:
        return msgspec.convert(data, type_, strict=False)
    except msgspec.ValidationError as exc:
        raise validation_error(str(exc)) from None


# ---------------------------------------------------------------- response bodies


class DurationUsage(Struct):
    seconds: int
    type: Literal["duration"] = "duration"


class Word(Struct):
    word: str
    start: float
    end: float


class Segment(Struct):
    id: int
    seek: int
    start: float
    end: float
    text: str
    tokens: list[int]
    temperature: float
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float


class TextBody(Struct):
    text: str


class TranscriptionBody(Struct):
    text: str
    usage: DurationUsage


class VerboseBody(Struct, omit_defaults=True):
    task: str
    language: str
    duration: float
    text: str
    segments: list[Segment] | None = None
    words: list[Word] | None = None
    usage: DurationUsage | None = None


class TextDelta(Struct):
    """One stream event: text transcribed since the previous one."""

    delta: str
    type: Literal["transcript.text.delta"] = "transcript.text.delta"


class TextDone(Struct):
    """The last stream event: the whole text."""

    text: str
    type: Literal["transcript.text.done"] = "transcript.text.done"


def check_options(form: TranslationForm) -> None:
    """Checks across fields, beyond what the types express."""
    if not isinstance(form, TranscriptionForm):
        return
    if form.timestamp_granularities and form.response_format != "verbose_json":
        raise BadRequest(
            "timestamp_granularities requires response_format 'verbose_json'.",
            param="timestamp_granularities",
        )
    if form.stream and form.response_format not in ("json", "text"):
        raise BadRequest(
            f"Streaming returns text events; response_format '{form.response_format}' "
            "cannot be streamed (use json or text).",
            param="stream",
        )


def usage_of(transcript: Transcript) -> DurationUsage:
    return DurationUsage(seconds=math.ceil(transcript.duration))


def _segments(transcript: Transcript) -> list[Segment]:
    return [msgspec.convert(s, Segment, strict=False) for s in transcript.segments]


def _words(transcript: Transcript) -> list[Word]:
    return [
        Word(word=w["word"].strip(), start=w["start"], end=w["end"])
        for s in transcript.segments
        for w in s.get("words", [])
        if w["word"].strip()
    ]


def verbose_body(transcript: Transcript, task: str, granularities: list[str]) -> VerboseBody:
    """``verbose_json``: segments unless only ``word`` granularity was asked; words
    when it was. A translation's language is the language of its text: English."""
    transcribing = task == "transcribe"
    return VerboseBody(
        task=task,
        language=(transcript.language or "english") if transcribing else "english",
        duration=transcript.duration,
        text=transcript.text.strip(),
        segments=_segments(transcript) if not granularities or "segment" in granularities else None,
        words=_words(transcript) if "word" in granularities else None,
        usage=usage_of(transcript) if transcribing else None,
    )


def _clock(seconds: float, separator: str) -> str:
    millis = max(round(seconds * 1000), 0)
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs, millis = divmod(millis, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"


def _cues(transcript: Transcript, separator: str) -> list[str]:
    cues = []
    for segment in transcript.segments:
        text = segment["text"].strip()
        if text:
            start = _clock(segment["start"], separator)
            end = _clock(segment["end"], separator)
            cues.append(f"{start} --> {end}\n{text}\n")
    return cues


def subtitles(transcript: Transcript, response_format: str) -> str:
    """The transcript as SubRip (``srt``) or WebVTT (``vtt``) cues, one per segment."""
    if response_format == "srt":
        return "\n".join(f"{i}\n{cue}" for i, cue in enumerate(_cues(transcript, ","), 1))
    return "WEBVTT\n\n" + "\n".join(_cues(transcript, "."))
