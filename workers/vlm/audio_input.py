"""The audio of ``input_audio`` parts, for vision models that also listen (omni models).

The gateway sends each audio part's file as a binary frame and rewrites the part to
``{"type": "audio", "format": …, "payload": k}`` (``k``: the frame). Here the file
is decoded with PyAV, as for Whisper (:mod:`.audio`), into mono float32 samples at
the rate of the model's feature extractor, which mlx-vlm's ``prepare_inputs``
takes as they are.

No MLX here: PyAV and NumPy only, testable on its own.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mlx_gateway.workers.runtime.contract import RequestError

MAX_AUDIO_SECONDS = 1200
"""Longer audio is refused (20 minutes; the decoded samples stay below 80 MB)."""
_AUDIO_MODULES = ("audio_tower", "audio_encoder", "audio_model")
"""Where mlx-vlm's omni models keep their audio encoder (Gemma 3n and 4, Qwen3-Omni,
Phi-4-multimodal, MiniCPM-o …); an absent or ``None`` one means no audio."""


def takes_audio(model: Any) -> bool:
    """Whether an mlx-vlm model has an audio encoder (on itself or its ``thinker``)."""
    owners = (model, getattr(model, "thinker", None))
    return any(
        getattr(owner, name, None) is not None
        for owner in owners
        if owner is not None
        for name in _AUDIO_MODULES
    )


def sampling_rate(processor: Any) -> int:
    """The rate the model's feature extractor listens at (16 kHz when it says none)."""
    extractor = getattr(processor, "feature_extractor", None)
    rate = getattr(extractor, "sampling_rate", None)
    return rate if isinstance(rate, int) and rate > 0 else 16_000


def decode_input_audio(data: bytes, *, where: str, rate: int) -> np.ndarray:
    """One audio file (any container FFmpeg reads: wav, mp3, flac, ogg, m4a …) →
    mono float32 samples at ``rate`` Hz. Raises :class:`RequestError` (400) for a
    file that is not audio, and 413 for audio longer than :data:`MAX_AUDIO_SECONDS`."""
    from mlx_gateway.workers.common.audio import AudioError, decode_audio

    if not data:
        raise RequestError(f"The audio in {where} is empty.", param=where, code="invalid_audio")
    limit = MAX_AUDIO_SECONDS * rate
    blocks: list[np.ndarray] = []
    total = 0
    try:
        for block in decode_audio(data, rate=rate):
            total += block.size
            if total > limit:
                raise RequestError(
                    f"The audio in {where} is longer than the {MAX_AUDIO_SECONDS} seconds "
                    "this server decodes; send a shorter clip.",
                    status=413,
                    param=where,
                    code="audio_too_long",
                )
            blocks.append(block)
    except AudioError as exc:
        raise RequestError(
            f"The audio in {where} cannot be decoded: {exc}.", param=where, code="invalid_audio"
        ) from None
    if total == 0:
        raise RequestError(
            f"The audio in {where} has no samples.", param=where, code="invalid_audio"
        )
    return np.concatenate(blocks).astype(np.float32, copy=False)
