"""Speech-to-text models (``model_type: whisper``, mlx-whisper): how large an
upload they take. No I/O and no MLX here."""

from __future__ import annotations

from mlx_gateway.supervisor.config.entry import ModelConfig, PositiveMiB


class WhisperConfig(ModelConfig, kw_only=True, tag="whisper"):
    """A speech-to-text model: ``/v1/audio/transcriptions``, ``/translations``, Wyoming."""

    max_upload_mb: PositiveMiB = 100.0
    """Largest audio upload accepted for this model, in MiB; a bigger one is
    answered with 413."""


ENTRIES = (WhisperConfig,)
"""The Structs of this kind's ``model_type`` values (the kind table's order)."""
