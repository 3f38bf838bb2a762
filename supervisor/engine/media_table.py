"""The media table: each part type of every surface, and the modality it is.

Every surface turns its media into chat-style parts before the turn; the part types
they arrive as are these rows. :func:`find_media` is the one walk that finds them:
one pass over the messages' content lists, each part looked up here. Adding a
modality is one row here, its rules in :mod:`.media_policy` and its reader in
:mod:`.media_walk`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

IMAGE, VIDEO, AUDIO, DOCUMENT = "image", "video", "audio", "document"

MEDIA_TABLE: dict[str, str] = {
    "image_url": IMAGE,
    "video_url": VIDEO,  # OpenAI-style, then the peers' names
    "input_video": VIDEO,
    "video": VIDEO,
    "input_audio": AUDIO,
    "file": DOCUMENT,
}
"""Part type → modality."""

Found = tuple[str, dict[str, Any]]
"""A part and its field path (``messages[1].content[0]``)."""


@dataclass
class MediaParts:
    """A request's media parts by modality, each list in message order."""

    by_modality: dict[str, list[Found]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.by_modality)

    def of(self, modality: str) -> list[Found]:
        return self.by_modality.get(modality, [])


def find_media(messages: list[dict[str, Any]]) -> MediaParts:
    """Every media part of ``messages``, by modality (one pass)."""
    found: dict[str, list[Found]] = {}
    for i, message in enumerate(messages):
        content = message.get("content")
        if isinstance(content, list):
            for j, part in enumerate(content):
                kind = part.get("type") if isinstance(part, dict) else None
                if isinstance(kind, str) and (modality := MEDIA_TABLE.get(kind)):
                    found.setdefault(modality, []).append((f"messages[{i}].content[{j}]", part))
    return MediaParts(found)


def modality_of(part: Any) -> str | None:
    """The modality of a content part (``None``: text, or no part of the table)."""
    if not isinstance(part, dict):
        return None
    kind = part.get("type")
    return MEDIA_TABLE.get(kind) if isinstance(kind, str) else None
