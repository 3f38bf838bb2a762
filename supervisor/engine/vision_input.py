"""Image parts of chat messages: refused for text-only models, read for vision ones.

For a vision model every ``{"type": "image_url", "image_url": {"url", "detail"}}``
part is read (``data:`` URL or http(s) fetch, see :mod:`..image_fetch`), all of a
request's images at once; the part becomes ``{"type": "image", "detail": …}`` and
its file travels to the worker as a binary frame (``Generate.images``). Video parts
(:mod:`.video_input`) and audio parts (``input_audio``, :mod:`.audio_input`) ride
along: their files are the frames after the images, videos first.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from mlx_gateway.protocol.messages import IMAGE_PART as WORKER_IMAGE_PART
from mlx_gateway.supervisor.config import ModelConfig, ServerConfig
from mlx_gateway.supervisor.config.kinds import settings_as
from mlx_gateway.supervisor.config.kinds.vlm import VlmConfig
from mlx_gateway.supervisor.engine.audio_input import attach_audio
from mlx_gateway.supervisor.engine.documents import as_text_if_all_text
from mlx_gateway.supervisor.engine.image_fetch import ImagePolicy, policy_of, read_image_url
from mlx_gateway.supervisor.engine.media_parts import find_parts
from mlx_gateway.supervisor.engine.video_input import VideoPolicy, check_parts_allowed, read_videos
from mlx_gateway.supervisor.errors import GatewayError
from mlx_gateway.supervisor.pool.model_handle import ModelHandle

IMAGE_PART = "image_url"


def image_policy(config: ModelConfig, server: ServerConfig) -> ImagePolicy:
    """How the gateway reads the image URLs of ``config``'s vision model."""
    return policy_of(settings_as(config, VlmConfig), server.allow_private_image_urls)


@dataclass
class ImageInputs:
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

    async def with_videos(self, policy: VideoPolicy) -> ImageInputs:
        """The video parts' files read and appended (before any audio is attached);
        see :func:`..video_input.read_videos`."""
        assert self.audio_frames == 0, "videos are read before the audio is attached"
        messages, files = await read_videos(self.messages, self.files, policy)
        added = len(files) - len(self.files)
        return ImageInputs(messages, files, 0, self.video_frames + added)

    def with_audio(self) -> ImageInputs:
        """The audio parts' files appended (see :func:`..audio_input.attach_audio`)."""
        messages, files = attach_audio(self.messages, self.files)
        added = len(files) - len(self.files)
        return ImageInputs(messages, files, added + self.audio_frames, self.video_frames)


def image_parts(messages: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Every image part with its field path (``messages[1].content[0]``), in order."""
    return find_parts(messages, (IMAGE_PART,))


def tool_images_as_notes(
    messages: list[dict[str, Any]], model: str
) -> tuple[list[dict[str, Any]], int]:
    """For a text-only model: each image part of a ``tool`` message (a screenshot a
    tool returned) replaced by a one-line text saying it was left out, and how many
    were. A tool's image is the agent's, not the user's: refusing it would end the
    agent's session, dropping it silently would leave the model guessing."""
    left = 0
    out = []
    for message in messages:
        content = message.get("content")
        if message.get("role") == "tool" and isinstance(content, list):
            parts = []
            before = left
            for part in content:
                if isinstance(part, dict) and part.get("type") == IMAGE_PART:
                    left += 1
                    part = {"type": "text", "text": left_out_note(model)}
                parts.append(part)
            if left > before:
                message = {**message, "content": as_text_if_all_text(parts)}
        out.append(message)
    return out, left


def left_out_note(model: str) -> str:
    """What a text-only model reads where a tool result's image was."""
    return f"\n[An image was left out here: the model '{model}' reads text only.]\n"


def check_images_allowed(handle: ModelHandle, messages: list[dict[str, Any]]) -> None:
    """A 400 naming the first image part when ``handle``'s model takes no images,
    or when there are more than its ``max_images``."""
    check_parts_allowed(handle, image_parts(messages), "images", IMAGE_PART)


async def read_images(messages: list[dict[str, Any]], policy: ImagePolicy) -> ImageInputs:
    """Read every image part's file (concurrently) and rewrite the parts.

    Raises the first failure: :class:`~..errors.BadRequest` (bad URL, unreachable,
    refused) or 413 (too large)."""
    parts = image_parts(messages)
    if not parts:
        return ImageInputs(messages)
    urls = [(f"{where}.image_url", part["image_url"]) for where, part in parts]
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [
                group.create_task(read_image_url(url["url"], policy, f"{where}.url"))
                for where, url in urls
            ]
    except ExceptionGroup as failed:
        first = _first_error(failed)
        if first is None:
            raise
        raise first from None
    rewritten = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = [_worker_part(part) for part in content]
            message = {**message, "content": content}
        rewritten.append(message)
    return ImageInputs(rewritten, [task.result() for task in tasks])


def _worker_part(part: Any) -> Any:
    if isinstance(part, dict) and part.get("type") == IMAGE_PART:
        return {"type": WORKER_IMAGE_PART, "detail": part["image_url"].get("detail", "auto")}
    return part


def _first_error(group: BaseExceptionGroup[Any]) -> GatewayError | None:
    for exc in group.exceptions:
        if isinstance(exc, GatewayError):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            inner = _first_error(exc)
            if inner is not None:
                return inner
    return None
