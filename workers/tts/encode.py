"""Encode synthesized speech as it comes: mp3, opus, aac, flac, wav or raw pcm.

PyAV (FFmpeg's libraries inside its wheels) encodes into a sink that is not
seekable, so every muxer writes a file that can be sent as it grows: bytes written
after each block of samples go to the client at once, and nothing is patched
afterwards (a streamed wav or flac header carries no total length, which players
and FFmpeg read to the end of the data).

``pcm`` is what OpenAI's is: raw 24 kHz mono 16-bit little-endian samples;
``g711_ulaw`` and ``g711_alaw`` (the Realtime API's) raw 8 kHz G.711 bytes.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass

import av
import numpy as np


@dataclass(frozen=True)
class Format:
    container: str
    """FFmpeg's muxer (``None`` for raw pcm)."""
    codec: str
    rate: int | None = None
    """A fixed output sample rate; ``None``: the model's own."""
    media_type: str = "application/octet-stream"


FORMATS: dict[str, Format] = {
    "mp3": Format("mp3", "libmp3lame", media_type="audio/mpeg"),
    # Opus only runs at 8, 12, 16, 24 or 48 kHz
    "opus": Format("ogg", "libopus", rate=48_000, media_type="audio/ogg"),
    "aac": Format("adts", "aac", media_type="audio/aac"),
    "flac": Format("flac", "flac", media_type="audio/flac"),
    "wav": Format("wav", "pcm_s16le", media_type="audio/wav"),
    "pcm": Format("", "pcm_s16le", rate=24_000, media_type="audio/pcm"),
    # the Realtime API's G.711 output (/v1/realtime only): raw 8 kHz bytes
    "g711_ulaw": Format("mulaw", "pcm_mulaw", rate=8_000, media_type="audio/basic"),
    "g711_alaw": Format("alaw", "pcm_alaw", rate=8_000, media_type="audio/basic"),
}
"""The OpenAI ``response_format`` values, and the Realtime API's G.711 formats."""

PCM_RATE = 24_000


def output_rate(response_format: str, model_rate: int) -> int:
    """The sample rate of the audio a request in ``response_format`` gets."""
    fixed = FORMATS[response_format].rate
    return fixed if fixed is not None else model_rate


class _Sink(io.RawIOBase):
    """A write-only, non-seekable file: FFmpeg's muxers then never seek back."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        self._parts.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        out = b"".join(self._parts)
        self._parts.clear()
        return out


class Encoder:
    """One response's encoder: :meth:`add` float32 samples at the model's rate and
    get the bytes that are ready; :meth:`finish` returns the rest."""

    def __init__(self, response_format: str, model_rate: int) -> None:
        spec = FORMATS[response_format]
        self.rate = output_rate(response_format, model_rate)
        self.model_rate = model_rate
        self._sink = _Sink()
        self._container: av.container.OutputContainer | None = None
        self._stream: av.audio.stream.AudioStream | None = None
        sample_format = "s16"
        frame_size: int | None = None
        if spec.container:
            self._container = av.open(self._sink, "w", format=spec.container)
            stream = self._container.add_stream(spec.codec, rate=self.rate, layout="mono")
            assert isinstance(stream, av.audio.stream.AudioStream)
            self._stream = stream
            context = stream.codec_context
            sample_format = context.format.name
            frame_size = context.frame_size or None
        self._resampler = av.AudioResampler(
            format=sample_format, layout="mono", rate=self.rate, frame_size=frame_size
        )

    def add(self, samples: np.ndarray) -> bytes:
        """Encode ``samples`` (mono float32 in [-1, 1] at the model's rate); the bytes
        of the file that are ready now (maybe none: encoders work in frames)."""
        block = np.clip(samples.astype(np.float32, copy=False).reshape(1, -1), -1.0, 1.0)
        if block.size == 0:
            return b""
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(block), format="flt", layout="mono")
        frame.sample_rate = self.model_rate
        self._write(self._resampler.resample(frame))
        return self._sink.take()

    def finish(self) -> bytes:
        """Flush the resampler, the encoder and the muxer: the file's last bytes."""
        self._write(self._resampler.resample(None))
        if self._container is not None and self._stream is not None:
            for packet in self._stream.encode(None):
                self._container.mux(packet)
            self._container.close()
            self._container = None
        return self._sink.take()

    def close(self) -> None:
        """Drop the encoder without finishing the file (a cancelled request)."""
        if self._container is not None:
            with contextlib.suppress(av.FFmpegError):
                self._container.close()
            self._container = None

    def _write(self, frames: list[av.AudioFrame]) -> None:
        for frame in frames:
            if self._container is None or self._stream is None:
                self._sink.write(bytes(frame.planes[0])[: frame.samples * 2])
                continue
            for packet in self._stream.encode(frame):
                self._container.mux(packet)
