"""Vision models (``model_type: vlm``, also ``multimodal``; mlx-vlm): how the gateway
takes their images and videos and what their worker is told (how images are sized,
how video frames are sampled, whether prompts are cached).

How the gateway reads image and video URLs is :func:`..engine.media_policy.media_policy`.
No I/O and no MLX here.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from mlx_gateway.supervisor.config.entry import Positive, PositiveMiB, PositiveSeconds
from mlx_gateway.supervisor.config.text import TextModelConfig


class VlmConfig(TextModelConfig, kw_only=True, tag="vlm"):
    """A vision model: chat with images (and audio, for omni models) in its messages."""

    max_image_mb: PositiveMiB = 20.0
    """Largest image file (a ``data:`` URL's bytes or a fetched one), in MiB → else 413."""
    max_images: Positive = 8
    """Most images in one request → else 400."""
    image_fetch_timeout: PositiveSeconds = 10.0
    """Seconds the gateway may spend fetching one http(s) image URL."""
    allow_private_image_urls: bool | None = None
    """Overrides ``server.allow_private_image_urls`` for this model."""
    resize_shape: Annotated[list[Positive], msgspec.Meta(min_length=1, max_length=2)] | None = None
    """Resize every image to exactly ``[width, height]`` (one number: a square)
    before the model's processor sees it."""
    max_pixels: Positive | None = None
    """Scale larger images down to at most this many pixels, keeping their aspect
    ratio."""
    fps: Annotated[float, msgspec.Meta(gt=0, le=30)] = 1.0
    """Video frames sampled per second of video (evenly in time)."""
    max_frames: Annotated[int, msgspec.Meta(ge=1, le=256)] = 16
    """Most frames taken from one video: a longer clip is sampled evenly over its
    whole length. On Qwen2-VL, 16 frames of 448 x 448 are 8 temporal patches of 256
    tokens: about 2,000 prompt tokens."""
    max_videos: Positive = 2
    """Most videos in one request → else 400 ``too_many_videos``."""
    max_video_mb: PositiveMiB = 50.0
    """Largest video file (a ``data:`` URL's bytes, a fetched or local file), in MiB
    → else 400 ``video_too_large``."""
    max_video_seconds: PositiveSeconds = 600.0
    """Longest video, in seconds → else 400 ``video_too_long`` (from the worker)."""
    local_video_dirs: list[str] = []
    """Folders whose video files a request may name by path (``/…`` or ``file://…``);
    none by default (a path is then a 400)."""
    prefix_cache: bool = True
    """Keep recent prompts' key/value blocks and reuse a repeated prefix (mlx-vlm's
    automatic prefix cache, in memory)."""

    def worker_options(self) -> dict[str, Any]:
        """``WorkerSpec.options`` of a vision model's worker (see :mod:`..workers.vlm`)."""
        options: dict[str, Any] = {
            "prefix_cache": self.prefix_cache,
            "stream_interval": self.stream_interval,
            "video_fps": self.fps,
            "max_frames": self.max_frames,
            "max_video_seconds": self.max_video_seconds,
        }
        if self.resize_shape is not None:
            shape = self.resize_shape
            options["resize_shape"] = [shape[0], shape[-1]]  # one number: a square
        if self.max_pixels is not None:
            options["max_pixels"] = self.max_pixels
        options.update(self.kv_options())
        return options


class MultimodalConfig(VlmConfig, tag="multimodal"):
    """mlx-openai-server's name for a vision model."""


ENTRIES = (VlmConfig, MultimodalConfig)
"""The Structs of this kind's ``model_type`` values (the kind table's order)."""
