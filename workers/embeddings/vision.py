"""Dual encoders in the embeddings worker: a text tower and a vision tower that map
texts and images into one space (SigLIP, and the CLIP-like models mlx-embeddings
carries with ``get_text_features`` and ``get_image_features``).

* Loading: mlx-embeddings 0.1 reads a SigLIP's image and patch size from the
  folder's *name* (``…-patch16-224``) and crashes on any other path, a hub
  snapshot's ``…/snapshots/<sha>`` included. When the path has no such part the
  model is loaded through the library's own ``load_model`` under a name made of
  the sizes ``config.json`` gives, and the processor through transformers, as the
  library's ``load`` does; the library's files are not touched.
* Text: as the library embeds text next to images, each row is padded to the
  text tower's full length (``max_length`` padding, with the attention mask) and
  the tower pools its last position; an unpadded row would be another vector.
* Images: each file is decoded once, when its request arrives, and turned into
  the model processor's pixel array; a batch stacks them for one pass of the
  vision tower.

Both kinds of vector are L2-normalized, as the library's ``text_embeds`` and
``image_embeds`` are, so a text and an image compare by their dot product.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from mlx_embeddings import load as load_model_and_tokenizer
from mlx_embeddings.utils import load_model
from PIL import Image

SIZES_IN_NAME = re.compile(r"patch\d+-(\d+)(?:-|$)")
"""What mlx-embeddings 0.1 looks for in a SigLIP's path (its ``load_model``)."""
DEFAULT_IMAGE_SIZE = 224
DEFAULT_PATCH_SIZE = 16
"""transformers' SigLIP defaults, for a ``vision_config`` that leaves them out."""


def load_embedder(path: Path, config: dict[str, Any]) -> tuple[Any, Any]:
    """The model and its tokenizer or processor, as ``mlx_embeddings.load`` gives
    them, for any folder name (see the module docstring)."""
    model_type = str(config.get("model_type", ""))
    name = str(path)
    if "siglip" not in model_type or SIZES_IN_NAME.search(name) or "medsiglip" in name:
        return load_model_and_tokenizer(name)
    from transformers import AutoProcessor

    vision = config.get("vision_config") or {}
    patch = int(vision.get("patch_size") or DEFAULT_PATCH_SIZE)
    size = int(vision.get("image_size") or DEFAULT_IMAGE_SIZE)
    model = load_model(path, path_to_repo=f"{path.name}-patch{patch}-{size}")
    try:
        processor = AutoProcessor.from_pretrained(path)
    except Exception as exc:  # the library wraps any of them too
        raise ValueError(f"Failed to initialize tokenizer or processor: {exc}") from exc
    return model, processor


@dataclass
class DualEncoder:
    """A model that embeds texts and images (see the module docstring)."""

    model: Any
    image_processor: Any
    text_width: int
    """Every text row is padded to this many tokens."""
    image_tokens: int
    """Patches the vision tower reads per image: an image's width in a batch and
    the prompt tokens it counts for."""

    @classmethod
    def of(cls, model: Any, loaded: Any, text_width: int) -> DualEncoder | None:
        """The dual encoder in what mlx-embeddings loaded; ``None`` for a text-only model."""
        image_processor = getattr(loaded, "image_processor", None)
        vision = getattr(getattr(model, "config", None), "vision_config", None)
        has_towers = hasattr(model, "get_text_features") and hasattr(model, "get_image_features")
        if image_processor is None or vision is None or not has_towers:
            return None
        side = max(1, int(vision.image_size) // int(vision.patch_size))
        return cls(model, image_processor, text_width, side * side)

    def text_vectors(self, rows: list[list[int]], pad_id: int) -> mx.array:
        """Normalized float32 vectors of token rows, each padded to :attr:`text_width`."""
        width = max(self.text_width, *(len(r) for r in rows))
        ids = np.full((len(rows), width), pad_id, dtype=np.int32)
        mask = np.zeros((len(rows), width), dtype=np.int32)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
        features = self.model.get_text_features(mx.array(ids), attention_mask=mx.array(mask))
        return _normalized(features)

    def pixels(self, image: Image.Image) -> np.ndarray:
        """One decoded image as the processor's pixel array (channels first)."""
        out = self.image_processor(images=[image], return_tensors="np")
        return np.asarray(out["pixel_values"][0])

    def image_vectors(self, pixels: list[np.ndarray]) -> mx.array:
        """Normalized float32 vectors of processed images, in one vision pass."""
        features = self.model.get_image_features(mx.array(np.stack(pixels)))
        return _normalized(features)


def _normalized(vectors: mx.array) -> mx.array:
    vectors = vectors.astype(mx.float32)
    return vectors / mx.maximum(mx.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)
