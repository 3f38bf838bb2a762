"""The real ``mlx-gateway`` command, a real lm worker and the OpenAI SDK: a request
whose prompt + max_tokens KV cache could never fit in the memory budget gets a 400
``memory_admission`` that names the numbers; smaller ones are answered. The KV
cache the worker keeps shows in its heartbeats (/v1/models, /metrics)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from .gateway import Gateway, wait_until

pytestmark = pytest.mark.slow

PER_TOKEN = 512  # the tiny llama's KV bytes a token (float32 keys and values)
NEED = 400_000_000  # memory_estimate: the model's need beside per-request KV


@pytest.fixture(scope="module")
def gateway(tiny_lm_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gw = Gateway(
        tmp_path_factory.mktemp("gw-admission"),
        [
            {
                "served_model_name": "tiny",
                "model_path": str(tiny_lm_path),
                "memory_estimate": NEED,
            }
        ],
        # KV for 300 tokens beside the model's need.
        memory_budget=NEED + 300 * PER_TOKEN,
    )
    yield gw
    gw.stop()


def test_memory_admission_400_with_the_openai_sdk(gateway: Gateway) -> None:
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key="unused", max_retries=0)
    hello = [{"role": "user", "content": "hello world"}]
    # Greedy: the tiny model's answer to this prompt does not meet its end token in 20.
    fits = client.chat.completions.create(
        model="tiny",
        messages=hello,  # type: ignore[arg-type]
        max_tokens=20,
        temperature=0,
    )
    assert fits.usage is not None and fits.usage.completion_tokens == 20
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="tiny", messages=hello, max_tokens=1000)  # type: ignore[arg-type]
    error = info.value.body
    assert isinstance(error, dict)
    assert (error["code"], error["param"], error["type"]) == (
        "memory_admission",
        "max_tokens",
        "invalid_request_error",
    )
    assert "+ 1000 max_tokens" in error["message"]
    assert "153.6 kB the memory budget can ever give this model" in error["message"]
    # Without max_tokens the answer is capped at what fits, not refused.
    capped = client.chat.completions.create(model="tiny", messages=hello)  # type: ignore[arg-type]
    assert capped.usage is not None
    assert capped.usage.prompt_tokens + capped.usage.completion_tokens <= 300
    assert gateway.model("tiny")["state"] == "ready"  # the worker lived through it


def test_the_kept_kv_cache_is_reported(gateway: Gateway) -> None:
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key="unused", max_retries=0)
    hello = [{"role": "user", "content": "hello world, once more"}]
    client.chat.completions.create(model="tiny", messages=hello, max_tokens=10)  # type: ignore[arg-type]

    def kept() -> int:
        detail = gateway.model("tiny")["memory_detail"] or {}
        return int(detail.get("kv_kept", 0))

    # The prompt cache holds at least this conversation: its tokens x 256 bytes.
    assert wait_until(lambda: kept() >= 20 * PER_TOKEN, timeout=10), kept()
    metrics = httpx.get(f"{gateway.base_url}/metrics", timeout=5).text
    assert 'mlx_gateway_model_memory_bytes{model="tiny",kind="kv_kept"}' in metrics


@pytest.fixture(scope="module")
def two_models(tiny_lm_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    entry = {"model_path": str(tiny_lm_path), "memory_estimate": NEED}
    gw = Gateway(
        tmp_path_factory.mktemp("gw-limits"),
        [{"served_model_name": "a", **entry}, {"served_model_name": "b", **entry}],
        memory_budget=3 * NEED,
    )
    yield gw
    gw.stop()


def test_a_model_hears_what_the_budget_leaves_it(two_models: Gateway) -> None:
    client = openai.OpenAI(base_url=f"{two_models.base_url}/v1", api_key="unused", max_retries=0)
    hello = [{"role": "user", "content": "hello"}]

    def limit_of(name: str) -> int:
        detail = two_models.model(name)["memory_detail"] or {}
        return int(detail.get("kv_limit", 0))

    client.chat.completions.create(model="a", messages=hello, max_tokens=2)  # type: ignore[arg-type]
    alone = 3 * NEED - NEED  # nothing else resident: all but a's own need
    assert wait_until(lambda: limit_of("a") == alone, timeout=10), limit_of("a")
    client.chat.completions.create(model="b", messages=hello, max_tokens=2)  # type: ignore[arg-type]
    # b is resident now: a's requests get what b's need leaves (b's need is what
    # its worker measured once it reported, so it is read back rather than assumed).
    assert wait_until(lambda: limit_of("a") < alone, timeout=10), limit_of("a")
    b_need = two_models.model("b")["memory_need"]
    assert abs(limit_of("a") - (alone - b_need)) < 0.2 * b_need
