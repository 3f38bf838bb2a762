"""What ``GET /openapi.json`` says about the speech-to-text routes."""

from __future__ import annotations

from mlx_gateway.supervisor.api.audio.formats import (
    TextBody,
    TranscriptionBody,
    TranscriptionForm,
    TranslationForm,
)
from mlx_gateway.supervisor.http.openapi import TEXT, OpenApi, Operation

_TEXT_OR_VTT = {"text/plain": TEXT["text/plain"], "text/vtt": {"schema": {"type": "string"}}}

OPENAPI = OpenApi(
    {
        ("POST", "/v1/audio/transcriptions"): Operation(
            "createTranscription",
            "Speech to text in the language spoken.",
            request=TranscriptionForm,
            files=("file",),
            response=TranscriptionBody,
            stream=True,
            extra=_TEXT_OR_VTT,
        ),
        ("POST", "/v1/audio/translations"): Operation(
            "createTranslation",
            "Speech in any language to English text.",
            request=TranslationForm,
            files=("file",),
            response=TextBody,
            extra=_TEXT_OR_VTT,
        ),
    }
)
