"""The one walk over a turn's media parts: found (:func:`.media_table.find_media`),
checked against the model, read (documents into what the model reads, then every
image, video and audio file at once) and placed, each part rewritten to name its
binary frame.

The frames travel to the worker after the request (``Generate.images``): the images
in part order, then the videos, then the audio clips. A part becomes
``{"type": "image", "detail": …}`` (image ``k`` is frame ``k``),
``{"type": "video", "payload": k}`` or ``{"type": "audio", "format": …, "payload": k}``.
Each modality's reader is one function of its module: images and videos are URLs
(:mod:`.url_reader`), audio is base64 (:mod:`.audio_input`), documents become text
and page images (:mod:`.documents`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from mlx_gateway.protocol.messages import IMAGE_PART as WORKER_IMAGE_PART
from mlx_gateway.protocol.messages import VIDEO_PART as WORKER_VIDEO_PART
from mlx_gateway.supervisor.engine.audio_input import audio_file
from mlx_gateway.supervisor.engine.documents import expand_documents
from mlx_gateway.supervisor.engine.media_policy import MediaPolicy
from mlx_gateway.supervisor.engine.media_table import (
    AUDIO,
    DOCUMENT,
    IMAGE,
    VIDEO,
    MediaParts,
    find_media,
    modality_of,
)
from mlx_gateway.supervisor.engine.url_reader import read_all, read_url
from mlx_gateway.supervisor.engine.video_input import video_url
from mlx_gateway.supervisor.errors import BadRequest

NOUNS = {IMAGE: "images", VIDEO: "videos"}
"""The modalities with a per-request count (``max_images``, ``max_videos``)."""
PART_NAMES = {IMAGE: "image_url", VIDEO: "video_url", AUDIO: "input_audio"}
"""The part type a refusal tells the client to send elsewhere."""


@dataclass
class MediaInputs:
    """The messages as the worker gets them, and the payload files: the images in part
    order, then the videos, then the audio clips (their parts name their frames)."""

    messages: list[dict[str, Any]]
    files: list[bytes] = field(default_factory=list)
    audio_frames: int = 0
    """How many of ``files`` (the last ones) are audio."""
    video_frames: int = 0
    """How many of ``files`` (before the audio) are videos."""

    @property
    def frame_indices(self) -> list[int]:
        """``Generate.images``: image part ``k`` is payload frame ``k``."""
        return list(range(len(self.files) - self.audio_frames - self.video_frames))


def check_media(found: MediaParts, policy: MediaPolicy, model_type: str) -> None:
    """A 400 naming the model and the first image, video or audio part when the model
    is not a vision model, or the first part past its count (``max_images``,
    ``max_videos``)."""
    for modality in (IMAGE, VIDEO, AUDIO):
        parts = found.of(modality)
        if not parts:
            continue
        if not policy.render:
            raise _not_supported(modality, parts[0][0], policy.model, model_type)
        limit = policy.counts.get(modality)
        if limit is not None and len(parts) > limit:
            noun = NOUNS[modality]
            raise BadRequest(
                f"The request has {len(parts)} {noun}; the model '{policy.model}' accepts at "
                f"most {limit} (max_{noun}).",
                param=parts[limit][0],
                code=f"too_many_{noun}",
            )


async def read_media(
    messages: list[dict[str, Any]], found: MediaParts, policy: MediaPolicy, model_type: str
) -> MediaInputs:
    """``messages`` (whose parts are ``found``) checked, read and placed for the model
    of ``policy``. Raises the first failure (a :class:`~..errors.BadRequest`, or the
    413 of an image past ``max_image_mb``)."""
    check_media(found, policy, model_type)
    if found.of(DOCUMENT):
        messages = await expand_documents(messages, found.of(DOCUMENT), policy)
        found = find_media(messages)  # a vision model's PDF pages are image parts now
    reads: list[Awaitable[bytes]] = []
    for modality in (IMAGE, VIDEO, AUDIO):
        reads += [_read(modality, part, where, policy) for where, part in found.of(modality)]
    if not reads:
        return MediaInputs(messages)
    files = await read_all(reads)
    return MediaInputs(_placed(messages, found), files, len(found.of(AUDIO)), len(found.of(VIDEO)))


async def _read(modality: str, part: dict[str, Any], where: str, policy: MediaPolicy) -> bytes:
    """The file of one image, video or audio part."""
    if modality == IMAGE:
        url = part.get("image_url")
        text = url.get("url") if isinstance(url, dict) else url
        return await read_url(str(text or ""), policy.of(IMAGE), f"{where}.image_url.url")
    if modality == VIDEO:
        url, param = video_url(part, where)
        return await read_url(url, policy.of(VIDEO), param)
    return await asyncio.to_thread(audio_file, part, where)


def _placed(messages: list[dict[str, Any]], found: MediaParts) -> list[dict[str, Any]]:
    """``messages`` with each media part naming its frame (see the module docstring)."""
    next_frame = {
        IMAGE: 0,
        VIDEO: len(found.of(IMAGE)),
        AUDIO: len(found.of(IMAGE)) + len(found.of(VIDEO)),
    }
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            placed = []
            for part in content:
                modality = modality_of(part)
                if modality in next_frame:
                    frame = next_frame[modality]
                    next_frame[modality] += 1
                    part = _worker_part(modality, part, frame)
                placed.append(part)
            message = {**message, "content": placed}
        out.append(message)
    return out


def _worker_part(modality: str | None, part: dict[str, Any], frame: int) -> dict[str, Any]:
    if modality == IMAGE:
        url = part.get("image_url")
        detail = url.get("detail", "auto") if isinstance(url, dict) else "auto"
        return {"type": WORKER_IMAGE_PART, "detail": detail}
    if modality == VIDEO:
        return {"type": WORKER_VIDEO_PART, "payload": frame}
    audio = part.get("input_audio")
    fmt = str((audio.get("format") if isinstance(audio, dict) else None) or "wav")
    return {"type": "audio", "format": fmt, "payload": frame}


def _not_supported(modality: str, where: str, model: str, model_type: str) -> BadRequest:
    if modality == AUDIO:
        return BadRequest(
            f"The model '{model}' (model_type {model_type}) does not accept audio; send "
            "input_audio parts to a vision model with an audio encoder (model_type vlm, an "
            "omni model such as Gemma 3n), or transcribe the audio first with "
            "/v1/audio/transcriptions.",
            param=f"{where}.input_audio",
            code="audio_not_supported",
        )
    noun = NOUNS[modality]
    return BadRequest(
        f"The model '{model}' (model_type {model_type}) does not accept {noun}; send "
        f"{PART_NAMES[modality]} parts to a model of model_type vlm.",
        param=where,
        code=f"{noun}_not_supported",
    )
