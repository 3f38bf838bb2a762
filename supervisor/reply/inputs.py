"""A turn's inputs that are read while the client waits: the image, video and
document parts of its messages, fetched unless the client leaves first.

For a text-only model, images in tool results become a one-line note each (logged,
and said in the request's log line); documents become their text
(:mod:`..engine.documents`), for a vision model their pages images too."""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request

from mlx_gateway.protocol.kinds import IMAGE_INPUT
from mlx_gateway.supervisor import recorder
from mlx_gateway.supervisor.engine.audio_input import AUDIO_PART, check_audio_allowed
from mlx_gateway.supervisor.engine.documents import (
    DOCUMENT_PART,
    document_parts,
    document_policy,
    expand_documents,
)
from mlx_gateway.supervisor.engine.kinds import serves
from mlx_gateway.supervisor.engine.media_parts import find_parts
from mlx_gateway.supervisor.engine.video_input import (
    VIDEO_PART_TYPES,
    check_videos_allowed,
    video_parts,
    video_policy,
)
from mlx_gateway.supervisor.engine.vision_input import (
    IMAGE_PART,
    ImageInputs,
    check_images_allowed,
    image_parts,
    image_policy,
    read_images,
    tool_images_as_notes,
)
from mlx_gateway.supervisor.http.disconnect import unless_disconnected
from mlx_gateway.supervisor.pool.model_handle import ModelHandle

logger = logging.getLogger(__name__)

MEDIA_PARTS = (IMAGE_PART, *VIDEO_PART_TYPES, AUDIO_PART, DOCUMENT_PART)
"""Every part type read here: a text request's messages are walked once for them."""


async def prepare_images(
    request: Request, handle: ModelHandle, messages: list[dict[str, Any]]
) -> ImageInputs:
    """Check ``messages``' image, video and document parts against ``handle``'s
    model and read them (unless the client leaves first). Without such parts:
    ``messages`` as they are."""
    if not find_parts(messages, MEDIA_PARTS):
        return ImageInputs(messages)
    vision = serves(handle, IMAGE_INPUT)
    if not vision:
        messages, left = tool_images_as_notes(messages, handle.name)
        if left:
            logger.info(
                "%d image(s) in tool results left out: the model '%s' reads text only",
                left,
                handle.name,
            )
            recorder.note_left_out(left)
    check_images_allowed(handle, messages)
    check_videos_allowed(handle, messages)
    check_audio_allowed(handle, messages)
    registry = request.app.state.registry
    server = registry.config.server
    if document_parts(messages):
        vision_models = tuple(h.name for h in registry.visible() if serves(h, IMAGE_INPUT))
        documents = document_policy(
            handle.config, server, render=vision, vision_models=vision_models
        )
        messages = await unless_disconnected(request, expand_documents(messages, documents))
    inputs = ImageInputs(messages)
    if image_parts(messages):
        policy = image_policy(handle.config, server)
        inputs = await unless_disconnected(request, read_images(messages, policy))
    if video_parts(messages):
        videos = video_policy(handle.config, server)
        inputs = await unless_disconnected(request, inputs.with_videos(videos))
    return inputs.with_audio()
