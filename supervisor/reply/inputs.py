"""A turn's inputs that are read while the client waits: the image and video parts
of its messages, fetched unless the client leaves first."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from mlx_gateway.supervisor.engine.audio_input import check_audio_allowed
from mlx_gateway.supervisor.engine.video_input import (
    check_videos_allowed,
    video_parts,
    video_policy,
)
from mlx_gateway.supervisor.engine.vision_input import (
    ImageInputs,
    check_images_allowed,
    image_parts,
    image_policy,
    read_images,
)
from mlx_gateway.supervisor.http.disconnect import unless_disconnected
from mlx_gateway.supervisor.pool.model_handle import ModelHandle


async def prepare_images(
    request: Request, handle: ModelHandle, messages: list[dict[str, Any]]
) -> ImageInputs:
    """Check ``messages``' image and video parts against ``handle``'s model and read
    them (unless the client leaves first). Without such parts: ``messages`` as they
    are."""
    check_images_allowed(handle, messages)
    check_videos_allowed(handle, messages)
    check_audio_allowed(handle, messages)
    inputs = ImageInputs(messages)
    server = request.app.state.registry.config.server
    if image_parts(messages):
        policy = image_policy(handle.config, server)
        inputs = await unless_disconnected(request, read_images(messages, policy))
    if video_parts(messages):
        videos = video_policy(handle.config, server)
        inputs = await unless_disconnected(request, inputs.with_videos(videos))
    return inputs.with_audio()
