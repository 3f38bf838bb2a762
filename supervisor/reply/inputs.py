"""A turn's inputs that are read while the client waits: the image, video, audio and
document parts of its messages, read unless the client leaves first
(:mod:`..engine.media_walk`).

For a text-only model, images in tool results become a one-line note each (logged,
and said in the request's log line); documents become their text
(:mod:`..engine.documents`), for a vision model their pages images too."""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request

from mlx_gateway.protocol.kinds import IMAGE_INPUT
from mlx_gateway.supervisor import recorder
from mlx_gateway.supervisor.engine.kinds import serves
from mlx_gateway.supervisor.engine.media_policy import media_policy
from mlx_gateway.supervisor.engine.media_table import DOCUMENT, IMAGE, find_media
from mlx_gateway.supervisor.engine.media_walk import MediaInputs, read_media
from mlx_gateway.supervisor.engine.vision_input import tool_images_as_notes
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.http.disconnect import unless_disconnected
from mlx_gateway.supervisor.pool.model_handle import ModelHandle

logger = logging.getLogger(__name__)


async def prepare_images(
    request: Request, handle: ModelHandle, messages: list[dict[str, Any]]
) -> MediaInputs:
    """Check ``messages``' media parts against ``handle``'s model and read them (unless
    the client leaves first). Without such parts: ``messages`` as they are."""
    found = find_media(messages)
    if not found:
        return MediaInputs(messages)
    vision = serves(handle, IMAGE_INPUT)
    if not vision and found.of(IMAGE):
        messages, left = tool_images_as_notes(messages, handle.name)
        if left:
            logger.info(
                "%d image(s) in tool results left out: the model '%s' reads text only",
                left,
                handle.name,
            )
            recorder.note_left_out(left)
            found = find_media(messages)
    registry = gateway_of(request).registry
    vision_models: tuple[str, ...] = ()
    if found.of(DOCUMENT):
        vision_models = tuple(h.name for h in registry.visible() if serves(h, IMAGE_INPUT))
    policy = media_policy(
        handle.config, registry.config.server, render=vision, vision_models=vision_models
    )
    model_type = handle.config.model_type
    return await unless_disconnected(request, read_media(messages, found, policy, model_type))
