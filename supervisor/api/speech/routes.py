"""``POST /v1/audio/speech`` and ``GET /v1/audio/voices``.

The worker synthesizes the text one sentence at a time and encodes the file in the
request's ``response_format`` as it goes (PyAV); the gateway relays the bytes:
as a chunked audio body (``stream_format: audio``, the default) or as
``speech.audio.delta`` events with the bytes base64-encoded, then
``speech.audio.done`` (``stream_format: sse``). Nothing is sent before the first
audio exists, so every failure up to then is an HTTP error; a failure after it
ends the body abruptly (audio) or with an ``error`` event (sse).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import AsyncIterator
from uuid import uuid4

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from mlx_gateway.protocol.messages import Synthesize
from mlx_gateway.supervisor.api.speech.schemas import (
    MEDIA_TYPES,
    AudioDelta,
    AudioDone,
    SpeechRequest,
    SpeechUsage,
    Voice,
    VoiceList,
)
from mlx_gateway.supervisor.config.kinds import settings_as
from mlx_gateway.supervisor.config.kinds.tts import TtsConfig
from mlx_gateway.supervisor.engine.kinds import SPEECH_KINDS, kind_of, require_kind
from mlx_gateway.supervisor.engine.synthesis import Speech
from mlx_gateway.supervisor.errors import BadRequest, GatewayError
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.http import sse
from mlx_gateway.supervisor.http.body import read_json
from mlx_gateway.supervisor.http.disconnect import unless_disconnected
from mlx_gateway.supervisor.http.replies import SSE_HEADERS, JSONResponse
from mlx_gateway.supervisor.pool.model_handle import ModelHandle

logger = logging.getLogger(__name__)

ENDPOINT = "/v1/audio/speech"


async def create_speech(request: Request) -> Response:
    """Text to speech, streamed as it is synthesized."""
    req = await read_json(request, SpeechRequest)
    speech = await speech_for(request, req)
    if req.stream_format == "sse":
        return SpeechStream(_events(speech, len(req.input)), speech, "text/event-stream")
    headers = {"X-Sample-Rate": str(speech.sample_rate)}
    return SpeechStream(_bytes(speech), speech, MEDIA_TYPES[req.response_format], headers)


async def speech_for(request: Request, req: SpeechRequest) -> Speech:
    """``req`` started on its model's worker, its first audio in (unless the client
    leaves first); always ``aclose`` it."""
    handle: ModelHandle = gateway_of(request).registry.resolve(req.model)
    require_kind(handle, SPEECH_KINDS, ENDPOINT)
    msg = synthesize_message(handle, req)
    return await unless_disconnected(request, Speech.start(handle, msg))


def synthesize_message(handle: ModelHandle, req: SpeechRequest) -> Synthesize:
    """The worker request for ``req``, after the checks the gateway can make alone:
    some text, within the model's ``max_input_chars``."""
    if not req.input.strip():
        raise BadRequest("The input is empty: give the text to speak.", param="input")
    limit = settings_as(handle.config, TtsConfig).max_input_chars
    if len(req.input) > limit:
        raise BadRequest(
            f"The input is {len(req.input)} characters; the model '{handle.name}' takes at "
            f"most {limit} (its max_input_chars). Split the text into several requests.",
            param="input",
            code="input_too_long",
        )
    return Synthesize(
        request_id=f"tts-{uuid4().hex}",
        input=req.input,
        voice=req.voice_name,
        instructions=req.instructions,
        speed=req.speed,
        response_format=req.response_format,
        language=req.language,
    )


async def _bytes(speech: Speech) -> AsyncIterator[bytes]:
    try:
        async for data in speech.chunks():
            yield data
    except GatewayError as exc:
        # Headers are out: break the body, so the client sees an error, not a
        # short file that looks whole.
        logger.warning("speech failed after its audio started: %s", exc.message)
        raise


async def _events(speech: Speech, characters: int) -> AsyncIterator[bytes]:
    try:
        async for data in speech.chunks():
            yield sse.data(AudioDelta(audio=base64.b64encode(data).decode("ascii")))
    except GatewayError as exc:
        logger.warning("speech stream failed after it started: %s", exc.message)
        body = {"type": "error", "error": exc.body()["error"]}
        yield sse.data(body)
        return
    milliseconds = round(speech.seconds * 1000)
    usage = SpeechUsage(characters, milliseconds, characters + milliseconds)
    yield sse.data(AudioDone(usage=usage))


class SpeechStream(StreamingResponse):
    """A streamed body that closes its synthesis however the response ends:
    finished, failed, client gone, or never iterated."""

    def __init__(
        self,
        body: AsyncIterator[bytes],
        speech: Speech,
        media_type: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(body, media_type=media_type, headers={**SSE_HEADERS, **(headers or {})})
        self.speech = speech

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.speech.aclose()


async def list_voices(request: Request) -> Response:
    """The voices of the tts models: ``?model=`` names one (started if needed, to ask
    its worker); without it, those of the models loaded now."""
    registry = gateway_of(request).registry
    name = request.query_params.get("model")
    if name:
        handle = registry.resolve(name)
        require_kind(handle, SPEECH_KINDS, "/v1/audio/voices")
        if handle.facts is None:
            await unless_disconnected(request, _wait_ready(handle))
        handles = [handle]
    else:
        handles = [h for h in registry.visible() if kind_of(h) in SPEECH_KINDS]
    voices = [
        Voice(id=voice, name=voice, model=handle.name)
        for handle in handles
        for voice in _voices_of(handle)
    ]
    return JSONResponse(VoiceList(data=voices))


async def _wait_ready(handle: ModelHandle) -> None:
    async with handle.session():
        pass


def _voices_of(handle: ModelHandle) -> list[str]:
    facts = handle.facts
    if facts is None or "voices" not in facts.extra:  # reported by speech workers
        return []
    listed = facts.extra.get("voices", "")
    return [voice for voice in listed.split(",") if voice]
