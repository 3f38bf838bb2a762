"""Image embeddings through the whole gateway (real embeddings workers, the tiny
SigLIP from a hub-snapshot-like folder and a text-only BERT): the official openai
SDK sends image items in ``input`` and Cohere's ``images`` through ``extra_body``
unmodified, the vectors equal mlx-embeddings in process, Ollama's ``/api/embed``
takes ``images``, and the refusals name what is wrong."""

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
from mlx_embeddings import generate
from mlx_embeddings import load as library_load
from PIL import Image
from starlette.applications import Starlette

from mlx_gateway.supervisor.app import create_app
from mlx_gateway.supervisor.config import GatewayConfig, ServerConfig
from mlx_gateway.supervisor.config.kinds import model_entry

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

TEXTS = ["a photo of a cat", "hello world"]


def png(color: tuple[int, int, int], size: tuple[int, int] = (80, 50)) -> bytes:
    image = Image.new("RGB", size, color)
    image.paste((color[0] // 3, color[1] // 3, color[2] // 3), (5, 5, 30, 30))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


PICTURES = [png((200, 30, 40)), png((20, 160, 60), (40, 90))]
B64 = [base64.b64encode(p).decode() for p in PICTURES]
URLS = [f"data:image/png;base64,{b}" for b in B64]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def app(tiny_siglip_path: Path, tiny_bert_path: Path) -> AsyncIterator[Starlette]:
    config = GatewayConfig(
        server=ServerConfig(shutdown_grace=2),
        models=[
            model_entry(
                model_path=str(tiny_siglip_path),
                served_model_name="siglip",
                model_type="embeddings",
                idle_timeout=0,
            ),
            model_entry(
                model_path=str(tiny_bert_path),
                served_model_name="minibert",
                model_type="embeddings",
                idle_timeout=0,
            ),
        ],
    )
    app = create_app(config)
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture(scope="module")
def expected(tiny_siglip_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """mlx-embeddings in process on the same inputs (through a link named as it wants)."""
    link = tmp_path_factory.mktemp("named") / "siglip-patch16-64"
    link.symlink_to(tiny_siglip_path, target_is_directory=True)
    model, processor = library_load(str(link))
    images = [Image.open(io.BytesIO(p)).convert("RGB") for p in PICTURES]
    out = generate(model, processor, texts=TEXTS, images=images)
    return np.array(out.text_embeds), np.array(out.image_embeds)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


async def test_sdk_input_items_equal_the_library(sdk: openai.AsyncOpenAI, expected: Any) -> None:
    texts, images = expected
    items: Any = [
        {"type": "image_url", "image_url": {"url": URLS[0]}},
        TEXTS[0],
        {"type": "text", "text": TEXTS[1]},
        {"image": B64[1]},  # Jina's shape: bare base64
    ]
    reply = await sdk.embeddings.create(model="siglip", input=items, encoding_format="float")
    rows = np.array([d.embedding for d in reply.data])
    assert rows.shape == (4, 32) and [d.index for d in reply.data] == [0, 1, 2, 3]
    assert cosines(rows[[1, 2]], texts).min() >= 0.999
    assert cosines(rows[[0, 3]], images).min() >= 0.999
    assert reply.usage.prompt_tokens > 2 * 16  # two images of 16 patches, and the texts


async def test_sdk_extra_body_images(sdk: openai.AsyncOpenAI, expected: Any) -> None:
    _, images = expected
    reply = await sdk.embeddings.create(
        model="siglip", input=TEXTS[0], extra_body={"images": URLS}, encoding_format="float"
    )
    rows = np.array([d.embedding for d in reply.data])
    assert rows.shape == (3, 32)
    assert cosines(rows[1:], images).min() >= 0.999


async def test_ollama_embed_takes_images(http: httpx.AsyncClient, expected: Any) -> None:
    texts, images = expected
    body = {"model": "siglip", "input": TEXTS, "images": B64}
    response = await http.post("/api/embed", json=body)
    assert response.status_code == 200, response.text
    rows = np.array(response.json()["embeddings"])
    assert cosines(rows[:2], texts).min() >= 0.999
    assert cosines(rows[2:], images).min() >= 0.999


async def test_a_text_only_model_refuses_images(sdk: openai.AsyncOpenAI) -> None:
    items: Any = ["hello", {"type": "image_url", "image_url": {"url": URLS[0]}}]
    for _ in range(2):  # refused by the worker as it loads, then by the gateway
        with pytest.raises(openai.BadRequestError) as caught:
            await sdk.embeddings.create(model="minibert", input=items, encoding_format="float")
        error = caught.value.body
        assert isinstance(error, dict)
        assert "'minibert'" in error["message"] and "embeds text only" in error["message"]
        assert error["param"].startswith("input[1]")
    ok = await sdk.embeddings.create(model="minibert", input=["hello"], encoding_format="float")
    assert len(ok.data) == 1


async def test_bad_images_are_400s_and_the_worker_stays_up(http: httpx.AsyncClient) -> None:
    not_png = "data:image/png;base64," + base64.b64encode(b"no picture here").decode()
    cases = [
        ([{"type": "image_url", "image_url": {"url": not_png}}], "input[0]", "cannot be decoded"),
        (["a", {"type": "image_url", "image_url": {"url": "ftp://x/y.png"}}], "input[1]", "ftp"),
        ([{"type": "image_url", "image_url": {"url": "http://127.0.0.1:9/a.png"}}], "", "private"),
        ([{"type": "video_url", "video_url": {"url": "x"}}], "input[0]", "not an input"),
    ]
    for items, param, words in cases:
        response = await http.post("/v1/embeddings", json={"model": "siglip", "input": items})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert words in error["message"], error
        assert error["param"].startswith(param)
    good = [{"type": "image_url", "image_url": {"url": URLS[0]}}]
    response = await http.post("/v1/embeddings", json={"model": "siglip", "input": good})
    assert response.status_code == 200
