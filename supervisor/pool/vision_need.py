"""The working memory of an encoder's vision tower (image-embedding models): one
forward pass over a batch of images, estimated from ``config.json``.

The tower's weights are in the model's weight files and counted with them; what
the weights do not show is the pass itself. An embeddings worker packs images into
a pass up to ``max_batch_tokens`` patches (at least one image), and each layer
holds, per image, its attention scores (heads x patches x patches), the MLP's
intermediate and a few hidden states, in float32. No I/O beyond the file read by
the caller; no MLX.
"""

from __future__ import annotations

from typing import Any

DEFAULT_MAX_BATCH_TOKENS = 4096
"""The embeddings worker's default (``max_batch_tokens``)."""
FLOAT32 = 4
LIVE_COPIES = 4
"""Activations alive at once (inputs, outputs, residuals), as for a prefill chunk."""


def image_pass_bytes(meta: dict[str, Any], max_batch_tokens: int | None) -> int:
    """Bytes of one vision pass at full batch; 0 for a model without a vision tower."""
    vision = meta.get("vision_config")
    if not isinstance(vision, dict):
        return 0
    size = _int(vision.get("image_size"), 224)
    patch = _int(vision.get("patch_size"), 16)
    hidden = _int(vision.get("hidden_size"), 768)
    heads = _int(vision.get("num_attention_heads"), 12)
    intermediate = _int(vision.get("intermediate_size"), 4 * hidden)
    patches = max(1, (size // max(1, patch)) ** 2)
    images = max(1, (max_batch_tokens or DEFAULT_MAX_BATCH_TOKENS) // patches)
    per_image = patches * (heads * patches + intermediate + 3 * hidden)
    return images * per_image * FLOAT32 * LIVE_COPIES


def _int(value: Any, default: int) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return default
