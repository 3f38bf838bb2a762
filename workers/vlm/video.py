"""The video of a ``video`` part, decoded into the frames a vision model sees.

The gateway sends each video part's file as a binary frame and rewrites the part to
``{"type": "video", "payload": k}``. Here the file is opened with PyAV (FFmpeg in
the wheel: mp4, webm, mkv, mov, avi, animated formats…) and frames are sampled
evenly in time: ``fps`` frames per second of video, at most ``max_frames`` in all
(spread over the whole clip when it is longer), at least one; a long clip is
sampled by seeking, not decoded whole. A clip longer than ``max_seconds`` is
refused before its frames are decoded; bytes that are no video
are a 400 that says why FFmpeg could not read them.

No MLX here: PyAV and NumPy only, testable on its own.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mlx_gateway.workers.runtime.contract import RequestError

DEFAULT_FPS = 1.0
DEFAULT_MAX_FRAMES = 16
DEFAULT_MAX_SECONDS = 600.0
SEEK_RATIO = 8
"""A clip with more than this many frames per wanted frame is sampled by seeking."""
MAX_FRAME_PIXELS = 16_000_000
"""Larger frames (beyond 4K) are refused: every sampled frame is held as RGB."""


@dataclass(frozen=True)
class VideoLimits:
    """A model's video settings (from ``WorkerSpec.options``)."""

    fps: float = DEFAULT_FPS
    max_frames: int = DEFAULT_MAX_FRAMES
    max_seconds: float = DEFAULT_MAX_SECONDS


def video_limits(options: dict[str, Any]) -> VideoLimits:
    """The video settings of a vlm worker's options (``video_fps``, ``max_frames``,
    ``max_video_seconds``), defaults for those left out."""
    return VideoLimits(
        fps=float(options.get("video_fps") or DEFAULT_FPS),
        max_frames=int(options.get("max_frames") or DEFAULT_MAX_FRAMES),
        max_seconds=float(options.get("max_video_seconds") or DEFAULT_MAX_SECONDS),
    )


@dataclass
class Video:
    """The sampled frames of one video, in time order."""

    frames: list[np.ndarray]
    """``height x width x 3`` uint8 RGB arrays."""
    fps: float
    """Frames per second of video the sample stands for."""
    duration: float
    """Seconds of video."""

    def channels_first(self) -> np.ndarray:
        """The frames as one ``(T, 3, H, W)`` array (what mlx-vlm's processors take)."""
        return np.transpose(np.stack(self.frames), (0, 3, 1, 2))


def _invalid(where: str, why: str) -> RequestError:
    return RequestError(
        f"The video in {where} could not be decoded: {why}. Send an mp4, webm, mov or "
        "another file FFmpeg reads.",
        param=where,
        code="invalid_video",
    )


def _too_long(where: str, seconds: float, limit: float) -> RequestError:
    return RequestError(
        f"The video in {where} lasts {seconds:.1f} s, longer than this model's "
        f"max_video_seconds ({limit:g} s); send a shorter clip or raise max_video_seconds.",
        param=where,
        code="video_too_long",
    )


def decode_video(data: bytes, *, where: str, limits: VideoLimits) -> Video:
    """One video file → its sampled frames (see the module docstring). Raises
    :class:`RequestError` (400): ``invalid_video`` for bytes FFmpeg cannot read as a
    video, ``video_too_long`` beyond ``limits.max_seconds``."""
    import av

    if not data:
        raise _invalid(where, "the file is empty")
    try:
        container = av.open(io.BytesIO(data), mode="r")
    except (av.FFmpegError, ValueError, OSError) as exc:
        raise _invalid(where, _reason(exc)) from None
    try:
        return _sample(container, where, limits)
    except (av.FFmpegError, ValueError, OSError) as exc:
        raise _invalid(where, _reason(exc)) from None
    finally:
        container.close()


def _reason(exc: Exception) -> str:
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return str(text).rstrip(".")


def _sample(container: Any, where: str, limits: VideoLimits) -> Video:
    if not container.streams.video:
        raise _invalid(where, "the file has no video stream")
    demuxer = str(container.format.name)
    if demuxer == "image2" or demuxer.endswith("_pipe"):  # FFmpeg's still-image readers
        still = f"the file is a still image ({demuxer}); send it as an image_url part"
        raise _invalid(where, still)
    stream = container.streams.video[0]
    duration = _duration(container, stream)
    if duration is not None and duration > limits.max_seconds:
        raise _too_long(where, duration, limits.max_seconds)
    if stream.width and stream.height and stream.width * stream.height > MAX_FRAME_PIXELS:
        raise RequestError(
            f"The video in {where} has {stream.width}x{stream.height} frames, more than "
            f"the {MAX_FRAME_PIXELS:,} pixels a frame this server decodes.",
            param=where,
            code="video_too_large",
        )
    step = 1.0 / limits.fps
    if duration is not None:
        wanted = max(1, min(limits.max_frames, math.ceil(duration * limits.fps - 1e-6)))
        step = duration / wanted  # the cap spread over the whole clip
        rate = float(stream.average_rate or 0)
        if rate * duration > SEEK_RATIO * wanted:  # far more frames than wanted
            frames = _seeking(container, stream, [k * step for k in range(wanted)])
            if frames:
                return Video(frames=frames, fps=len(frames) / duration, duration=duration)
            container.seek(0)  # nothing came of seeking: read it all after all
    kept: list[np.ndarray] = []
    target = 0.0
    last = 0.0
    for frame in container.decode(stream):
        time = float(frame.time) if frame.time is not None else last
        last = max(last, time)
        if last > limits.max_seconds:
            raise _too_long(where, last, limits.max_seconds)
        if time + 1e-6 >= target:
            kept.append(frame.to_ndarray(format="rgb24"))
            while target <= time + 1e-6:
                target += step
            if len(kept) > 2 * limits.max_frames:  # no duration known: thin out as we go
                kept = kept[::2]
                step *= 2
    if not kept:
        raise _invalid(where, "the video stream has no frames")
    frames = _evenly(kept, limits.max_frames)
    seconds = duration if duration is not None else last
    rate = len(frames) / seconds if seconds > 0 else limits.fps
    return Video(frames=frames, fps=rate, duration=seconds)


def _seeking(container: Any, stream: Any, times: list[float]) -> list[np.ndarray]:
    """The first frame at or after each of ``times`` (seconds from the stream's start),
    each reached by seeking to the key frame before it and decoding on from there:
    a long clip is not decoded whole for a few frames."""
    base = stream.time_base
    start = float(stream.start_time * base) if stream.start_time is not None else 0.0
    frames: list[np.ndarray] = []
    for offset in times:
        target = start + offset
        container.seek(int(target / base), stream=stream, backward=True)
        for frame in container.decode(stream):
            if frame.time is None or frame.time + 1e-6 >= target:
                frames.append(frame.to_ndarray(format="rgb24"))
                break
    return frames


def _duration(container: Any, stream: Any) -> float | None:
    """Seconds of video the container says it holds, when it says."""
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if container.duration is not None:
        return float(container.duration) / 1_000_000  # av.time_base: microseconds
    return None


def _evenly(frames: list[np.ndarray], most: int) -> list[np.ndarray]:
    """At most ``most`` of ``frames``, evenly spaced, the first and last kept."""
    if len(frames) <= most:
        return frames
    if most == 1:
        return frames[:1]
    picks = [math.floor(i * (len(frames) - 1) / (most - 1) + 0.5) for i in range(most)]
    return [frames[i] for i in picks]
