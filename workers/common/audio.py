"""Decode an uploaded audio file into 16 kHz mono float32 samples, block by block.

PyAV (``av`` on PyPI) carries FFmpeg's demuxers, decoders and resampler inside its
wheels, so no ``ffmpeg`` program has to be installed. Any container and codec
FFmpeg reads works: wav, mp3, m4a/aac, flac, ogg/vorbis/opus, webm, and the audio
track of video files.

The samples come out as a generator of blocks, in the order FFmpeg decodes them:
a caller that consumes them as they come never holds the whole decoded signal.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

import av
import numpy as np

SAMPLE_RATE = 16_000
"""What Whisper listens at."""


class AudioError(Exception):
    """The upload cannot be decoded as audio; the message says why."""


def _reason(exc: Exception) -> str:
    # FFmpeg errors read "[Errno N] Invalid data found when processing input: '<none>'".
    text = getattr(exc, "strerror", None) or str(exc)
    return text.strip() or type(exc).__name__


def decode_audio(data: bytes, *, rate: int = SAMPLE_RATE) -> Iterator[np.ndarray]:
    """Yield the first audio track of ``data`` (a whole file in any container FFmpeg
    knows) as blocks of mono float32 samples at ``rate`` Hz, in [-1, 1].

    Stereo and multichannel audio is down-mixed, other rates are resampled.

    Raises:
        AudioError: ``data`` is not a media file, has no audio track, or is corrupt.
    """
    try:
        container = av.open(io.BytesIO(data), mode="r")
    except av.FFmpegError as exc:
        raise AudioError(f"the file is not audio FFmpeg can read: {_reason(exc)}") from None
    with container:
        if not container.streams.audio:
            raise AudioError("the file has no audio track")
        stream = container.streams.audio[0]
        resampler = av.AudioResampler(format="flt", layout="mono", rate=rate)
        try:
            for frame in container.decode(stream):
                for out in resampler.resample(frame):
                    yield out.to_ndarray().reshape(-1)
            for out in resampler.resample(None):  # what the resampler still holds
                yield out.to_ndarray().reshape(-1)
        except av.FFmpegError as exc:
            raise AudioError(f"the audio could not be decoded: {_reason(exc)}") from None
