"""Multi-vector embeddings and rerank by late interaction through the whole gateway
(real embeddings workers: the tiny ColQwen2.5 and the tiny SigLIP): the official
openai SDK gets each input's token vectors in ``multi_vector``, and ``/v1/rerank``
scores image documents by MaxSim over those vectors (by cosine for SigLIP)."""

from __future__ import annotations

import base64
import io
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import pytest_asyncio
from PIL import Image
from starlette.applications import Starlette

from mlx_gateway.supervisor.app import create_app
from mlx_gateway.supervisor.config import GatewayConfig, ServerConfig
from mlx_gateway.supervisor.config.kinds import model_entry

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

QUERY = "a red square"


def data_url(color: tuple[int, int, int], size: tuple[int, int]) -> str:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


PAGES = [data_url((200, 30, 40), (112, 84)), data_url((20, 160, 60), (56, 140))]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def app(
    tiny_colqwen_path: Path, tiny_siglip_path: Path, tiny_cross_encoder_path: Path
) -> AsyncIterator[Starlette]:
    entries = [("colqwen", tiny_colqwen_path), ("siglip", tiny_siglip_path)]
    embedders = [
        model_entry(
            model_path=str(path), served_model_name=name, model_type="embeddings", idle_timeout=0
        )
        for name, path in entries
    ]
    cross_encoder = model_entry(
        model_path=str(tiny_cross_encoder_path), served_model_name="ce", model_type="rerank"
    )
    config = GatewayConfig(
        server=ServerConfig(shutdown_grace=2), models=[*embedders, cross_encoder]
    )
    app = create_app(config)
    async with app.router.lifespan_context(app):
        yield app


def max_sim(query: np.ndarray, document: np.ndarray) -> float:
    return float((query @ document.T).max(axis=1).sum())


async def test_multi_vector_field_and_late_interaction_rerank(
    sdk: openai.AsyncOpenAI, http: httpx.AsyncClient
) -> None:
    items: Any = [QUERY, *({"type": "image_url", "image_url": {"url": u}} for u in PAGES)]
    reply = await sdk.embeddings.create(model="colqwen", input=items, encoding_format="float")
    groups = [np.array(d.model_extra["multi_vector"]) for d in reply.data]  # type: ignore[index]
    assert [g.shape[1] for g in groups] == [16, 16, 16] and groups[1].shape[0] > 8
    for group, item in zip(groups, reply.data, strict=True):
        mean = group.mean(axis=0)
        np.testing.assert_allclose(item.embedding, mean / np.linalg.norm(mean), atol=1e-5)
    expected = [max_sim(groups[0], g) for g in groups[1:]]

    documents = [{"type": "image_url", "image_url": {"url": u}} for u in PAGES]
    body = {"model": "colqwen", "query": QUERY, "documents": documents, "return_documents": True}
    response = await http.post("/v1/rerank", json=body)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["index"] for r in results] == sorted((0, 1), key=lambda i: -expected[i])
    for r in results:
        assert r["relevance_score"] == pytest.approx(expected[r["index"]], rel=1e-4)
        assert r["document"] == {"image_url": PAGES[r["index"]]}


async def test_siglip_ranks_images_and_texts_by_cosine(http: httpx.AsyncClient) -> None:
    documents = [{"image": PAGES[0].split(",", 1)[1]}, "hello world", {"text": "a photo of a cat"}]
    body = {"model": "siglip", "query": "a photo of a dog", "documents": documents}
    response = await http.post("/v1/rerank", json=body)
    assert response.status_code == 200, response.text
    scores = [r["relevance_score"] for r in response.json()["results"]]
    assert len(scores) == 3 and scores == sorted(scores, reverse=True)
    assert all(-1.0 <= s <= 1.0 for s in scores)


async def test_an_image_document_for_a_text_reranker_or_bad_item_is_a_400(
    http: httpx.AsyncClient,
) -> None:
    body = {"model": "colqwen", "query": QUERY, "documents": [{"type": "video_url"}]}
    response = await http.post("/v1/rerank", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "documents[0]"
    image = {"type": "image_url", "image_url": {"url": PAGES[0]}}
    body = {"model": "ce", "query": QUERY, "documents": ["a text", image]}
    response = await http.post("/v1/rerank", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "documents[1]", error
    assert "model_type embeddings" in error["message"]
