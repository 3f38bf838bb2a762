"""The Realtime API's audio formats: pcm16 at 24 kHz, G.711 μ-law and A-law at 8 kHz.

The gateway does no audio processing of its own beyond what these formats need:

* the input buffer goes to the whisper worker as a WAV file of the session's format
  (PCM, or WAV's μ-law and A-law codes 7 and 6, which FFmpeg decodes there);
* the voice-activity detector wants 16 kHz 16-bit samples (:class:`To16k`): G.711
  bytes are expanded with the standard's tables and the rate is changed by linear
  interpolation, enough for a detector;
* output audio is encoded by the tts worker itself (FFmpeg's ``pcm_mulaw`` and
  ``pcm_alaw`` for G.711), so the gateway only base64-encodes what it gets.
"""

from __future__ import annotations

import struct
import sys
from array import array
from dataclasses import dataclass

import msgspec
from msgspec import UNSET

from mlx_gateway.supervisor.api.realtime.events import AudioFormatField, FormatFields
from mlx_gateway.supervisor.errors import BadRequest


class GaFormat(msgspec.Struct):
    """A format as the GA interface writes it, ``{"type": "audio/pcm", "rate": 24000}``."""

    type: str
    rate: int


@dataclass(frozen=True)
class AudioFormat:
    name: str
    """The beta name (``pcm16``, ``g711_ulaw``, ``g711_alaw``)."""
    media_type: str
    """The GA ``type`` (``audio/pcm``, ``audio/pcmu``, ``audio/pcma``)."""
    rate: int
    width: int
    """Bytes per sample."""
    wav_code: int
    """The WAV ``fmt`` chunk's format code."""
    worker_format: str
    """The tts worker's ``response_format`` that produces it."""

    @property
    def bytes_per_ms(self) -> float:
        return self.rate * self.width / 1000

    def ms(self, size: int) -> int:
        """Milliseconds of ``size`` bytes of this format."""
        return int(size / self.bytes_per_ms)

    def ga(self) -> GaFormat:
        return GaFormat(self.media_type, self.rate)


PCM16 = AudioFormat("pcm16", "audio/pcm", 24_000, 2, 1, "pcm")
ULAW = AudioFormat("g711_ulaw", "audio/pcmu", 8_000, 1, 7, "g711_ulaw")
ALAW = AudioFormat("g711_alaw", "audio/pcma", 8_000, 1, 6, "g711_alaw")
FORMATS = {f.name: f for f in (PCM16, ULAW, ALAW)}
BY_MEDIA_TYPE = {f.media_type: f for f in (PCM16, ULAW, ALAW)}


def parse_format(value: AudioFormatField, param: str) -> AudioFormat:
    """A format as either dialect writes it: ``"pcm16"`` or ``{"type": "audio/pcm"}``."""
    if isinstance(value, str) and value in FORMATS:
        return FORMATS[value]
    if isinstance(value, FormatFields):
        fmt = BY_MEDIA_TYPE.get(value.type)
        if fmt is not None and value.rate in (UNSET, fmt.rate):
            return fmt
    raise BadRequest(
        f"Invalid value for '{param}': {msgspec.to_builtins(value)!r}. Supported: pcm16 "
        "(audio/pcm at 24000 Hz), "
        "g711_ulaw (audio/pcmu), g711_alaw (audio/pcma).",
        param=param,
        code="invalid_value",
    )


def wav_file(fmt: AudioFormat, data: bytes) -> bytes:
    """``data`` with a WAV header saying what it is, for the whisper worker's decoder."""
    fmt_chunk = struct.pack(
        "<HHIIHHH",
        fmt.wav_code,
        1,
        fmt.rate,
        fmt.rate * fmt.width,
        fmt.width,
        fmt.width * 8,
        0,  # cbSize: no extension
    )
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt_chunk)) + fmt_chunk
    body += b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


# ---------------------------------------------------------------- G.711 expansion


def _ulaw(byte: int) -> int:
    """ITU-T G.711 μ-law: the complement carries sign, 3 exponent and 4 mantissa bits
    of a value biased by 0x84."""
    u = ~byte & 0xFF
    magnitude = (((u & 0x0F) << 3) + 0x84) << ((u >> 4) & 0x07)
    return (0x84 - magnitude) if u & 0x80 else (magnitude - 0x84)


def _alaw(byte: int) -> int:
    """ITU-T G.711 A-law: even bits inverted (0x55); a set sign bit is positive."""
    a = byte ^ 0x55
    exponent, mantissa = (a >> 4) & 0x07, a & 0x0F
    step = (mantissa << 4) + 8
    magnitude = step if exponent == 0 else (step + 0x100) << (exponent - 1)
    return magnitude if a & 0x80 else -magnitude


ULAW_TABLE = [_ulaw(b) for b in range(256)]
ALAW_TABLE = [_alaw(b) for b in range(256)]


def linear(fmt: AudioFormat, data: bytes) -> array[int]:
    """The 16-bit samples of ``data`` (G.711 expanded)."""
    if fmt is ULAW:
        return array("h", [ULAW_TABLE[b] for b in data])
    if fmt is ALAW:
        return array("h", [ALAW_TABLE[b] for b in data])
    samples = array("h")
    samples.frombytes(data[: len(data) // 2 * 2])
    if sys.byteorder != "little":
        samples.byteswap()
    return samples


class To16k:
    """Samples of one format at 16 kHz, chunk after chunk (the fractional position
    and the last sample carry over, so the chunks join without a seam)."""

    RATE = 16_000

    def __init__(self, fmt: AudioFormat) -> None:
        self.fmt = fmt
        self._step = fmt.rate / self.RATE
        self._pos = 0.0
        """Where the next output sample lies, in input samples from ``self._prev``."""
        self._prev: int | None = None

    def feed(self, data: bytes) -> array[int]:
        samples = linear(self.fmt, data)
        if self._prev is not None:
            samples.insert(0, self._prev)
        out = array("h")
        pos, last = self._pos, len(samples) - 1
        while pos < last:
            i = int(pos)
            frac = pos - i
            out.append(int(samples[i] + (samples[i + 1] - samples[i]) * frac))
            pos += self._step
        if samples:
            self._prev = samples[-1]
            self._pos = pos - last
        return out
