"""The OpenAI Realtime API (``/v1/realtime``, a WebSocket): speech in, text and speech
out, joining the whisper, lm and tts workers in one session (docs/speech.md)."""
