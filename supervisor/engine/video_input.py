"""Video parts of chat messages: where a part's URL is.

A video part is ``{"type": "video_url", "video_url": {"url": …}}`` (OpenAI-style),
or a peer's ``{"type": "input_video", "video_url" | "video": …}`` or
``{"type": "video", "video": …}``; the URL may be a plain string or ``{"url": …}``.
The URL is a ``data:`` URL (base64), an http(s) URL fetched under the model's image
fetch rules (timeout, private addresses), or a file path under one of the model's
``local_video_dirs`` (:mod:`.url_reader`). The file is read whole, bounded by
``max_video_mb`` (a 400 naming the limit), and travels to the worker as a binary
frame after the images (:mod:`.media_walk`); the part becomes
``{"type": "video", "payload": k}``. The worker decodes the file and samples its
frames (``workers/vlm/video.py``): bytes that are no video, or a video longer than
``max_video_seconds``, are its 400.
"""

from __future__ import annotations

from typing import Any

from mlx_gateway.supervisor.errors import BadRequest


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
