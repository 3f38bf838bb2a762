"""The media tools: ``generate_image`` and ``edit_image`` (MCP image content),
``transcribe`` (text) and ``speak`` (MCP audio content), each through the core its
OpenAI route serves with."""

from __future__ import annotations

import base64
from dataclasses import replace
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
from mlx_gateway.supervisor.engine.url_reader import (
    MIB,
    UrlRules,
    decode_base64,
    read_data_url,
    read_url,
)
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.gateway import gateway_of
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
    image = decode_file(args.image, file_rules("image", limit, "max_image_mb"), "image")
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
    rules = file_rules("audio", int(_upload_limit(request, model) * MIB), "max_upload_mb")
    if args.audio is not None:
        audio = decode_file(args.audio, rules, "audio")
    else:
        assert args.url is not None
        server = gateway_of(request).registry.config.server
        fetched = replace(
            rules, timeout=AUDIO_FETCH_TIMEOUT, allow_private=server.allow_private_image_urls
        )
        audio = await read_url(args.url, fetched, "url")
    handle = speech_model(request, model, "transcribe", audio)
    msg = Transcribe(request_id=f"trsc-{uuid4().hex}", filename="audio", language=args.language)
    transcript = await transcript_of(request, handle, msg, audio)
    return [TextContent(text=transcript.text.strip())]


def _upload_limit(request: Request, model: str) -> float:
    """The model's ``max_upload_mb`` (the largest any model takes for a route)."""
    registry = gateway_of(request).registry
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


def file_rules(noun: str, limit: int, size_key: str) -> UrlRules:
    """How a tool argument holding a ``noun`` file (``image``, ``audio``) is read."""
    return UrlRules(
        noun=noun,
        max_bytes=limit,
        size_key=size_key,
        allowed_types=(f"{noun}/", "video/") if noun == "audio" else (f"{noun}/",),
        example_type="audio/wav" if noun == "audio" else "image/png",
        percent_data=False,
        too_large_status=400,
        url_code=f"invalid_{noun}",
    )


def decode_file(value: str, rules: UrlRules, param: str) -> bytes:
    """A file given as base64 or as a ``data:`` URL, within the rules' cap."""
    if value.startswith("data:"):
        return read_data_url(value, rules, param)[0]
    return decode_base64(value, rules, param, what=f"in '{param}'")
