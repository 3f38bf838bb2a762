"""A turn's inputs that are read while the client waits: the image parts of its
messages, fetched unless the client leaves first."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from mlx_gateway.supervisor.engine.audio_input import check_audio_allowed
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
    """Check ``messages``' image parts against ``handle``'s model and read them
    (unless the client leaves first). Without image parts: ``messages`` as they are."""
    check_images_allowed(handle, messages)
    check_audio_allowed(handle, messages)
    if not image_parts(messages):
        return ImageInputs(messages).with_audio()
    registry = request.app.state.registry
    policy = image_policy(handle.config, registry.config.server)
    inputs = await unless_disconnected(request, read_images(messages, policy))
    return inputs.with_audio()
