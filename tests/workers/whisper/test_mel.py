"""workers/mel.py: the log-Mel frames computed block by block equal mlx-whisper's
whole-signal spectrogram, window by window."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx_whisper.audio import N_FRAMES, N_SAMPLES, log_mel_spectrogram, pad_or_trim

from mlx_gateway.workers.whisper.mel import MelBuilder


def speechless(samples: int, seed: int = 0) -> np.ndarray:
    """Noise with a slow swell, so frames differ in loudness (the clamp matters)."""
    rng = np.random.default_rng(seed)
    swell = np.sin(np.arange(samples) / 3000.0)
    return (0.1 * rng.standard_normal(samples) * swell).astype(np.float32)


def feed(audio: np.ndarray, seed: int = 1) -> MelBuilder:
    builder = MelBuilder()
    rng = np.random.default_rng(seed)
    start = 0
    while start < audio.size:
        size = int(rng.integers(1, 40_000))  # blocks of any size, as decoders give them
        builder.add(audio[start : start + size])
        start += size
    return builder


@pytest.mark.parametrize("samples", [0, 50, 200, 201, 1_000, 44_555, 16_000 * 75 + 123])
def test_windows_equal_the_librarys_spectrogram(samples: int) -> None:
    audio = speechless(samples)
    reference = np.array(log_mel_spectrogram(audio, padding=N_SAMPLES))
    content = reference.shape[0] - N_FRAMES
    mel = feed(audio).finish()
    assert mel.frames == content
    assert mel.duration == pytest.approx(content / 100)
    for seek in range(0, max(content, 1), 1_700):
        size = min(N_FRAMES, content - seek)
        expected = np.array(pad_or_trim(mx.array(reference[seek : seek + size]), N_FRAMES, axis=-2))
        np.testing.assert_allclose(np.array(mel.window(seek, N_FRAMES)), expected, atol=1e-5)
    # Language detection sees the first 30 s with silence (not zeros) after the end.
    opening = np.array(pad_or_trim(mx.array(reference), N_FRAMES, axis=-2))
    np.testing.assert_allclose(np.array(mel.opening()), opening, atol=1e-5)


def test_only_a_few_samples_are_held_between_blocks() -> None:
    builder = MelBuilder()
    for _ in range(20):
        builder.add(speechless(16_000))
        assert builder._tail.size < 400 + 160  # one frame's reach, whatever came in
    assert builder.seconds == 20
