"""Audio parts of chat messages (``input_audio``, OpenAI's shape): refused for models
that are not vision models, carried to the worker for vision ones.

``{"type": "input_audio", "input_audio": {"data": <base64>, "format": "wav"}}``
becomes ``{"type": "audio", "format": …, "payload": k}``; the decoded file travels
as binary frame ``k`` after the image frames. Whether the model has an audio
encoder is known only to its worker, which answers 400 naming the model when it
has none (see ``workers/vlm_audio.py``).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from mlx_gateway.protocol.kinds import IMAGE_INPUT
from mlx_gateway.supervisor.engine.kinds import serves
from mlx_gateway.supervisor.engine.media_parts import find_parts
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.pool.model_handle import ModelHandle

AUDIO_PART = "input_audio"


def audio_parts(messages: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Every audio part with its field path (``messages[1].content[0]``), in order."""
    return find_parts(messages, (AUDIO_PART,))


def check_audio_allowed(handle: ModelHandle, messages: list[dict[str, Any]]) -> None:
    """A 400 naming the model and the first audio part when the model is not a vision
    model (only mlx-vlm's omni models listen)."""
    parts = audio_parts(messages)
    if parts and not serves(handle, IMAGE_INPUT):
        raise BadRequest(
            f"The model '{handle.name}' (model_type {handle.config.model_type}) does not "
            "accept audio; send input_audio parts to a vision model with an audio encoder "
            "(model_type vlm, an omni model such as Gemma 3n), or transcribe the audio "
            "first with /v1/audio/transcriptions.",
            param=f"{parts[0][0]}.input_audio",
            code="audio_not_supported",
        )


def attach_audio(
    messages: list[dict[str, Any]], files: list[bytes]
) -> tuple[list[dict[str, Any]], list[bytes]]:
    """Decode every audio part's base64 into a file appended to ``files`` (after the
    images) and rewrite the part to point at its frame. Raises
    :class:`~..errors.BadRequest` for data that is not base64."""
    if not audio_parts(messages):
        return messages, files
    files = list(files)
    rewritten = []
    for i, message in enumerate(messages):
        content = message.get("content")
        if isinstance(content, list):
            parts = []
            for j, part in enumerate(content):
                if isinstance(part, dict) and part.get("type") == AUDIO_PART:
                    where = f"messages[{i}].content[{j}].input_audio"
                    audio = part[AUDIO_PART]
                    files.append(decode_base64(audio.get("data", ""), f"{where}.data"))
                    fmt = str(audio.get("format") or "wav")
                    part = {"type": "audio", "format": fmt, "payload": len(files) - 1}
                parts.append(part)
            message = {**message, "content": parts}
        rewritten.append(message)
    return rewritten, files


def decode_base64(text: str, where: str, what: str = "audio") -> bytes:
    """The bytes of a file sent as base64 in the request field ``where``; a 400
    naming it (code ``invalid_<what>``) when it is not base64 or is empty."""
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(
            f"{where} is not valid base64: send the {what} file's bytes base64-encoded, "
            "without a data: prefix.",
            param=where,
            code=f"invalid_{what}",
        ) from None
    if not data:
        raise BadRequest(f"{where} is empty.", param=where, code=f"invalid_{what}")
    return data
