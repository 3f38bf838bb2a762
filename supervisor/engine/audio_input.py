"""Audio parts of chat messages (``input_audio``, OpenAI's shape), read for vision
models (:mod:`.media_walk` refuses them for the others).

``{"type": "input_audio", "input_audio": {"data": <base64>, "format": "wav"}}``
becomes ``{"type": "audio", "format": …, "payload": k}``; the decoded file travels
as binary frame ``k`` after the image and video frames. Whether the model has an
audio encoder is known only to its worker, which answers 400 naming the model when
it has none (see ``workers/vlm_audio.py``).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from mlx_gateway.supervisor.errors import BadRequest


def audio_file(part: dict[str, Any], where: str) -> bytes:
    """The file of the audio part at ``where``: its base64 ``data`` decoded."""
    param = f"{where}.input_audio.data"
    audio = part.get("input_audio")
    text = audio.get("data", "") if isinstance(audio, dict) else ""
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError, TypeError):
        raise BadRequest(
            f"{param} is not valid base64: send the audio file's bytes base64-encoded, "
            "without a data: prefix.",
            param=param,
            code="invalid_audio",
        ) from None
    if not data:
        raise BadRequest(f"{param} is empty.", param=param, code="invalid_audio")
    return data
