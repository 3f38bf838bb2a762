"""``POST /v1/audio/transcriptions`` and ``POST /v1/audio/translations``.

The upload (``multipart/form-data``) is read within the model's ``max_upload_mb``
and sent to the model's whisper worker as one binary frame; the worker decodes it
(any format FFmpeg reads), so an undecodable file is a 400 from the worker before
any response starts, streamed or not.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator
from uuid import uuid4

from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.protocol.messages import Transcribe, Transcript
from mlx_gateway.supervisor.api.audio.formats import (
    TEXT_FORMATS,
    TextBody,
    TextDelta,
    TextDone,
    TranscriptionBody,
    TranscriptionForm,
    TranslationForm,
    check_options,
    parse_form,
    subtitles,
    usage_of,
    verbose_body,
)
from mlx_gateway.supervisor.api.audio.upload import UploadTooLarge, read_upload
from mlx_gateway.supervisor.config.kinds import settings_as
from mlx_gateway.supervisor.config.kinds.whisper import WhisperConfig
from mlx_gateway.supervisor.engine.kinds import TRANSCRIPTION_KINDS, require_kind
from mlx_gateway.supervisor.engine.transcription import Transcription
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.http import sse
from mlx_gateway.supervisor.http.disconnect import unless_disconnected
from mlx_gateway.supervisor.http.multipart import MIB
from mlx_gateway.supervisor.http.replies import EventStream, JSONResponse, ended
from mlx_gateway.supervisor.pool.model_handle import ModelHandle

logger = logging.getLogger(__name__)

ENDPOINTS = {"transcribe": "transcriptions", "translate": "translations"}
DEFAULT_LIMIT_MB = 100.0
"""The upload limit when no speech-to-text model is configured (the request then
fails on its model anyway, but only after the form was read)."""


async def create_transcription(request: Request) -> Response:
    """Speech to text in the language spoken (or the one given)."""
    return await _serve(request, "transcribe", TranscriptionForm)


async def create_translation(request: Request) -> Response:
    """Speech in any language to English text."""
    return await _serve(request, "translate", TranslationForm)


def _upload_limit(request: Request) -> float:
    """The largest upload (MiB) any speech model accepts: the model is named inside
    the form, so the body is bounded by this before the model is known."""
    configs = [handle.config for handle in gateway_of(request).registry.handles]
    limits = [config.max_upload_mb for config in configs if isinstance(config, WhisperConfig)]
    return max(limits, default=DEFAULT_LIMIT_MB)


async def _serve(request: Request, task: str, form_type: type[TranslationForm]) -> Response:
    upload = await read_upload(request, _upload_limit(request))
    if upload.file is None or upload.file_field != "file":
        raise BadRequest("Missing required parameter: 'file' (the audio file).", param="file")
    form = parse_form(upload.fields, form_type)
    check_options(form)
    handle = speech_model(request, form.model, f"/v1/audio/{ENDPOINTS[task]}", upload.file)
    transcribing = isinstance(form, TranscriptionForm)
    msg = Transcribe(
        request_id=f"{'trsc' if transcribing else 'trsl'}-{uuid4().hex}",
        task=task,
        filename=upload.filename,
        language=form.language if transcribing else None,
        prompt=form.prompt,
        temperature=form.temperature,
        word_timestamps=transcribing and "word" in form.timestamp_granularities,
    )
    if transcribing and form.stream:
        transcription = await unless_disconnected(
            request, Transcription.start(handle, msg, upload.file)
        )
        upload.file = None  # the worker has decoded it; do not hold it for the response
        return EventStream(_events(transcription), transcription)
    file, upload.file = upload.file, None
    transcript = await transcript_of(request, handle, msg, file)
    fmt = form.response_format
    if fmt == "text":
        return Response(transcript.text.strip() + "\n", media_type=TEXT_FORMATS[fmt])
    if fmt in ("srt", "vtt"):
        return Response(subtitles(transcript, fmt), media_type=TEXT_FORMATS[fmt])
    if fmt == "verbose_json":
        granularities = form.timestamp_granularities if transcribing else []
        return JSONResponse(verbose_body(transcript, task, granularities))
    text = transcript.text.strip()
    if transcribing:
        return JSONResponse(TranscriptionBody(text=text, usage=usage_of(transcript)))
    return JSONResponse(TextBody(text=text))


def speech_model(request: Request, name: str, endpoint: str, audio: bytes) -> ModelHandle:
    """The speech-to-text model ``name`` names, checked to serve ``endpoint`` and to
    take ``audio`` (not empty, within its ``max_upload_mb``)."""
    handle: ModelHandle = gateway_of(request).registry.resolve(name)
    require_kind(handle, TRANSCRIPTION_KINDS, endpoint)
    config = settings_as(handle.config, WhisperConfig)
    if not audio:
        raise BadRequest("The uploaded file is empty.", param="file")
    if len(audio) > config.max_upload_mb * MIB:
        raise UploadTooLarge(config.max_upload_mb)
    return handle


async def transcript_of(
    request: Request, handle: ModelHandle, msg: Transcribe, audio: bytes
) -> Transcript:
    """The whole transcript of ``audio`` on ``handle``'s worker (unless the client
    leaves first)."""
    transcription = await unless_disconnected(request, Transcription.start(handle, msg, audio))
    try:
        return await unless_disconnected(request, transcription.result())
    finally:
        await transcription.aclose()


def _events(transcription: Transcription) -> AsyncIterator[bytes]:
    """``transcript.text.delta`` per window, then ``transcript.text.done`` and
    ``[DONE]``; a failure after the start ends the stream with an error event."""
    return ended(_deltas(transcription), transcription, logger, "transcription stream")


async def _deltas(transcription: Transcription) -> AsyncGenerator[bytes, None]:
    leading = True
    async for text in transcription.deltas():
        if leading:  # Whisper's text starts with a space; the whole text does not
            text = text.lstrip()
            leading = not text
        if text:
            yield sse.data(TextDelta(delta=text))
    assert transcription.transcript is not None
    yield sse.data(TextDone(text=transcription.transcript.text.strip()))
