"""``/v1/rerank`` on an LM reranker end to end: a real rerank worker process on a tiny
random llama whose vocabulary has "yes" and "no"; prompts built and tokenized here
as the Qwen3-Reranker model card does (with transformers), scores from a NumPy
forward pass over the safetensors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from starlette.applications import Starlette

from mlx_gateway.supervisor.app import create_app
from mlx_gateway.supervisor.config import GatewayConfig, ServerConfig
from mlx_gateway.supervisor.config.kinds import model_entry
from tests.fixtures.tiny_lm_reranker import reference_yes_probability

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

LMR = "tiny-lm-reranker"
WINDOW = 320
INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
QUERY = "hello world"
DOCS = ["the quick brown fox", "count the steps and stop", "one, two, three"]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def app(tiny_lm_reranker_path: Path) -> AsyncIterator[Starlette]:
    config = GatewayConfig(
        server=ServerConfig(shutdown_grace=1.0),
        models=[
            model_entry(
                model_path=str(tiny_lm_reranker_path),
                served_model_name=LMR,
                model_type="rerank",
                context_length=WINDOW,
            )
        ],
    )
    app = create_app(config)
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture(scope="module")
def tokenizer(tiny_lm_reranker_path: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_lm_reranker_path))


def model_card_ids(
    tokenizer: Any, query: str, doc: str, instruction: str = INSTRUCTION
) -> list[int]:
    """The model card's recipe: prefix, the pair text (cut at its end), suffix."""
    prefix = (
        "<|im_start|>system\nJudge whether the Document meets the requirements based on the "
        'Query and the Instruct provided. Note that the answer can only be "yes" or "no".'
        "<|im_end|>\n<|im_start|>user\n"
    )
    suffix = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    head = tokenizer.encode(prefix, add_special_tokens=False)
    tail = tokenizer.encode(suffix, add_special_tokens=False)
    body = tokenizer.encode(
        f"<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {doc}",
        add_special_tokens=False,
    )
    return [*head, *body[: WINDOW - len(head) - len(tail)], *tail]


async def post(http: httpx.AsyncClient, body: dict[str, Any]) -> Any:
    r = await http.post("/v1/rerank", json=body)
    assert r.status_code == 200, r.text
    return r.json()


async def test_scores_are_the_yes_probability(
    http: httpx.AsyncClient, tiny_lm_reranker_path: Path, tokenizer: Any
) -> None:
    reply = await post(http, {"model": LMR, "query": QUERY, "documents": DOCS})
    rows = [model_card_ids(tokenizer, QUERY, d) for d in DOCS]
    want = [reference_yes_probability(tiny_lm_reranker_path, ids) for ids in rows]
    assert [r["index"] for r in reply["results"]] == sorted(range(3), key=lambda i: -want[i])
    for r in reply["results"]:
        assert r["relevance_score"] == pytest.approx(want[r["index"]], abs=2e-5)
    assert reply["usage"]["prompt_tokens"] == sum(len(ids) for ids in rows)


async def test_instruction_and_truncation(
    http: httpx.AsyncClient, tiny_lm_reranker_path: Path, tokenizer: Any
) -> None:
    long_doc = "count the steps and stop when done! " * 60
    assert len(model_card_ids(tokenizer, QUERY, long_doc)) == WINDOW  # it was cut
    task = "Find the text that counts"
    body = {"model": LMR, "query": QUERY, "documents": [long_doc, "one"], "instruction": task}
    reply = await post(http, body)
    for r in reply["results"]:
        ids = model_card_ids(tokenizer, QUERY, body["documents"][r["index"]], task)
        want = reference_yes_probability(tiny_lm_reranker_path, ids)
        assert r["relevance_score"] == pytest.approx(want, abs=2e-5)


async def test_concurrent_requests_and_windows(
    http: httpx.AsyncClient, tiny_lm_reranker_path: Path, tokenizer: Any
) -> None:
    queries = ["hello", "the quick fox", "steps"]
    replies = await asyncio.gather(
        *(post(http, {"model": LMR, "query": q, "documents": DOCS}) for q in queries)
    )
    for q, reply in zip(queries, replies, strict=True):
        for r in reply["results"]:
            ids = model_card_ids(tokenizer, q, DOCS[r["index"]])
            want = reference_yes_probability(tiny_lm_reranker_path, ids)
            assert r["relevance_score"] == pytest.approx(want, abs=2e-5)
    long_doc = "count the steps and stop when done! " * 60
    windowed = await post(
        http, {"model": LMR, "query": QUERY, "documents": [long_doc], "max_chunks_per_doc": 8}
    )
    cut = await post(http, {"model": LMR, "query": QUERY, "documents": [long_doc]})
    assert windowed["usage"]["prompt_tokens"] > 2 * cut["usage"]["prompt_tokens"]  # several windows
    assert 0.0 < windowed["results"][0]["relevance_score"] < 1.0
