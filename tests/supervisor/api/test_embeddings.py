"""``/v1/embeddings`` end to end: the real app, registry and relay, a real
embeddings worker process on a tiny random BERT, the official OpenAI SDK; the
vectors are checked against mlx-embeddings run in this process."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import pytest_asyncio
from starlette.applications import Starlette

from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.supervisor.api.embeddings import routes as embeddings_api
from mlx_gateway.supervisor.app import create_app
from mlx_gateway.supervisor.config import GatewayConfig, ServerConfig
from mlx_gateway.supervisor.config.kinds import model_entry
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.pool.spawn import worker_command

from ..fakes import fake_command

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

BERT = "tiny-bert"
CUT = "tiny-bert-cut"  # truncate: true
LM = "lab/fake/ok"  # a fake language model
SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.", "hello world"]
LONG = "zzzz " * 30  # 122 tokens; the model takes 64


def command(spec: WorkerSpec, endpoint: str) -> list[str]:
    """The real worker for embeddings models, the fake one for the language model."""
    if spec.kind == "embeddings":
        return worker_command(spec, endpoint)
    return fake_command(spec, endpoint)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def app(tiny_bert_path: Path) -> AsyncIterator[Starlette]:
    config = GatewayConfig(
        server=ServerConfig(shutdown_grace=1.0),
        models=[
            model_entry(
                model_path=str(tiny_bert_path),
                served_model_name=BERT,
                model_type="embeddings",
                max_batch_tokens=64,
            ),
            model_entry(
                model_path=str(tiny_bert_path),
                served_model_name=CUT,
                model_type="embeddings",
                truncate=True,
            ),
            model_entry(model_path=LM, served_model_name=LM),
        ],
    )
    app = create_app(config, command=command)
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
def sdk(http: httpx.AsyncClient) -> openai.AsyncOpenAI:
    """Validates every response against the SDK's schema; ask it for floats, as its
    schema (``embedding: List[float]``) is checked before a base64 string is decoded."""
    return openai.AsyncOpenAI(
        base_url="http://gw/v1",
        api_key="unused",
        http_client=http,
        max_retries=0,
        _strict_response_validation=True,
    )


@pytest.fixture
def sdk_b64(http: httpx.AsyncClient) -> openai.AsyncOpenAI:
    """As applications use the SDK: it asks for base64 by default and decodes the
    float32 bytes itself. Strict validation cannot pass base64 replies from any
    server (OpenAI's included), see :func:`sdk`."""
    return openai.AsyncOpenAI(
        base_url="http://gw/v1", api_key="unused", http_client=http, max_retries=0
    )


@pytest.fixture(scope="module")
def local(tiny_bert_path: Path) -> Any:
    """The same model loaded in this process by mlx-embeddings."""
    from mlx_embeddings import load

    return load(str(tiny_bert_path))


def reference(local: Any, texts: list[str], **kwargs: Any) -> np.ndarray:
    """mlx-embeddings' vectors, one input at a time (nothing padded)."""
    from mlx_embeddings import generate

    model, tokenizer = local
    rows = [np.array(generate(model, tokenizer, texts=[t], **kwargs).text_embeds) for t in texts]
    return np.concatenate(rows)


def tokens(local: Any, text: str) -> list[int]:
    return list(local[1](text)["input_ids"])


async def test_sdk_default_base64_matches_in_process(
    sdk_b64: openai.AsyncOpenAI, sdk: openai.AsyncOpenAI, app: Starlette, local: Any
) -> None:
    reply = await sdk_b64.embeddings.create(model=BERT, input=SENTENCES)
    assert reply.object == "list" and reply.model == BERT
    assert [d.index for d in reply.data] == [0, 1, 2]
    assert all(d.object == "embedding" for d in reply.data)
    vectors = np.array([d.embedding for d in reply.data])
    assert vectors.shape == (3, 32)
    np.testing.assert_allclose(vectors, reference(local, SENTENCES), atol=1e-5)
    expected_tokens = sum(len(tokens(local, s)) for s in SENTENCES)
    assert reply.usage.prompt_tokens == reply.usage.total_tokens == expected_tokens
    assert gateway_of(app).registry.resolve(BERT).status().inflight == 0

    strict = await sdk.embeddings.create(model=BERT, input=SENTENCES, encoding_format="float")
    assert [d.embedding for d in strict.data] == [d.embedding for d in reply.data]
    assert strict.usage == reply.usage


async def test_float_format_is_openai_shaped(http: httpx.AsyncClient, local: Any) -> None:
    body = {"model": BERT, "input": "hello world", "encoding_format": "float"}
    r = await http.post("/v1/embeddings", json=body)
    assert r.status_code == 200, r.text
    reply = r.json()
    assert list(reply) == ["object", "data", "model", "usage"]
    assert list(reply["data"][0]) == ["object", "index", "embedding"]
    assert reply["usage"] == {"prompt_tokens": 4, "total_tokens": 4}
    vector = reply["data"][0]["embedding"]
    assert all(isinstance(x, float) for x in vector)
    np.testing.assert_allclose(vector, reference(local, ["hello world"])[0], atol=1e-5)

    raw = await http.post("/v1/embeddings", json={**body, "encoding_format": "base64"})
    encoded = raw.json()["data"][0]["embedding"]
    decoded = np.frombuffer(base64.b64decode(encoded), dtype="<f4")
    assert decoded.tolist() == vector  # the same float32 values, exactly


async def test_token_id_inputs(sdk: openai.AsyncOpenAI, local: Any) -> None:
    ids = [tokens(local, s) for s in SENTENCES[:2]]
    one = await sdk.embeddings.create(model=BERT, input=ids[0], encoding_format="float")
    many = await sdk.embeddings.create(model=BERT, input=ids, encoding_format="float")
    expected = reference(local, SENTENCES[:2])
    np.testing.assert_allclose(one.data[0].embedding, expected[0], atol=1e-5)
    np.testing.assert_allclose([d.embedding for d in many.data], expected, atol=1e-5)
    assert many.usage.prompt_tokens == len(ids[0]) + len(ids[1])


async def test_dimensions(sdk: openai.AsyncOpenAI, local: Any) -> None:
    reply = await sdk.embeddings.create(
        model=BERT, input=SENTENCES[0], dimensions=8, encoding_format="float"
    )
    vector = np.array(reply.data[0].embedding)
    full = reference(local, SENTENCES[:1])[0][:8]
    np.testing.assert_allclose(vector, full / np.linalg.norm(full), atol=1e-5)
    with pytest.raises(openai.BadRequestError) as info:
        await sdk.embeddings.create(model=BERT, input="hello", dimensions=33)
    assert info.value.param == "dimensions" and "32" in info.value.message


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": BERT, "input": []}, "input"),
        ({"model": BERT, "input": ""}, "input"),
        ({"model": BERT, "input": ["a", ""]}, "input[1]"),
        ({"model": BERT, "input": [[2, 3], []]}, "input[1]"),
        ({"model": BERT, "input": ["a", [2, 3]]}, "input"),
        ({"model": BERT, "input": [2, "a"]}, "input"),
        ({"model": BERT, "input": [-1]}, "input[0]"),
        ({"model": BERT, "input": 5}, "input"),
        ({"model": BERT}, "input"),
        ({"input": "a"}, "model"),
        ({"model": BERT, "input": "a", "encoding_format": "int8"}, "encoding_format"),
        ({"model": BERT, "input": "a", "dimensions": 0}, "dimensions"),
        ({"model": BERT, "input": ["a"] * 2049}, "input"),
    ],
)
async def test_malformed_requests(http: httpx.AsyncClient, body: Any, param: str) -> None:
    r = await http.post("/v1/embeddings", json=body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"


async def test_too_long_input_names_its_index(http: httpx.AsyncClient, app: Starlette) -> None:
    r = await http.post("/v1/embeddings", json={"model": BERT, "input": ["ok", LONG]})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == "input[1]"
    assert error["code"] == "context_length_exceeded"
    assert "122 tokens" in error["message"] and "64" in error["message"]
    # The worker is still serving.
    r = await http.post("/v1/embeddings", json={"model": BERT, "input": "ok"})
    assert r.status_code == 200
    assert gateway_of(app).registry.resolve(BERT).status().state == "ready"


async def test_truncate_model_cuts_long_inputs(sdk: openai.AsyncOpenAI, local: Any) -> None:
    reply = await sdk.embeddings.create(model=CUT, input=[LONG, "hello"], encoding_format="float")
    assert reply.usage.prompt_tokens == 64 + 3
    expected = reference(local, [LONG], max_length=64)[0]
    np.testing.assert_allclose(reply.data[0].embedding, expected, atol=1e-5)


async def test_endpoints_check_the_model_kind(
    sdk: openai.AsyncOpenAI, http: httpx.AsyncClient, app: Starlette
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await sdk.chat.completions.create(model=BERT, messages=[{"role": "user", "content": "x"}])
    assert info.value.param == "model"
    assert "/v1/embeddings" in info.value.message
    r = await http.post("/v1/completions", json={"model": BERT, "prompt": "x"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "model"
    with pytest.raises(openai.BadRequestError) as info:
        await sdk.embeddings.create(model=LM, input="x")
    assert info.value.param == "model"
    assert "/v1/chat/completions" in info.value.message
    assert gateway_of(app).registry.resolve(LM).status().state == "unloaded"
    with pytest.raises(openai.NotFoundError) as missing:
        await sdk.embeddings.create(model="text-embedding-3-small", input="x")
    assert BERT in missing.value.message


async def test_concurrent_requests(sdk_b64: openai.AsyncOpenAI, app: Starlette, local: Any) -> None:
    texts = [f"{word} {other}." for word in ("hello", "cat", "dog") for other in ("mat", "food")]
    replies = await asyncio.gather(
        *(sdk_b64.embeddings.create(model=BERT, input=[t, SENTENCES[0]]) for t in texts)
    )
    for text, reply in zip(texts, replies, strict=True):
        np.testing.assert_allclose(
            [d.embedding for d in reply.data], reference(local, [text, SENTENCES[0]]), atol=1e-5
        )
    assert gateway_of(app).registry.resolve(BERT).status().inflight == 0


async def test_model_entry_reports_the_limit(http: httpx.AsyncClient) -> None:
    await http.post("/v1/embeddings", json={"model": BERT, "input": "warm"})
    entry = (await http.get(f"/v1/models/{BERT}")).json()
    assert entry["model_type"] == "embeddings"
    assert entry["context_length"] == 64


async def test_large_replies_are_rendered_off_the_event_loop(
    http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = {"model": BERT, "input": SENTENCES, "encoding_format": "float"}
    inline = (await http.post("/v1/embeddings", json=body)).json()
    monkeypatch.setattr(embeddings_api, "INLINE_VALUES", 0)
    threaded = (await http.post("/v1/embeddings", json=body)).json()
    assert threaded == inline


async def test_tokenize_and_detokenize_with_the_model_tokenizer(
    http: httpx.AsyncClient, local: Any
) -> None:
    text = "a man is eating food"
    r = await http.post(
        "/tokenize", json={"model": BERT, "content": text, "add_special": True, "with_pieces": True}
    )
    assert r.status_code == 200, r.text
    listed = r.json()["tokens"]
    assert [t["id"] for t in listed] == tokens(local, text)  # [CLS] … [SEP]
    assert "".join(t["piece"] for t in listed[1:-1]).strip() == text
    back = await http.post("/detokenize", json={"model": BERT, "tokens": tokens(local, text)[1:-1]})
    assert back.status_code == 200 and back.json()["content"] == text
    chat = await http.post(
        "/tokenize", json={"model": BERT, "messages": [{"role": "user", "content": "x"}]}
    )
    assert chat.status_code == 400 and chat.json()["error"]["param"] == "messages"
