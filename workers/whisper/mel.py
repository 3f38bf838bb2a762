"""Whisper's log-Mel spectrogram, computed block by block while the audio decodes.

``mlx_whisper.audio.log_mel_spectrogram`` needs the whole signal at once: the
samples, their short-time Fourier transform (about 2.5 times the samples' size)
and the result are all in memory together. :class:`MelBuilder` computes the same
frames from blocks of samples as they are decoded, keeping only the few hundred
samples that frames straddle between blocks, and stores the frames (80 or 128
floats per 10 ms: half the size of the samples). :meth:`MelBuilder.finish` gives a
:class:`LogMel` from which each 30 s window is cut when it is transcribed.

The numbers are the library's: the same Hann window, FFT, filter bank, reflected
start, zero-padded end, and the final clamp at 8 (log10 units) below the loudest
frame of the whole file, which is why that clamp is applied per window on use.
"""

from __future__ import annotations

import bisect

import mlx.core as mx
import numpy as np
from mlx_whisper.audio import (
    HOP_LENGTH,
    N_FFT,
    N_FRAMES,
    SAMPLE_RATE,
    hanning,
    mel_filters,
)

_HALF = N_FFT // 2
"""Samples on each side of a frame's centre."""
_FLOOR = -10.0
"""log10 of the library's power floor (1e-10): the value of a silent frame."""
BLOCK_FRAMES = 3000
"""Frames computed per FFT batch (30 s of audio)."""


class MelBuilder:
    """Feed decoded samples with :meth:`add`, then call :meth:`finish` once.

    Frame ``i`` is centred on sample ``i * HOP_LENGTH`` and spans ``N_FFT`` samples;
    before the first sample the signal is mirrored (as numpy's ``reflect`` pad),
    after the last it is silent.
    """

    def __init__(self, n_mels: int = 80) -> None:
        self.n_mels = n_mels
        self.samples = 0
        """Samples received so far."""
        self._pending: list[np.ndarray] = []
        self._pending_len = 0
        # The signal from index self._origin on (negative while the mirrored start
        # is still needed); frames before self._next_frame are done.
        self._tail = np.zeros(0, dtype=np.float32)
        self._origin = 0
        self._started = False
        self._next_frame = 0
        self._blocks: list[np.ndarray] = []
        self._peak = -np.inf
        self._window = hanning(N_FFT)
        self._filters = mel_filters(n_mels)

    @property
    def seconds(self) -> float:
        return self.samples / SAMPLE_RATE

    def add(self, block: np.ndarray) -> None:
        """Append mono float32 samples at 16 kHz and compute the frames they complete."""
        if not block.size:
            return
        self._pending.append(np.asarray(block, dtype=np.float32).reshape(-1))
        self._pending_len += block.size
        self.samples += block.size
        # Mirroring the start needs the first N_FFT/2 + 1 samples.
        if self._started or self._pending_len + self._tail.size > _HALF:
            self._compute(final=False)

    def finish(self) -> LogMel:
        """Compute the last frames; the builder is spent afterwards."""
        self._compute(final=True)
        content = self.samples // HOP_LENGTH
        peak = float(self._peak) if np.isfinite(self._peak) else _FLOOR
        return LogMel(self._blocks, content, peak, self.n_mels)

    def _compute(self, *, final: bool) -> None:
        signal = np.concatenate([self._tail, *self._pending]) if self._pending else self._tail
        self._pending, self._pending_len = [], 0
        if not self._started:
            # Later mirroring reads zeros past the end for files under N_FFT/2 samples.
            padded = np.concatenate([signal, np.zeros(_HALF + 1, dtype=np.float32)])
            signal = np.concatenate([padded[1 : _HALF + 1][::-1], signal])
            self._origin, self._started = -_HALF, True
        end = self._origin + signal.size  # one past the last known sample
        if final:
            # Every frame that reaches a real sample, read against silence after the end.
            last = -(-(self.samples + _HALF) // HOP_LENGTH)
            signal = np.concatenate([signal, np.zeros(N_FFT + HOP_LENGTH, dtype=np.float32)])
        else:
            last = (end - _HALF) // HOP_LENGTH + 1 if end >= _HALF else 0
        while self._next_frame < last:
            count = min(last - self._next_frame, BLOCK_FRAMES)
            start = self._next_frame * HOP_LENGTH - _HALF - self._origin
            self._blocks.append(
                self._frames(signal[start : start + (count - 1) * HOP_LENGTH + N_FFT])
            )
            self._next_frame += count
        keep = self._next_frame * HOP_LENGTH - _HALF - self._origin
        self._tail = signal[max(keep, 0) :].copy() if not final else np.zeros(0, np.float32)
        self._origin += max(keep, 0)

    def _frames(self, samples: np.ndarray) -> np.ndarray:
        count = (samples.size - N_FFT) // HOP_LENGTH + 1
        x = mx.array(samples)
        frames = mx.as_strided(x, shape=[count, N_FFT], strides=[HOP_LENGTH, 1])
        power = mx.fft.rfft(frames * self._window).abs().square()
        log_mel = mx.maximum(power @ self._filters.T, 1e-10).log10()
        out = np.array(log_mel, dtype=np.float32)
        self._peak = max(self._peak, float(out.max()))
        return out


class LogMel:
    """A finished spectrogram: ``frames`` content frames of ``n_mels`` each."""

    def __init__(self, blocks: list[np.ndarray], frames: int, peak: float, n_mels: int) -> None:
        self.frames = frames
        self.n_mels = n_mels
        self._blocks = blocks
        self._starts = list(np.cumsum([0, *(b.shape[0] for b in blocks)])[:-1])
        self._floor = max(peak - 8.0, _FLOOR)

    @property
    def duration(self) -> float:
        """Seconds of audio (to the frame)."""
        return self.frames * HOP_LENGTH / SAMPLE_RATE

    def _raw(self, start: int, stop: int) -> np.ndarray:
        out = np.full((max(stop - start, 0), self.n_mels), _FLOOR, dtype=np.float32)
        index = max(bisect.bisect_right(self._starts, start) - 1, 0)
        while index < len(self._blocks) and self._starts[index] < stop:
            first = self._starts[index]
            block = self._blocks[index]
            lo, hi = max(start, first), min(stop, first + block.shape[0])
            if lo < hi:
                out[lo - start : hi - start] = block[lo - first : hi - first]
            index += 1
        return out

    def _scale(self, raw: np.ndarray) -> np.ndarray:
        return (np.maximum(raw, self._floor) + 4.0) / 4.0

    def window(self, seek: int, size: int) -> mx.array:
        """Frames ``seek … seek+size`` (within the content), zero-padded to the
        decoder's 30 s input of ``N_FRAMES`` frames."""
        size = max(min(size, self.frames - seek, N_FRAMES), 0)
        out = np.zeros((N_FRAMES, self.n_mels), dtype=np.float32)
        out[:size] = self._scale(self._raw(seek, seek + size))
        return mx.array(out)

    def opening(self) -> mx.array:
        """The first 30 s as language detection sees them: past the end of the
        audio the frames are those of silence, not zeros."""
        return mx.array(self._scale(self._raw(0, N_FRAMES)))

    def release(self) -> None:
        """Drop the frames (the request ended)."""
        self._blocks, self._starts = [], []
