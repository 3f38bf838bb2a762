"""The media tools: ``generate_image`` and ``edit_image`` (MCP image content),
``transcribe`` (text) and ``speak`` (MCP audio content), each through the core its
OpenAI route serves with."""

from __future__ import annotations

import base64
from typing import Any, Literal
from uuid import uuid4

from mcp_types import AudioContent, ContentBlock, ImageContent, TextContent
from starlette.requests import Request

from mlx_gateway.protocol.messages import Transcribe
from mlx_gateway.supervisor.api.audio.routes import speech_model, transcript_of
from mlx_gateway.supervisor.api.images.routes import image_message, image_model, pictures_of
from mlx_gateway.supervisor.api.images.schemas import MEDIA_TYPES, ImageGenerationRequest
from mlx_gateway.supervisor.api.speech.routes import speech_for
from mlx_gateway.supervisor.api.speech.schemas import SpeechRequest
from mlx_gateway.supervisor.config.kinds import settings_as
from mlx_gateway.supervisor.config.kinds.image import ImageConfig
from mlx_gateway.supervisor.config.kinds.whisper import WhisperConfig
from mlx_gateway.supervisor.engine.audio_input import decode_base64
from mlx_gateway.supervisor.engine.image_fetch import ImagePolicy, decode_data_url, read_image_url
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.http.multipart import MIB
from mlx_gateway.supervisor.mcp_server.args import EditArgs, ImageArgs, SpeakArgs, TranscribeArgs

AUDIO_FETCH_TIMEOUT = 30.0
"""Seconds a ``transcribe`` call's ``url`` may take to download."""
SPEECH_FORMAT: Literal["wav"] = "wav"


async def generate_image(request: Request, args: ImageArgs, model: str) -> list[ContentBlock]:
    handle = image_model(request, model, edit=False)
    req = ImageGenerationRequest(prompt=args.prompt, model=model, size=args.size, seed=args.seed)
    msg = image_message(req, handle, images=0, mask=False)
    return _pictures(await pictures_of(request, handle, msg, []), handle.name, req.output_format)


async def edit_image(request: Request, args: EditArgs, model: str) -> list[ContentBlock]:
    handle = image_model(request, model, edit=True)
    limit = int(settings_as(handle.config, ImageConfig).max_image_mb * MIB)
    image = decode_file(args.image, limit, "image")
    req = ImageGenerationRequest(prompt=args.prompt, model=model, size=args.size, seed=args.seed)
    msg = image_message(req, handle, images=1, mask=False)
    return _pictures(
        await pictures_of(request, handle, msg, [image]), handle.name, req.output_format
    )


def _pictures(pictures: list[Any], model: str, output_format: str) -> list[ContentBlock]:
    content: list[ContentBlock] = []
    for picture in pictures:
        data = base64.b64encode(picture.data).decode("ascii")
        content.append(ImageContent(data=data, mime_type=MEDIA_TYPES[output_format]))
        said = f"{picture.width}x{picture.height}, seed {picture.seed}, by {model}"
        content.append(TextContent(text=said))
    return content


async def transcribe(request: Request, args: TranscribeArgs, model: str) -> list[ContentBlock]:
    if (args.audio is None) == (args.url is None):
        raise BadRequest(
            "Give the audio as 'audio' (base64) or as 'url', one of the two.", param="audio"
        )
    limit_mb = _upload_limit(request, model)
    if args.audio is not None:
        audio = decode_file(args.audio, int(limit_mb * MIB), "audio")
    else:
        assert args.url is not None
        server = request.app.state.registry.config.server
        policy = ImagePolicy(
            int(limit_mb * MIB), AUDIO_FETCH_TIMEOUT, server.allow_private_image_urls
        )
        audio = await read_image_url(args.url, policy, "url")
    handle = speech_model(request, model, "transcribe", audio)
    msg = Transcribe(request_id=f"trsc-{uuid4().hex}", filename="audio", language=args.language)
    transcript = await transcript_of(request, handle, msg, audio)
    return [TextContent(text=transcript.text.strip())]


def _upload_limit(request: Request, model: str) -> float:
    """The model's ``max_upload_mb`` (the largest any model takes for a route)."""
    registry = request.app.state.registry
    found = registry.lookup(model)
    if found is not None:
        return settings_as(found.handle.config, WhisperConfig).max_upload_mb
    limits = [
        h.config.max_upload_mb for h in registry.visible() if isinstance(h.config, WhisperConfig)
    ]
    return max(limits, default=100.0)


async def speak(request: Request, args: SpeakArgs, model: str) -> list[ContentBlock]:
    req = SpeechRequest(
        model=model, input=args.text, voice=args.voice, response_format=SPEECH_FORMAT
    )
    speech = await speech_for(request, req)
    try:
        audio = b"".join([chunk async for chunk in speech.chunks()])
    finally:
        await speech.aclose()
    data = base64.b64encode(audio).decode("ascii")
    return [AudioContent(data=data, mime_type="audio/wav")]


def decode_file(value: str, limit: int, param: str) -> bytes:
    """A file given as base64 or as a ``data:`` URL, within ``limit`` bytes."""
    if value.startswith("data:"):
        return decode_data_url(value, limit, param)
    if len(value) * 3 // 4 > limit:
        raise BadRequest(
            f"'{param}' is over the model's limit of {limit / MIB:g} MiB.",
            param=param,
            code="file_too_large",
        )
    return decode_base64(value, f"'{param}'", param)
