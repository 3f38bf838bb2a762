"""Speculative decoding through the real ``mlx-gateway`` command and the OpenAI SDK:
the same tiny llama served twice, once with ``draft_model_path`` (a smaller random
llama sharing its tokenizer); greedy answers are the same text, and the drafted
one's usage counts the draft's proposals as OpenAI's prediction tokens."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.fixtures.tiny_models import build_tiny_lm

from .gateway import Gateway

pytestmark = pytest.mark.slow

ASKS = ["hello world", "The quick brown fox jumps over the lazy dog", "count: one, two"]


@pytest.fixture(scope="module")
def gateway(tiny_lm_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    draft = build_tiny_lm(tmp_path_factory.mktemp("draft"), hidden=32, layers=1, seed=7)
    gw = Gateway(
        tmp_path_factory.mktemp("gw-speculative"),
        [
            {"served_model_name": "plain", "model_path": str(tiny_lm_path)},
            {
                "served_model_name": "drafted",
                "model_path": str(tiny_lm_path),
                "draft_model_path": str(draft),
                "num_draft_tokens": 4,
            },
        ],
    )
    yield gw
    gw.stop()


def draft_counter(gateway: Gateway, outcome: str) -> float:
    line = f'mlx_gateway_draft_tokens_total{{model="drafted",outcome="{outcome}"}} '
    metrics = httpx.get(f"{gateway.base_url}/metrics", timeout=5).text.splitlines()
    return sum(float(x.removeprefix(line)) for x in metrics if x.startswith(line))


def test_greedy_answers_are_the_same_with_a_draft_model(gateway: Gateway) -> None:
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key="unused", max_retries=0)
    accepted, rejected = 0, 0
    for ask in ASKS:
        answers = {}
        for model in ("plain", "drafted"):
            answers[model] = client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": ask}],
                max_tokens=30,
                temperature=0,
            )
        plain, drafted = answers["plain"], answers["drafted"]
        assert drafted.choices[0].message.content == plain.choices[0].message.content, ask
        assert drafted.usage is not None and plain.usage is not None
        assert drafted.usage.completion_tokens == plain.usage.completion_tokens
        assert plain.usage.completion_tokens_details is None
        details = drafted.usage.completion_tokens_details
        assert details is not None
        proposed = (details.accepted_prediction_tokens or 0) + (
            details.rejected_prediction_tokens or 0
        )
        assert proposed > 0 and (details.accepted_prediction_tokens or 0) < proposed
        accepted += details.accepted_prediction_tokens or 0
        rejected += details.rejected_prediction_tokens or 0
    # /metrics counts the same proposals.
    assert (draft_counter(gateway, "accepted"), draft_counter(gateway, "rejected")) == (
        accepted,
        rejected,
    )
    # Streamed too, with the usage chunk.
    stream = client.chat.completions.create(
        model="drafted",
        messages=[{"role": "user", "content": ASKS[0]}],
        max_tokens=30,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    first = client.chat.completions.create(
        model="plain", messages=[{"role": "user", "content": ASKS[0]}], max_tokens=30, temperature=0
    )
    assert text == first.choices[0].message.content
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens_details is not None
    assert gateway.model("drafted")["draft_model"].endswith("(4 tokens a round)")
    assert gateway.model("plain")["draft_model"] is None
