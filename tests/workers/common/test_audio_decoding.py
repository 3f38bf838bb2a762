"""workers/audio.py: uploads in the common formats, decoded by PyAV to 16 kHz mono."""

from __future__ import annotations

import io

import av
import numpy as np
import pytest

from mlx_gateway.workers.common.audio import SAMPLE_RATE, AudioError, decode_audio
from tests.fixtures.whisper import FOX_CLIPS

TONE = 440.0


def encode(container: str, codec: str, *, rate: int = 44_100, layout: str = "stereo") -> bytes:
    """One second of a 440 Hz tone, encoded by FFmpeg (through PyAV) as ``codec``."""
    buffer = io.BytesIO()
    with av.open(buffer, "w", format=container) as out:
        stream = out.add_stream(codec, rate=rate, layout=layout)
        channels = stream.codec_context.layout.nb_channels
        t = np.arange(rate) / rate
        samples = np.tile(0.4 * np.sin(2 * np.pi * TONE * t), (channels, 1)).astype(np.float32)
        frame = av.AudioFrame.from_ndarray(samples, format="fltp", layout=layout)
        frame.sample_rate = rate
        # The encoder's own sample format and frame size.
        ctx = stream.codec_context
        resampler = av.AudioResampler(
            format=ctx.format.name, layout=layout, rate=rate, frame_size=ctx.frame_size or None
        )
        for converted in [*resampler.resample(frame), *resampler.resample(None)]:
            out.mux(stream.encode(converted))
        out.mux(stream.encode(None))
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("container", "codec", "rate", "layout"),
    [
        ("wav", "pcm_s16le", 44_100, "stereo"),
        ("flac", "flac", 48_000, "mono"),
        ("mp3", "libmp3lame", 44_100, "stereo"),
        ("ogg", "libopus", 48_000, "stereo"),
        ("ipod", "aac", 22_050, "mono"),  # .m4a
        ("webm", "libopus", 48_000, "mono"),
    ],
)
def test_common_formats_become_16k_mono(container: str, codec: str, rate: int, layout: str) -> None:
    blocks = list(decode_audio(encode(container, codec, rate=rate, layout=layout)))
    assert all(b.dtype == np.float32 and b.ndim == 1 for b in blocks)
    samples = np.concatenate(blocks)
    # One second, give or take the encoder's padding (lossy codecs add a frame or two).
    assert SAMPLE_RATE * 0.95 <= samples.size <= SAMPLE_RATE * 1.1
    spectrum = np.abs(np.fft.rfft(samples[: SAMPLE_RATE // 2]))
    peak_hz = np.argmax(spectrum) * SAMPLE_RATE / (SAMPLE_RATE // 2)
    assert abs(peak_hz - TONE) <= 4  # the tone survived resampling and down-mixing
    assert 0.2 < np.abs(samples).max() <= 1.0


def test_the_committed_speech_clips_decode() -> None:
    for clip in FOX_CLIPS:
        samples = np.concatenate(list(decode_audio(clip.read_bytes())))
        assert samples.size == pytest.approx(2.78 * SAMPLE_RATE, rel=0.01)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "not audio FFmpeg can read"),
        (b"plain text, not sound " * 40, "not audio FFmpeg can read"),
    ],
)
def test_garbage_is_refused_with_the_reason(data: bytes, reason: str) -> None:
    with pytest.raises(AudioError, match=reason):
        list(decode_audio(data))


def test_a_file_without_an_audio_track() -> None:
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="matroska") as out:
        stream = out.add_stream("mpeg4", rate=1)
        stream.width, stream.height = 16, 16
        frame = av.VideoFrame.from_ndarray(np.zeros((16, 16, 3), np.uint8), format="rgb24")
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            out.mux(packet)
    with pytest.raises(AudioError, match="no audio track"):
        list(decode_audio(buffer.getvalue()))


def test_blocks_come_as_the_file_decodes() -> None:
    blocks = decode_audio(encode("wav", "pcm_s16le"))
    first = next(blocks)
    assert 0 < first.size < SAMPLE_RATE  # a block, not the whole file
    blocks.close()  # closing early releases FFmpeg's container
