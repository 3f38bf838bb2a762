"""The server VAD's turn events, on a scripted speech probability per 32 ms window:
a silence that may end the turn is reported at its first window (``SpeechPaused``,
where the early transcription starts) and its end by speech
(``SpeechResumed``), before ``silence_duration_ms`` decides (``SpeechStopped``)."""

from __future__ import annotations

from mlx_gateway.supervisor.api.realtime.audio import PCM16
from mlx_gateway.supervisor.api.realtime.vad import (
    WINDOW_MS,
    ServerVad,
    SpeechPaused,
    SpeechResumed,
    SpeechStarted,
    SpeechStopped,
    TurnDetection,
)


class Scripted:
    """A detector that says the next probability of its script."""

    def __init__(self, script: str) -> None:
        self.left = [1.0 if c == "#" else 0.0 for c in script]

    def process_samples(self, samples: list[float]) -> float:
        return self.left.pop(0)

    def reset(self) -> None:
        pass


def events(script: str, silence_ms: int = 4 * WINDOW_MS) -> list[object]:
    settings = TurnDetection(prefix_padding_ms=0, silence_duration_ms=silence_ms)
    vad = ServerVad(settings, PCM16, Scripted(script))
    window = bytes(int(PCM16.bytes_per_ms * WINDOW_MS))  # 32 ms at 24 kHz
    return [e for _ in script for e in vad.feed(window)]


def test_a_pause_shorter_than_the_silence_is_paused_then_resumed() -> None:
    w = WINDOW_MS
    assert events("..###..##....") == [
        SpeechStarted(2 * w),
        SpeechPaused(5 * w),
        SpeechResumed(),
        SpeechPaused(9 * w),
        SpeechStopped(9 * w),  # where the pause said the turn would end
    ]


def test_silence_alone_reports_nothing() -> None:
    assert events("....") == []
