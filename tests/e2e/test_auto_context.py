"""``context_length: auto`` on a real lm worker (the tiny llama with 32768
positions), served by a whole ``mlx-gateway launch`` whose memory budget leaves
the model's requests room for about 10,000 tokens of KV cache.

The context the worker reports is checked against what the worker itself
measures: a request that fills the context is served, and the KV cache it left in
the prompt cache (the bytes of its arrays, from the worker's heartbeat) fits in
the KV budget the worker admits requests against; 1,024 tokens more would not.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from .gateway import Gateway, wait_until

pytestmark = pytest.mark.slow

NEED = 400_000_000  # memory_estimate: the model's need beside its requests' KV cache
ROOM = 2_560_000  # budget beyond it: KV bytes for the requests


@pytest.fixture(scope="module")
def gateway(tiny_lm_32k_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    model = {
        "served_model_name": "auto",
        "model_path": str(tiny_lm_32k_path),
        "memory_estimate": NEED,
        "context_length": "auto",
        "prompt_cache_entries": 1,  # the prompt cache then holds the last request only
        "on_demand": False,
    }
    gw = Gateway(tmp_path_factory.mktemp("gw-auto"), [model], memory_budget=NEED + ROOM)
    try:
        assert wait_until(lambda: gw.model("auto")["state"] == "ready", timeout=60), gw.log()
        yield gw
    finally:
        gw.stop()


def chat(gateway: Gateway, text: str, max_tokens: int = 1) -> dict[str, Any]:
    body = {
        "model": "auto",
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    r = httpx.post(f"{gateway.base_url}/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def fp16_bytes_per_token(model: Path) -> int:
    """The least KV bytes a token can take in this model (2-byte elements)."""
    meta = json.loads((model / "config.json").read_text())
    heads = meta["num_attention_heads"]
    head_dim = meta.get("head_dim") or meta["hidden_size"] // heads
    kv_heads = meta.get("num_key_value_heads") or heads
    return 2 * meta["num_hidden_layers"] * kv_heads * head_dim * 2


def test_auto_context_fits_the_measured_kv_cache(gateway: Gateway, tiny_lm_32k_path: Path) -> None:
    entry = gateway.model("auto")
    context = entry["context_length"]
    assert entry["context_window"] == context
    assert context % 1024 == 0 and 1024 <= context <= 32768
    assert "context_length auto: " in gateway.log()

    # Prompt tokens per repeated phrase, from two prompts' usage.
    unit = "hello world "
    short = chat(gateway, unit * 100)["usage"]["prompt_tokens"]
    longer = chat(gateway, unit * 200)["usage"]["prompt_tokens"]
    per_unit = (longer - short) / 100
    base = short - 100 * per_unit
    repeats = int((context - 64 - base) / per_unit)
    usage = chat(gateway, unit * repeats)["usage"]
    tokens = usage["prompt_tokens"] + usage["completion_tokens"]
    assert context - 200 < tokens <= context  # the context is really usable

    def detail() -> dict[str, Any]:
        return gateway.model("auto")["memory_detail"] or {}

    # The prompt cache now holds that request's KV cache, as the worker measured it
    # (a heartbeat still showing the previous, shorter request's cache is waited out).
    least = tokens * fp16_bytes_per_token(tiny_lm_32k_path)
    assert wait_until(lambda: detail().get("kv_kept", 0) >= least, timeout=20), detail()
    measured = detail()
    per_token = measured["kv_kept"] / tokens
    kv_budget = measured["kv_limit"]  # what the worker admits requests against
    assert 0 < kv_budget <= ROOM
    assert context * per_token <= kv_budget  # the chosen context fits …
    assert (context + 1024) * per_token > kv_budget  # … and is the largest that does
