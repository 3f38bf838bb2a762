"""What ``GET /openapi.json`` says about the text-to-speech routes."""

from __future__ import annotations

from mlx_gateway.supervisor.api.speech.schemas import SpeechRequest, VoiceList
from mlx_gateway.supervisor.http.openapi import OpenApi, Operation

OPENAPI = OpenApi(
    {
        ("POST", "/v1/audio/speech"): Operation(
            "createSpeech",
            "Text to speech: the audio file, streamed as it is synthesized (or as SSE events).",
            request=SpeechRequest,
            extra={
                media: {"schema": {"type": "string", "contentMediaType": media}}
                for media in ("audio/mpeg", "audio/ogg", "audio/aac", "audio/flac", "audio/wav")
            }
            | {"audio/pcm": {"schema": {"type": "string", "contentMediaType": "audio/pcm"}}},
            stream=True,
            statuses=(400, 404, 429, 500, 503),
        ),
        ("GET", "/v1/audio/voices"): Operation(
            "listVoices",
            "The voices of the text-to-speech models (?model= starts that model to ask it).",
            response=VoiceList,
            statuses=(400, 404, 503),
        ),
    }
)
