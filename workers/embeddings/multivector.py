"""Multi-vector models in the embeddings worker (ColQwen2.5, ColPali's late
interaction): one L2-normalized vector per token, for texts and for page images.

* Loading: the model through mlx-embeddings' own ``load_model``; the processor is
  mlx-vlm's torch-free ``Qwen2_5_VLProcessor`` (what ``mlx_embeddings.load`` asks
  transformers for wants torchvision for its video part).
* Text: rows padded on the right with the attention mask, as the model takes them;
  each input keeps the vectors of its own tokens.
* Images: each image is put in the model's document prompt (the image tokens and
  "Describe the image.") by the processor when its request arrives; a pass runs one
  image (images differ in their number of tokens), and the input's vectors are
  those of every token of the prompt.

A client scores a query against a document by late interaction (MaxSim: for each
query vector its best dot product with a document vector, summed); ``/v1/rerank``
does it for a multi-vector model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from PIL import Image

DOCUMENT_PROMPT = (
    "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>"
    "Describe the image.<|im_end|><|endoftext|>"
)
"""ColQwen2.5's prompt around a page image (as colpali-engine writes it)."""
MULTI_VECTOR_TYPES = ("colqwen2_5",)
"""``model_type`` values served as multi-vector models."""


def load_multivector(path: Path) -> tuple[Any, Any]:
    """The model and its processor (see the module docstring)."""
    from mlx_embeddings.utils import load_model
    from mlx_vlm.models.qwen2_5_vl.processing_qwen2_5_vl import Qwen2_5_VLProcessor

    model = load_model(path, path_to_repo=str(path))
    try:
        processor = Qwen2_5_VLProcessor.from_pretrained(str(path))
    except Exception as exc:  # the library wraps any of them too
        raise ValueError(f"Failed to initialize tokenizer or processor: {exc}") from exc
    return model, processor


@dataclass
class Prepared:
    """One image in its document prompt, as the processor made it."""

    arrays: dict[str, np.ndarray]
    tokens: int


@dataclass
class MultiVector:
    """A model that gives one vector per token (see the module docstring)."""

    model: Any
    processor: Any
    dims: int

    @classmethod
    def of(cls, model: Any, loaded: Any) -> MultiVector | None:
        projection = getattr(model, "embedding_proj_layer", None)
        if projection is None or not hasattr(loaded, "image_processor"):
            return None
        return cls(model, loaded, int(projection.weight.shape[0]))

    def text_rows(self, rows: list[list[int]], pad_id: int) -> list[np.ndarray]:
        """Each row's token vectors (float32, its own length)."""
        width = max(len(r) for r in rows)
        ids = np.full((len(rows), width), pad_id, dtype=np.int32)
        mask = np.zeros((len(rows), width), dtype=np.int32)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
        out = self.model(mx.array(ids), attention_mask=mx.array(mask)).text_embeds
        vectors = np.array(out.astype(mx.float32))
        return [vectors[i, : len(row)] for i, row in enumerate(rows)]

    def prepare(self, image: Image.Image) -> Prepared:
        out = self.processor(text=[DOCUMENT_PROMPT], images=[image], return_tensors="np")
        arrays = {k: np.asarray(v) for k, v in out.items()}
        return Prepared(arrays, int(arrays["input_ids"].shape[1]))

    def image_rows(self, prepared: Prepared) -> np.ndarray:
        """The token vectors of one image's document prompt (float32)."""
        a = prepared.arrays
        out = self.model(
            mx.array(a["input_ids"]),
            pixel_values=mx.array(a["pixel_values"]),
            attention_mask=mx.array(a["attention_mask"]),
            image_grid_thw=mx.array(a["image_grid_thw"]),
        ).image_embeds
        return np.array(out.astype(mx.float32))[0]
