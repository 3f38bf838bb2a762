"""``/v1/rerank`` end to end: the real app, registry and relay, a real rerank worker
process on a tiny random BERT cross-encoder, Cohere's SDK and Jina's HTTP shape; the
scores are checked against a NumPy forward pass over the model's safetensors, on
pairs tokenized by transformers (not by the worker's code)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import cohere
import httpx
import pytest
import pytest_asyncio
from starlette.applications import Starlette

from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.supervisor.app import create_app
from mlx_gateway.supervisor.config import GatewayConfig, ServerConfig
from mlx_gateway.supervisor.config.kinds import model_entry
from mlx_gateway.supervisor.pool.spawn import worker_command
from tests.fixtures.tiny_cross_encoder import reference_scores

from ..fakes import fake_command

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

CE = "tiny-ce"
LM = "lab/fake/ok"
QUERY = "a man is eating"
DOCS = [
    "the stock market crashed today",
    "a man is eating food",
    "hello world",
    "the cat sits on the mat",
]
LONG_HEAD = "the quick brown fox jumps over the lazy dog " * 12  # ~108 tokens: over 64


def command(spec: WorkerSpec, endpoint: str) -> list[str]:
    if spec.kind == "rerank":
        return worker_command(spec, endpoint)
    return fake_command(spec, endpoint)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def app(tiny_cross_encoder_path: Path) -> AsyncIterator[Starlette]:
    config = GatewayConfig(
        server=ServerConfig(shutdown_grace=1.0),
        models=[
            model_entry(
                model_path=str(tiny_cross_encoder_path),
                served_model_name=CE,
                model_type="rerank",
                max_batch_tokens=256,
            ),
            model_entry(model_path=LM, served_model_name=LM),
        ],
    )
    app = create_app(config, command=command)
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture(scope="module")
def tokenizer(tiny_cross_encoder_path: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_cross_encoder_path))


def pair(tokenizer: Any, query: str, doc: str, **kwargs: Any) -> tuple[list[int], list[int]]:
    """The pair as transformers encodes it (what sentence-transformers feeds the model)."""
    enc = tokenizer(query, doc, **kwargs)
    return list(enc["input_ids"]), list(enc["token_type_ids"])


def expected(path: Path, tokenizer: Any, query: str, docs: list[str]) -> list[float]:
    return reference_scores(path, [pair(tokenizer, query, d) for d in docs])


async def post(http: httpx.AsyncClient, body: dict[str, Any], path: str = "/v1/rerank") -> Any:
    r = await http.post(path, json=body)
    assert r.status_code == 200, r.text
    return r.json()


async def test_scores_match_numpy_and_are_sorted(
    http: httpx.AsyncClient, tiny_cross_encoder_path: Path, tokenizer: Any
) -> None:
    reply = await post(http, {"model": CE, "query": QUERY, "documents": DOCS})
    want = expected(tiny_cross_encoder_path, tokenizer, QUERY, DOCS)
    results = reply["results"]
    assert sorted(r["index"] for r in results) == [0, 1, 2, 3]
    for r in results:
        assert r["relevance_score"] == pytest.approx(want[r["index"]], abs=2e-5)
        assert "document" not in r
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True)
    assert [r["index"] for r in results] == sorted(range(4), key=lambda i: -want[i])
    read = sum(len(pair(tokenizer, QUERY, d)[0]) for d in DOCS)
    assert reply["usage"] == {"prompt_tokens": read, "total_tokens": read}
    assert reply["model"] == CE and reply["id"].startswith("rerank-")


async def test_top_n_and_documents_in_jina_shape(http: httpx.AsyncClient) -> None:
    docs: list[Any] = [{"text": d} for d in DOCS]
    full = await post(http, {"model": CE, "query": QUERY, "documents": docs})
    reply = await post(
        http,
        {"model": CE, "query": QUERY, "documents": docs, "top_n": 2, "return_documents": True},
        path="/rerank",
    )
    assert len(reply["results"]) == 2
    for got, best in zip(reply["results"], full["results"][:2], strict=True):
        assert got["index"] == best["index"]
        assert got["relevance_score"] == best["relevance_score"]
        assert got["document"] == {"text": DOCS[got["index"]]}
    many = await post(http, {"model": CE, "query": QUERY, "documents": DOCS, "top_n": 99})
    assert len(many["results"]) == 4


async def test_a_long_document_is_truncated_to_the_window(
    http: httpx.AsyncClient, tiny_cross_encoder_path: Path, tokenizer: Any
) -> None:
    doc = LONG_HEAD + "a man is eating food"
    assert len(pair(tokenizer, QUERY, doc)[0]) > 64
    reply = await post(http, {"model": CE, "query": QUERY, "documents": [doc, "hello"]})
    cut = pair(tokenizer, QUERY, doc, truncation="only_second", max_length=64)
    assert len(cut[0]) == 64
    (want,) = reference_scores(tiny_cross_encoder_path, [cut])
    got = next(r for r in reply["results"] if r["index"] == 0)
    assert got["relevance_score"] == pytest.approx(want, abs=2e-5)


async def test_max_tokens_per_doc_cuts_each_document(
    http: httpx.AsyncClient, tiny_cross_encoder_path: Path, tokenizer: Any
) -> None:
    reply = await post(
        http, {"model": CE, "query": QUERY, "documents": DOCS, "max_tokens_per_doc": 2}
    )
    q = len(tokenizer(QUERY, add_special_tokens=False)["input_ids"])
    cut = [pair(tokenizer, QUERY, d, truncation="only_second", max_length=q + 3 + 2) for d in DOCS]
    want = reference_scores(tiny_cross_encoder_path, cut)
    for r in reply["results"]:
        assert r["relevance_score"] == pytest.approx(want[r["index"]], abs=2e-5)
    assert reply["usage"]["prompt_tokens"] == sum(len(c[0]) for c in cut)


async def test_best_window_scores_a_long_document_by_its_best_window(
    http: httpx.AsyncClient, tiny_cross_encoder_path: Path, tokenizer: Any
) -> None:
    doc = LONG_HEAD + "a man is eating food"
    body = {"model": CE, "query": QUERY, "documents": [doc], "max_chunks_per_doc": 4}
    (result,) = (await post(http, body))["results"]
    # Every window is a pair of the query and a slice of the document's tokens.
    ids = tokenizer(doc, add_special_tokens=False)["input_ids"]
    q = tokenizer(QUERY, add_special_tokens=False)["input_ids"]
    budget = 64 - len(q) - 3
    stride = budget // 4
    starts = range(0, len(ids) - stride, budget - stride)
    windows = [ids[s : s + budget] for s in starts][:4]
    assert len(windows) >= 2 and windows[-1][-1] == ids[-1]
    rows = [
        (
            [tokenizer.cls_token_id, *q, tokenizer.sep_token_id, *w, tokenizer.sep_token_id],
            [0] * (len(q) + 2) + [1] * (len(w) + 1),
        )
        for w in windows
    ]
    want = reference_scores(tiny_cross_encoder_path, rows)
    assert result["relevance_score"] == pytest.approx(max(want), abs=2e-5)


async def test_concurrent_requests_get_their_own_scores(
    http: httpx.AsyncClient, tiny_cross_encoder_path: Path, tokenizer: Any
) -> None:
    queries = [QUERY, "the cat", "hello world", "stock market today"]
    bodies = [{"model": CE, "query": q, "documents": DOCS} for q in queries]
    replies = await asyncio.gather(*(post(http, b) for b in bodies))
    for q, reply in zip(queries, replies, strict=True):
        want = expected(tiny_cross_encoder_path, tokenizer, q, DOCS)
        for r in reply["results"]:
            assert r["relevance_score"] == pytest.approx(want[r["index"]], abs=2e-5)


async def test_cohere_sdk(
    http: httpx.AsyncClient, tiny_cross_encoder_path: Path, tokenizer: Any
) -> None:
    client = cohere.AsyncClientV2(api_key="unused", base_url="http://gw", httpx_client=http)
    reply = await client.rerank(model=CE, query=QUERY, documents=DOCS, top_n=3)
    want = expected(tiny_cross_encoder_path, tokenizer, QUERY, DOCS)
    assert [r.index for r in reply.results] == sorted(range(4), key=lambda i: -want[i])[:3]
    for r in reply.results:
        assert r.relevance_score == pytest.approx(want[r.index], abs=2e-5)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": CE, "query": QUERY, "documents": []}, "documents"),
        ({"model": CE, "documents": DOCS}, "query"),
        ({"model": CE, "query": "", "documents": DOCS}, "query"),
        ({"model": CE, "query": QUERY, "documents": ["a", ""]}, "documents[1]"),
        ({"model": CE, "query": QUERY, "documents": DOCS, "top_n": 0}, "top_n"),
        ({"model": "no-such-model", "query": QUERY, "documents": DOCS}, "model"),
        ({"model": LM, "query": QUERY, "documents": DOCS}, "model"),
        ({"model": CE, "query": QUERY, "documents": [{"title": "x"}]}, "documents"),
    ],
)
async def test_bad_input_is_a_400_naming_the_field(
    http: httpx.AsyncClient, body: dict[str, Any], param: str
) -> None:
    r = await http.post("/v1/rerank", json=body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] is None or error["param"].startswith(param), error
    assert param.split("[")[0] in error["message"] or error["param"] == param
    if body["model"] == "no-such-model":
        assert CE in error["message"] and LM in error["message"]
    # the worker still serves
    ok = await post(http, {"model": CE, "query": QUERY, "documents": ["hello"]})
    assert len(ok["results"]) == 1
