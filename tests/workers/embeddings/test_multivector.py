"""Multi-vector embeddings in process: a tiny random ColQwen2.5 (mlx-embeddings' own
classes and loader) gives one vector per token for texts and page images, equal to
the model run in process on the same inputs, every input's rows in order."""

from __future__ import annotations

import io
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from PIL import Image

from mlx_gateway.protocol.messages import Embed, Embeddings
from mlx_gateway.workers.embeddings.multivector import DOCUMENT_PROMPT
from mlx_gateway.workers.runtime.contract import RequestError
from tests.workers.embeddings.test_embeddings_backend import make_backend, run

pytestmark = pytest.mark.slow

TEXTS = ["a red square", "describe this image please"]


def png(color: tuple[int, int, int], size: tuple[int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format="PNG")
    return out.getvalue()


def test_token_vectors_equal_the_model_in_process(tiny_colqwen_path: Path) -> None:
    backend, out = make_backend(tiny_colqwen_path)
    assert backend.multi is not None and backend.info is not None
    assert backend.info.dims == 16
    pictures = [png((200, 30, 40), (112, 84)), png((20, 160, 60), (56, 140))]
    backend.submit(Embed(request_id="m", texts=TEXTS, images=[1, 2]), pictures)
    run(backend)
    header = next(r for r in out.replies if isinstance(r, Embeddings))
    tokenizer = backend.tokenizer
    lengths = [len(tokenizer(t)["input_ids"]) for t in TEXTS]
    assert header.vectors[0] == lengths[0] and header.vectors[3] == lengths[1]
    matrix = out.matrices["m"]
    assert matrix.shape == (sum(header.vectors), 16)
    starts = np.cumsum([0, *header.vectors])
    rows = [matrix[starts[i] : starts[i + 1]] for i in range(4)]

    model, processor = backend.model, backend.multi.processor
    for text, got in zip(TEXTS, (rows[0], rows[3]), strict=True):
        ids = mx.array([tokenizer(text)["input_ids"]])
        want = np.array(model(ids, attention_mask=mx.ones(ids.shape)).text_embeds[0])
        np.testing.assert_allclose(got, want, atol=1e-5)
    for data, got in zip(pictures, rows[1:3], strict=True):
        image = Image.open(io.BytesIO(data)).convert("RGB")
        a = processor(text=[DOCUMENT_PROMPT], images=[image], return_tensors="np")
        want = model(
            mx.array(np.asarray(a["input_ids"])),
            pixel_values=mx.array(np.asarray(a["pixel_values"])),
            attention_mask=mx.array(np.asarray(a["attention_mask"])),
            image_grid_thw=mx.array(np.asarray(a["image_grid_thw"])),
        ).image_embeds[0]
        np.testing.assert_allclose(got, np.array(want), atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-4)
    with pytest.raises(RequestError, match="multi-vector"):
        backend.submit(Embed(request_id="d", texts=TEXTS, dimensions=8), [])
