"""Image parts of chat messages where the model reads text only: a tool's picture.

For a vision model every ``{"type": "image_url", "image_url": {"url", "detail"}}``
part is read (``data:`` URL or http(s) fetch, :mod:`.url_reader`) with the other
media (:mod:`.media_walk`); the part becomes ``{"type": "image", "detail": …}`` and
its file travels to the worker as a binary frame (``Generate.images``). A text-only
model refuses a user's image, but reads a note in place of a tool result's.
"""

from __future__ import annotations

from typing import Any

from mlx_gateway.supervisor.engine.documents import as_text_if_all_text

IMAGE_PART = "image_url"


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
