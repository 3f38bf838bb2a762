"""Video parts through mlx-vlm's chat templates.

Where the model's processor takes videos itself (Qwen2-VL and its family: a
``video_processor`` that consumes ``videos``, see mlx-vlm's
``processor_handles_video``), a video part reaches the chat template as
``{"type": "video"}``, which the template turns into the model's video markers
(``<|vision_start|><|video_pad|><|vision_end|>``) and the processor expands into
one token per merged patch of the frames. Elsewhere the worker sends the frames as
ordered images, and no video part reaches the template.

mlx-vlm's message formatter knows image, audio and text parts only, so a
conversation with video parts is formatted with each video standing in as an image
(same place, same order) and the stand-ins are turned back into video parts before
the template renders it.
"""

from __future__ import annotations

from typing import Any

from mlx_vlm.generate.video import processor_handles_video
from mlx_vlm.prompt_utils import apply_chat_template, get_chat_template

from mlx_gateway.protocol.messages import IMAGE_PART, VIDEO_PART

__all__ = ["has_video_parts", "processor_handles_video", "render_with_videos"]

_IMAGE_KINDS = ("image", "image_url", "input_image")
"""The part types mlx-vlm's formatter counts as images."""


def has_video_parts(messages: list[dict[str, Any]]) -> bool:
    return any(_kind(part) == VIDEO_PART for m in messages for part in _content(m))


def render_with_videos(
    processor: Any,
    config: Any,
    messages: list[dict[str, Any]],
    *,
    num_images: int = 0,
    num_audios: int = 0,
    **kwargs: Any,
) -> Any:
    """The chat template applied to ``messages``, whose video parts stay video parts
    (see the module docstring). ``num_images`` counts the image parts only."""
    order: list[bool] = []  # for each image-like part, in order: is it a video?
    stand_ins: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            stand_ins.append(message)
            continue
        parts = []
        for part in content:
            kind = _kind(part)
            if kind == VIDEO_PART:
                order.append(True)
                part = {"type": IMAGE_PART}
            elif kind in _IMAGE_KINDS:
                order.append(False)
            parts.append(part)
        stand_ins.append({**message, "content": parts})
    formatted = apply_chat_template(
        processor,
        config,
        stand_ins,
        return_messages=True,
        num_images=num_images + order.count(True),
        num_audios=num_audios,
        **kwargs,
    )
    if not isinstance(formatted, list):
        raise ValueError("the model's chat template has no place for a video part")
    videos_left = order.count(True)
    for message in formatted:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if _kind(part) in _IMAGE_KINDS and order and order.pop(0):
                content[j] = {"type": VIDEO_PART}
                videos_left -= 1
    if videos_left:
        raise ValueError(
            "the model's chat template has no place for a video part "
            f"(model_type {getattr(config, 'model_type', '?')})"
        )
    return get_chat_template(processor, formatted, True, **kwargs)


def _content(message: Any) -> list[Any]:
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, list) else []


def _kind(part: Any) -> Any:
    return part.get("type") if isinstance(part, dict) else None
