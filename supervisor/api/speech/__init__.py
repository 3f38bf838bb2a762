"""``POST /v1/audio/speech`` and ``GET /v1/audio/voices``: text to speech."""
