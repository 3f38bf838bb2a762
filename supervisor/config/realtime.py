"""The ``realtime:`` section: which speech models a Realtime session uses.

A session's language model is the one it connects with (``/v1/realtime?model=``);
its user audio is transcribed by ``transcription_model`` (a whisper entry; a session
may name another) and its answers spoken by ``speech_model`` (a tts entry) with
``voice`` unless the session names one. Left out: the first whisper and the first
tts entry of ``models:``, and the tts entry's own default voice.

``early_transcription`` (on unless ``false``): with server_vad or semantic_vad, a
turn's transcription starts at the first silence after its speech, not once
``silence_duration_ms`` passed and the turn is committed (dropped, and the whisper
worker's request cancelled, when the speech goes on).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

_Name = Annotated[str, msgspec.Meta(min_length=1)]


class RealtimeConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    transcription_model: _Name | None = None
    speech_model: _Name | None = None
    voice: _Name | None = None
    early_transcription: bool = True
