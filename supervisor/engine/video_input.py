"""Video parts of chat messages: refused for models that are not vision models, read
for vision ones.

A video part is ``{"type": "video_url", "video_url": {"url": …}}`` (OpenAI-style),
or a peer's ``{"type": "input_video", "video_url" | "video": …}`` or
``{"type": "video", "video": …}``; the URL may be a plain string or ``{"url": …}``.
The URL is a ``data:`` URL (base64), an http(s) URL fetched under the model's image
fetch rules (timeout, private addresses; :mod:`.image_fetch`), or a file path under
one of the model's ``local_video_dirs``. The file is read whole here, bounded by
``max_video_mb`` (a 400 naming the limit), and travels to the worker as a binary
frame after the images; the part becomes ``{"type": "video", "payload": k}``. The
worker decodes the file and samples its frames (``workers/vlm/video.py``): bytes
that are no video, or a video longer than ``max_video_seconds``, are its 400.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlx_gateway.protocol.kinds import IMAGE_INPUT
from mlx_gateway.protocol.messages import VIDEO_PART
from mlx_gateway.supervisor.config import ModelConfig, ServerConfig
from mlx_gateway.supervisor.config.kinds import settings_as
from mlx_gateway.supervisor.config.kinds.vlm import VlmConfig
from mlx_gateway.supervisor.engine.image_fetch import MIB, ImagePolicy, ImageTooLarge, fetch, shown
from mlx_gateway.supervisor.engine.kinds import serves
from mlx_gateway.supervisor.engine.media_parts import find_parts
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.pool.model_handle import ModelHandle

VIDEO_PART_TYPES = ("video_url", "input_video", "video")
"""The part types read as videos (OpenAI-style, then the peers' names)."""


@dataclass(frozen=True)
class VideoPolicy:
    """How a model's video URLs are read."""

    max_bytes: int
    fetch: ImagePolicy
    """Timeout and address rules for http(s) URLs (the image ones)."""
    local_dirs: tuple[Path, ...] = ()


def video_policy(config: ModelConfig, server: ServerConfig) -> VideoPolicy:
    """How the gateway reads the video URLs of ``config``'s vision model."""
    model = settings_as(config, VlmConfig)
    allow_private = model.allow_private_image_urls
    if allow_private is None:
        allow_private = server.allow_private_image_urls
    max_bytes = int(model.max_video_mb * MIB)
    dirs = tuple(Path(d).expanduser().resolve() for d in model.local_video_dirs)
    return VideoPolicy(
        max_bytes=max_bytes,
        fetch=ImagePolicy(
            max_bytes=max_bytes, timeout=model.image_fetch_timeout, allow_private=allow_private
        ),
        local_dirs=dirs,
    )


def video_parts(messages: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Every video part with its field path (``messages[1].content[0]``), in order."""
    return find_parts(messages, VIDEO_PART_TYPES)


def video_url(part: dict[str, Any], where: str) -> tuple[str, str]:
    """The URL of a video part and the field that holds it."""
    for key in ("video_url", "video"):
        value = part.get(key)
        if isinstance(value, dict):
            value, key = value.get("url"), f"{key}.url"
        if isinstance(value, str) and value:
            return value, f"{where}.{key}"
    raise BadRequest(
        f"The video part {where} has no URL: send "
        '{"type": "video_url", "video_url": {"url": "data:video/mp4;base64,…"}}.',
        param=where,
        code="invalid_video_url",
    )


def check_videos_allowed(handle: ModelHandle, messages: list[dict[str, Any]]) -> None:
    """A 400 naming the model and the first video part when the model is not a
    vision model, or the first one past its ``max_videos``."""
    check_parts_allowed(handle, video_parts(messages), "videos", "video_url")


def check_parts_allowed(
    handle: ModelHandle, parts: list[tuple[str, dict[str, Any]]], noun: str, part_type: str
) -> None:
    """A 400 naming the first of ``parts`` (``noun``: ``images`` or ``videos``) when
    ``handle``'s model is not a vision model, or the first one past its limit
    (``max_images``, ``max_videos``)."""
    if not parts:
        return
    if not serves(handle, IMAGE_INPUT):
        raise BadRequest(
            f"The model '{handle.name}' (model_type {handle.config.model_type}) does not "
            f"accept {noun}; send {part_type} parts to a model of model_type vlm.",
            param=parts[0][0],
            code=f"{noun}_not_supported",
        )
    limit_key = f"max_{noun}"
    limit: int = getattr(settings_as(handle.config, VlmConfig), limit_key)
    if len(parts) > limit:
        raise BadRequest(
            f"The request has {len(parts)} {noun}; the model '{handle.name}' accepts at most "
            f"{limit} ({limit_key}).",
            param=parts[limit][0],
            code=f"too_many_{noun}",
        )


async def read_videos(
    messages: list[dict[str, Any]], files: list[bytes], policy: VideoPolicy
) -> tuple[list[dict[str, Any]], list[bytes]]:
    """Read every video part's file (concurrently), append them to ``files`` and
    rewrite the parts to name their frames. Raises the first failure, a
    :class:`~..errors.BadRequest`."""
    parts = video_parts(messages)
    if not parts:
        return messages, files
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [
                group.create_task(read_video_url(*video_url(part, where), policy))
                for where, part in parts
            ]
    except ExceptionGroup as failed:
        raise failed.exceptions[0] from None
    files = [*files]
    data = iter([task.result() for task in tasks])
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            new = []
            for part in content:
                if isinstance(part, dict) and part.get("type") in VIDEO_PART_TYPES:
                    files.append(next(data))
                    part = {"type": VIDEO_PART, "payload": len(files) - 1}
                new.append(part)
            message = {**message, "content": new}
        out.append(message)
    return out, files


async def read_video_url(url: str, param: str, policy: VideoPolicy) -> bytes:
    """The file behind a video URL: ``data:``, ``http(s):``, or a path (``/…``,
    ``~/…``, ``file://…``) under one of ``policy.local_dirs``."""
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme == "data":
        return _data_url(url, policy.max_bytes, param)
    if scheme in ("http", "https"):
        try:
            return await fetch(url, policy.fetch, param)
        except ImageTooLarge:
            raise _too_large(f"at '{shown(url)}'", policy.max_bytes, param) from None
        except BadRequest as exc:  # the image fetcher's words, said of a video
            words = exc.message.replace("The image URL", "The video URL")
            raise BadRequest(words, param=exc.param, code=exc.code) from None
    if scheme == "file" or url.startswith(("/", "~")):
        path = url[len("file://") :] if scheme == "file" else url
        return await asyncio.to_thread(_local_file, path, policy, param)
    raise BadRequest(
        f"The video URL '{shown(url)}' is not supported: use a data: URL (base64), an "
        "http(s) URL, or a file path under the model's local_video_dirs.",
        param=param,
        code="invalid_video_url",
    )


def _too_large(what: str, limit: int, param: str) -> BadRequest:
    return BadRequest(
        f"The video {what} is too large: the limit is {limit / MIB:g} MiB (max_video_mb).",
        param=param,
        code="video_too_large",
    )


def _data_url(url: str, max_bytes: int, param: str) -> bytes:
    header, sep, data = url.partition(",")
    media_type = header[5:].split(";", 1)[0].strip().lower()
    if not sep or not header.lower().endswith(";base64"):
        raise BadRequest(
            f"The data URL '{shown(url)}' is not base64 (data:video/mp4;base64,…).",
            param=param,
            code="invalid_video_url",
        )
    if media_type.startswith(("image/", "audio/", "text/")):
        raise BadRequest(
            f"The data URL's media type '{media_type}' is not a video type (video/…).",
            param=param,
            code="invalid_video_url",
        )
    compact = "".join(data.split())
    if len(compact) // 4 * 3 > max_bytes + 2:  # refuse before decoding
        raise _too_large("in the data URL", max_bytes, param)
    try:
        raw = base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(
            "The data URL's video is not valid base64.", param=param, code="invalid_video_url"
        ) from None
    if not raw:
        raise BadRequest("The data URL holds no data.", param=param, code="invalid_video_url")
    if len(raw) > max_bytes:
        raise _too_large("in the data URL", max_bytes, param)
    return raw


def _local_file(path: str, policy: VideoPolicy, param: str) -> bytes:
    if not policy.local_dirs:
        raise BadRequest(
            f"The video path '{shown(path)}' is not allowed: this model reads no local "
            "files; list their folder in its local_video_dirs, or send a data: or http(s) URL.",
            param=param,
            code="video_path_refused",
        )
    resolved = Path(path).expanduser().resolve()
    if not any(resolved.is_relative_to(folder) for folder in policy.local_dirs):
        raise BadRequest(
            f"The video path '{shown(path)}' is outside the model's local_video_dirs.",
            param=param,
            code="video_path_refused",
        )
    try:
        size = resolved.stat().st_size
        if size > policy.max_bytes:
            raise _too_large(f"'{shown(path)}'", policy.max_bytes, param)
        return resolved.read_bytes()
    except OSError as exc:
        raise BadRequest(
            f"The video file '{shown(path)}' cannot be read: {exc.strerror or exc}.",
            param=param,
            code="invalid_video_url",
        ) from None
