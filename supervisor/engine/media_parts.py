"""The one finder of a request's media parts: every part of the given types in the
messages' content lists, with its field path, in order. Images, videos, audio and
documents (:mod:`.vision_input`, :mod:`.video_input`, :mod:`.audio_input`,
:mod:`.documents`) find their parts here."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any


def find_parts(
    messages: list[dict[str, Any]], types: Collection[str]
) -> list[tuple[str, dict[str, Any]]]:
    """Every part whose ``type`` is one of ``types``, with its field path
    (``messages[1].content[0]``), in order."""
    found = []
    for i, message in enumerate(messages):
        content = message.get("content")
        if isinstance(content, list):
            for j, part in enumerate(content):
                if isinstance(part, dict) and part.get("type") in types:
                    found.append((f"messages[{i}].content[{j}]", part))
    return found
