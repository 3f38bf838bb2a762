"""The vision part of a vision model's memory need: the vision tower's working memory
for the most pictures one request may bring (``max_images`` images, and
``max_videos`` videos of ``max_frames`` frames).

The tower's weights are in the weight files (counted with the rest). What is
estimated here is its activations when it encodes a request's pictures at once:
every patch holds a few live copies of its widest activation (the MLP, ``embed_dim
x mlp_ratio``), and one picture's attention scores (per head, patches squared, in
float32) are live at a time. A frame is sized as the model's processor sizes video
frames (its ``max_pixels``, at most :data:`FRAME_PIXELS`); ``temporal_patch_size``
frames share one patch (Qwen2-VL's two). Pure arithmetic on the model's files; no MLX.

Image-embedding encoders (SigLIP) are sized by :func:`image_pass_bytes`: an
embeddings worker packs images into one pass up to ``max_batch_tokens`` patches (at
least one image), and each layer holds, per image, its attention scores, the MLP's
intermediate and a few hidden states, in float32.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

FRAME_PIXELS = 448 * 448
"""Pixels of a picture when the processor does not say less (mlx-vlm's Qwen video
processors scale frames to about this many)."""
ACTIVATION_COPIES = 4
"""Live copies of a patch's widest activation (2 bytes each)."""
SCORE_BYTES = 4
"""Attention scores are float32."""
PROCESSOR_FILES = ("video_preprocessor_config.json", "preprocessor_config.json")

DEFAULT_MAX_BATCH_TOKENS = 4096
"""The embeddings worker's default (``max_batch_tokens``)."""
FLOAT32 = 4


def vision_need(directory: Path, settings: Any) -> int:
    """Bytes the vision tower of the model in ``directory`` works with for one
    request at the entry's ``max_images`` and ``max_frames`` (0 when its
    ``config.json`` has no ``vision_config``)."""
    vision = _json(directory / "config.json").get("vision_config")
    if not isinstance(vision, dict):
        return 0
    width = _int(vision.get("embed_dim")) or _int(vision.get("hidden_size"))
    heads = _int(vision.get("num_heads")) or _int(vision.get("num_attention_heads")) or 1
    patch = _int(vision.get("patch_size")) or 14
    temporal = _int(vision.get("temporal_patch_size")) or 1
    ratio = vision.get("mlp_ratio")
    widest = max(
        width * (ratio if isinstance(ratio, (int, float)) else 4),
        _int(vision.get("intermediate_size")),
    )
    patches = max(1, frame_pixels(directory, settings) // (patch * patch))
    videos = _int(getattr(settings, "max_videos", 0))
    pictures = _int(getattr(settings, "max_images", 0)) + videos * math.ceil(
        _int(getattr(settings, "max_frames", 0)) / temporal
    )
    activations = pictures * patches * int(widest) * 2 * ACTIVATION_COPIES
    scores = heads * patches * patches * SCORE_BYTES
    return int(activations + scores)


def image_pass_bytes(meta: dict[str, Any], max_batch_tokens: int | None) -> int:
    """Bytes of one vision pass at full batch; 0 for a model without a vision tower."""
    vision = meta.get("vision_config")
    if not isinstance(vision, dict):
        return 0
    size = _int_or(vision.get("image_size"), 224)
    patch = _int_or(vision.get("patch_size"), 16)
    hidden = _int_or(vision.get("hidden_size"), 768)
    heads = _int_or(vision.get("num_attention_heads"), 12)
    intermediate = _int_or(vision.get("intermediate_size"), 4 * hidden)
    patches = max(1, (size // max(1, patch)) ** 2)
    images = max(1, (max_batch_tokens or DEFAULT_MAX_BATCH_TOKENS) // patches)
    per_image = patches * (heads * patches + intermediate + 3 * hidden)
    return images * per_image * FLOAT32 * ACTIVATION_COPIES


def frame_pixels(directory: Path, settings: Any) -> int:
    """Pixels of one picture as the model sees it: the processor's ``max_pixels`` and
    the entry's own ``max_pixels``, at most :data:`FRAME_PIXELS`."""
    bounds = [FRAME_PIXELS, _int(getattr(settings, "max_pixels", None)) or FRAME_PIXELS]
    for name in PROCESSOR_FILES:
        meta = _json(directory / name)
        size = meta.get("size")
        declared = _int(meta.get("max_pixels")) or (
            _int(size.get("longest_edge")) if isinstance(size, dict) else 0
        )
        if declared:
            bounds.append(declared)
            break
    return min(bounds)


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _int_or(value: Any, default: int) -> int:
    return (
        value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default
    )
